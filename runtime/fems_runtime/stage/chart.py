"""The flow picture of the stage (§17): the chart of ``fems2py graph`` and which of its nodes a
run step is in.

The chart is drawn from the script's ``.fems`` source (``fems2py run`` names it; ``python
game.py`` looks next to the module) by a *chart drawer*: a function registered under the entry
point group ``fems_runtime.charts`` by an installed compiler (fems2py registers
``fems2py.graph:stage_chart``). The runtime never imports the compiler: it asks whoever is
registered, so the dependency points from the compiler to the runtime only. Without a drawer or
a source (a vendored module) the page shows the dialog and the views, and says why the picture
is missing.

A drawer takes the ``.fems`` path and returns ``(mermaid, nodes)``, each node a tuple ``(id,
name, action or None, line)`` as :class:`ChartNode` has them; it raises ``ValueError`` with a
one-line reason when the script cannot be drawn (it has errors).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

CHART_DRAWERS = "fems_runtime.charts"
"""The entry point group of chart drawers (see the module's docstring)."""

_NUMBERED = re.compile(r"^(?P<action>.+?)(?:_\d+|@\d+:\d+)$")


@dataclass(frozen=True)
class ChartNode:
    """A drawn node: Mermaid id, flow node name, the action it runs, its ``.fems`` line."""

    id: str
    name: str
    action: str | None
    line: int


@dataclass(frozen=True)
class FlowChart:
    """Mermaid text and its nodes, or ``missing``: why there is no picture."""

    mermaid: str | None = None
    nodes: tuple[ChartNode, ...] = ()
    missing: str | None = None

    def node_id(self, node: str, line: int | None) -> str | None:
        """The chart node a run step at ``node`` (a generated node id) and ``line`` is in:
        the node of that name; else an anonymous node drawn for what the id is named after
        (``vote_2``/``vote@12:5``: an action; ``&Day``: a module call; ``for_wolf``: a
        loop); of several, the one nearest to ``line``."""
        match = _NUMBERED.match(node)
        stem = match.group("action") if match else node
        loop = stem.split("_", 1)[0] if stem.startswith(("for_", "par_")) else None
        tiers: tuple[Callable[[ChartNode], bool], ...] = (
            lambda n: n.name == node,
            lambda n: n.action == stem or n.name.startswith(f"{stem}@"),
            lambda n: loop is not None and n.name.startswith(f"{loop}@"),
        )
        for fits in tiers:
            found = [n for n in self.nodes if fits(n)]
            if found:
                return min(found, key=lambda n: abs(n.line - (line or n.line))).id
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "mermaid": self.mermaid,
            "missing": self.missing,
            "nodes": [n.id for n in self.nodes],
        }


def chart_for_source(sources: Sequence[Path], sha256: str | None = None) -> FlowChart:
    """The chart of the script at the first of ``sources`` that exists and, when ``sha256``
    is given (the source the module or session was built from), has that hash: a source
    edited since would draw another flow."""
    found = [path for path in sources if path.is_file()]
    if not found:
        looked = ", ".join(str(path) for path in sources)
        return FlowChart(missing=f"it is drawn from the script's source, not found here ({looked})")
    matching = [path for path in found if sha256 is None or _sha256(path) == sha256]
    if not matching:
        return FlowChart(missing=f"{found[0]} has changed since this run was built from it")
    source = matching[0]
    drawers = sorted(entry_points(group=CHART_DRAWERS), key=lambda point: point.name)
    if not drawers:
        return FlowChart(missing="it is drawn by fems2py, which is not installed here")
    draw = drawers[0].load()
    try:
        mermaid, nodes = draw(source)
    except ValueError as error:
        return FlowChart(missing=str(error))
    return FlowChart(mermaid, tuple(ChartNode(*node) for node in nodes))


def source_candidates(module_file: str, script_file: str) -> list[Path]:
    """Where a generated module's script may be: beside the module, in the folder above it
    (``build/``, ``.fems-cache/``), in the working directory."""
    folder = Path(module_file).resolve().parent
    name = Path(script_file).name
    places = [folder, folder.parent, Path.cwd()]
    return list(dict.fromkeys(place / name for place in places))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
