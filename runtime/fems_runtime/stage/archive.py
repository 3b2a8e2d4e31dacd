"""Sessions of a database opened after the fact, read-only (``fems2py serve``, §17): the same
views as a live stage, no running nodes and no answers."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from fems_runtime.stage.chart import FlowChart
from fems_runtime.stage.live import AnswerRefused
from fems_runtime.stage.view import SessionView

if TYPE_CHECKING:
    from fems_runtime.store import Store
    from fems_runtime.store.sessions import SessionNode


class Archive:
    """The sessions of ``store``; ``chart_for`` draws a session's flow from its row."""

    def __init__(self, store: Store, chart_for: Callable[[Mapping[str, Any]], FlowChart]) -> None:
        self.store = store
        self._chart_for = chart_for

    def sessions(self) -> list[dict[str, Any]]:
        """Every session as a tree of forks (§17.1): the first sessions, newest first, each
        with the sessions forked from it (``children``)."""
        return [self._tree_json(node) for node in self.store.session_tree()]

    def _tree_json(self, node: SessionNode) -> dict[str, Any]:
        summary = SessionView(self.store, node.session["id"]).summary()
        return {**summary, "children": [self._tree_json(child) for child in node.children]}

    def session_view(self, number: int) -> SessionView:
        if self.store.session(number) is None:
            raise KeyError(number)
        return SessionView(self.store, number)

    @functools.cache  # noqa: B019 - one archive per process, a handful of sessions
    def chart_of(self, number: int) -> FlowChart:
        return self._chart_for(self.store.session(number) or {})

    def last_call(self, seat: str) -> dict[str, Any] | None:
        """Model calls are traced, not stored: a stored session has none to show."""
        return None

    def state(self, seat: str = "") -> dict[str, Any]:
        return {
            "status": "archive",
            "error": None,
            "messages": 0,
            "running": [],
            "waiting": [],
            "seat": seat,
            "writing": [],
        }

    async def changes(self, seat: str = "") -> AsyncIterator[dict[str, Any]]:
        """One state: nothing changes in a finished session."""
        yield self.state(seat)
        await asyncio.Event().wait()

    def answer(self, number: int, text: str, values: Mapping[str, Any]) -> None:
        raise AnswerRefused("this stage shows stored sessions and takes no answers")
