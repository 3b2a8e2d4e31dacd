"""Recursive-descent parser: ``.fems`` text → :class:`fems2py.nodes.Script` plus diagnostics.

One ``parse_<construct>`` method per construct, in one module per part of a script:

| module | what it parses |
|---|---|
| ``base.py`` | diagnostics, spans, the line structure (§1.2) and tokens: what every part uses |
| ``text.py`` | text values (§1.5) and value literals (§4.2) |
| ``definitions.py`` | ``meta:``, ``vars:``, ``code:``, ``sketch:`` (§3–§5) |
| ``actors.py`` | ``actors:`` and blueprints (§6) |
| ``fields.py`` | ``scope:``, ``in:``, ``out:`` and ``@assign`` statements (§9.3–§9.6, §10.4) |
| ``flow_nodes.py`` | flow nodes, their bindings and binding lines (§12.1) |
| ``flows.py`` | ``mainflow:``/``flow:`` lines, chains, forks, loops, joins (§12) |
| ``actions.py`` | action headers and the field table (§9), ``memory``/``context`` methods (§8) |
| ``blocks.py`` | the script's and modules' blocks (§2, §11) and :func:`parse` |

Each module's class builds on the one above it in this table, so a module only ever calls
what is defined above it. Recovery is per top-level block and per line, so one run reports
every error of a file.
"""

from fems2py.parser.blocks import Parser, parse

__all__ = ["Parser", "parse"]
