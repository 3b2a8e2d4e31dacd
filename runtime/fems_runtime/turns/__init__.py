"""Turns: one `@ai`, `@human` or `@mind` action run end to end (§9, §10, §13, §15).

A generated module's ``await ctx.ai("@wolf", prompt=…, outs=…)`` makes the action's
:class:`~fems_runtime.specs.TurnSpec` (:mod:`fems_runtime.flow`) and hands it to the run's
:class:`TurnServices` (``ai_turn``, ``human_turn``, ``mind_turn``), which locates the turn's
errors at the action. The turn itself is a :class:`~fems_runtime.turns.turn.Turn`: who acts and
who is in scope, the rendered texts, the record key and the turn id.

- :mod:`.shared`: what every turn of a run shares;
- :mod:`.services`: opening it (store, session, resume), and the entry of each turn;
- :mod:`.turn`: the turn's state, storing its messages with its record, checking a reply;
- :mod:`.calls`: one model call: cut to the window, streamed, interruptible, traced;
- :mod:`.ai`: the attempts of an AI turn, its tool rounds, the validation loop, its records;
- :mod:`.human`: a person's turn, and the `@mind` choice between the two.

What the model receives (context, memory, system blocks) is built in :mod:`fems_runtime.context`.
"""

from fems_runtime.turns.calls import INTERRUPTED
from fems_runtime.turns.services import TurnServices
from fems_runtime.turns.shared import HumanInputs, RunWarnings

__all__ = ["INTERRUPTED", "HumanInputs", "RunWarnings", "TurnServices"]
