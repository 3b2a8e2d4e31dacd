"""The runtime's version, kept in one place; generated modules check it at import (§16.1)."""

__version__ = "0.1.0"
