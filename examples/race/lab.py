"""The slow half of the race example: a researcher who thinks before writing."""

from __future__ import annotations

import time


def ponder(seconds: float) -> str:
    """Think for `seconds` (this runs in a worker thread), then leave a draft answer."""
    time.sleep(seconds)
    return "(Darwin is still drafting)"
