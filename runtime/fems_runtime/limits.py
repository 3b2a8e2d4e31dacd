"""The cost limit of a run (§15.6): ``--max-cost USD`` or ``meta: max_cost``.

The amount counted is what the store records: the session's cost when the run starts (a
resumed session has spent before), then the cost of every model call (the limit is a
subscriber of the run's events, :mod:`fems_runtime.events`, and the call's cost is what its
message is stored with). At the end of each turn it checks it, so the run stops after the turn
that passed the limit, with that turn checkpointed: ``--resume`` with a higher limit goes on.
A model with no known price counts as free and is named once in a warning. In a batch the
amount is the whole batch's (``fems2py batch --max-cost``): the sessions of the batch that
are not this one count too, through ``elsewhere``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from fems_runtime.events import ModelCallEnded, RunEvent, TurnEnded
from fems_runtime.records import RunError

OFFLINE_PREFIX = "fems/"  # the built-in models (§15.3): free, and known to be
TURNS = ("ai", "human")  # the turns after which the limit is checked (a mind turn is one)


class CostLimit:
    """US dollars a run (or a batch) may spend, against the cost the store recorded.

    ``elsewhere`` returns what other sessions counted with this one have spent (the rest of a
    batch); ``what`` names what is counted and ``again`` says how to go on, in the run error.
    """

    def __init__(
        self,
        limit: float,
        *,
        elsewhere: Callable[[], float] | None = None,
        what: str = "the session",
        again: str = "resume with a higher limit (--resume --max-cost USD)",
    ) -> None:
        if not (isinstance(limit, int | float) and math.isfinite(limit) and limit >= 0):
            raise RunError(f"the cost limit must be a number of US dollars ≥ 0, not {limit!r}")
        self.limit = float(limit)
        self.spent = 0.0
        self.elsewhere = elsewhere
        self.what = what
        self.again = again
        self.session: int | None = None
        self.warn: Callable[[str], None] = lambda text: None
        self._unpriced: set[str] = set()

    def start(self, session: int, spent: float, warn: Callable[[str], None]) -> None:
        """Count for ``session``, which has already spent ``spent`` (a resumed one)."""
        self.session, self.spent, self.warn = session, float(spent), warn

    def add(self, cost: float | None, model: str | None, usage: bool = True) -> None:
        """One model call's recorded cost; a call without one is free, and its model (unless
        it is a built-in offline model) is named in a warning the first time. ``usage`` False:
        the endpoint reported no token counts, so not even a known price gives a cost."""
        if model is None:
            return
        if cost is not None:
            self.spent += cost
        elif model not in self._unpriced and not model.startswith(OFFLINE_PREFIX):
            self._unpriced.add(model)
            why = "has no known price" if usage else "reported no token usage"
            self.warn(
                f"warning: model {model} {why}: its calls count as free against the cost "
                f"limit of ${self.limit:g} (a model-map entry may give input_cost_per_token and "
                "output_cost_per_token, §15.6)"
            )

    def __call__(self, event: RunEvent) -> None:
        """The run's subscriber: each model call's cost counts, and the end of each turn of a
        model or a person (its messages submitted) checks the amount."""
        if isinstance(event, ModelCallEnded) and event.outcome == "ok":
            usage = event.input_tokens is not None or event.output_tokens is not None
            self.add(event.cost, event.response_model or event.request_model, usage)
        elif isinstance(event, TurnEnded) and event.outcome == "ok" and event.kind in TURNS:
            self.check(event.where.action or "")

    @property
    def total(self) -> float:
        """What counts against the limit: this session's spending and the others'."""
        return self.spent + (self.elsewhere() if self.elsewhere is not None else 0.0)

    def check(self, action: str) -> None:
        """After a turn: a :class:`RunError` once the amount has passed the limit."""
        total = self.total
        if total > self.limit:
            raise RunError(
                f"{self.what}'s recorded cost ${total:.4f} passed the cost limit "
                f"${self.limit:g} after action {action}; the turn is saved: {self.again} "
                "to go on"
            )


def cost_limit(option: float | CostLimit | None, meta: Mapping[str, Any]) -> CostLimit | None:
    """The run's limit: the ``--max-cost`` option (a number, or a batch's own limit) over
    ``meta: max_cost``; None when neither is given."""
    if isinstance(option, CostLimit):
        return option
    value = option if option is not None else meta.get("max_cost")
    return None if value is None else CostLimit(value)
