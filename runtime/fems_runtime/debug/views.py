"""What a stopped branch shows, as the protocol's scopes and variables: the script's
variables (module locals, then globals), the actors, the turn about to run (the context its
model will receive, the rendered prompt, the outs) and the last turn (reply, signals applied,
reasoning). Containers get a reference the client expands; references live until the run
goes on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from fems_runtime.debug.debugger import Debugger, Stop
from fems_runtime.values import format_value
from fems_runtime.variables import Frame

if TYPE_CHECKING:
    from fems_runtime.llm import ModelClient

Children = Callable[[], list[tuple[str, Any]]]


class Views:
    """The variable references of one stop (cleared when the run goes on)."""

    def __init__(self, debugger: Debugger) -> None:
        self.debugger = debugger
        self._children: dict[int, Children] = {}
        self.scope_frames: dict[int, Frame] = {}  # a scope's reference → frame it assigns in
        self.python_frames: dict[int, FrameType] = {}  # a code: frame's Locals → that frame

    def clear(self) -> None:
        self._children.clear()
        self.scope_frames.clear()
        self.python_frames.clear()

    def reference(self, children: Children) -> int:
        ref = len(self._children) + 1
        self._children[ref] = children
        return ref

    def variable(self, name: str, value: Any) -> dict[str, Any]:
        """One variable as the protocol shows it; lists and dicts expand."""
        ref = 0
        if isinstance(value, Mapping):
            ref = self.reference(lambda: [(str(k), v) for k, v in value.items()])
        elif isinstance(value, list | tuple):
            ref = self.reference(lambda: [(f"[{i}]", v) for i, v in enumerate(value)])
        shown = value if isinstance(value, str) and not value.startswith("@") else None
        text = repr(shown) if shown is not None else format_value(value)
        return {"name": name, "value": text, "variablesReference": ref, "type": _type(value)}

    def set_answer(self, name: str, value: Any) -> dict[str, Any]:
        """The body of a setVariable response: the value as it is now shown."""
        shown = self.variable(name, value)
        return {key: shown[key] for key in ("value", "type", "variablesReference")}

    def variables(self, ref: int) -> list[dict[str, Any]]:
        children = self._children.get(ref)
        return [self.variable(name, value) for name, value in children()] if children else []

    def scopes(self, stop: Stop) -> list[dict[str, Any]]:
        """Locals, Globals, Actors, and Turn / Last turn when there is one."""
        frame = stop.ctx.frame
        root = frame.variables.root
        seen = frame.visible()
        local_names = [name for name in seen if name not in root.names]
        scopes = [
            ("Locals", lambda: [(n, seen[n]) for n in local_names], frame),
            ("Globals", lambda: [(n, seen[n]) for n in root.names], frame),
            ("Actors", lambda: self._actors(frame), None),
        ]
        if stop.turn is not None:
            scopes.append(("Turn", lambda: _turn(stop), None))
        last = self.debugger.last.get(stop.branch.id)
        if last is not None:
            scopes.append(("Last turn", lambda: _last(last), None))
        out = []
        for name, children, assigns in scopes:
            ref = self.reference(children)
            if assigns is not None:
                self.scope_frames[ref] = assigns
            out.append({"name": name, "variablesReference": ref, "expensive": False})
        return out

    def _actors(self, frame: Frame) -> list[tuple[str, Any]]:
        variables = frame.variables
        models = self.debugger.services.turns.models
        out: list[tuple[str, Any]] = []
        for name, spec in variables.actors.items():
            info = {k: v for k, v in variables.actor_info(name).items() if v not in (None, False)}
            if not spec.is_human:
                info["model"] = _model(models, spec.source)
            out.append((name, info))
        return out

    def python_scopes(self, frame: FrameType) -> list[dict[str, Any]]:
        """A frame of a ``code:`` file: its locals and the module's own globals."""
        local = dict(frame.f_locals)
        shared = {
            name: value
            for name, value in frame.f_globals.items()
            if not name.startswith("__")
            and not callable(value)
            and not isinstance(value, ModuleType)
        }
        locals_ref = self.reference(lambda: list(local.items()))
        self.python_frames[locals_ref] = frame
        return [
            {"name": "Locals", "variablesReference": locals_ref},
            {"name": "Globals", "variablesReference": self.reference(lambda: list(shared.items()))},
        ]


def _model(models: ModelClient, source: str | None) -> str:
    """The model an AI actor's turns go to (§15.2), as the run resolves it."""
    try:
        return str(models.resolve(None, source).model)
    except Exception as error:  # an unresolvable alias is what the run will report
        return f"<{error}>"


def _turn(stop: Stop) -> list[tuple[str, Any]]:
    """The turn about to run: who, which model, the messages exactly as they will be sent;
    for a replayed turn, the reply recorded instead of its context (nothing is sent)."""
    turn = stop.turn
    assert turn is not None
    messages = turn.messages
    context = {f"[{i}] {m.get('role', '')}": m.get("content", "") for i, m in enumerate(messages)}
    outs = {
        out.target + (f".{out.key}" if out.key else ""): out.type or "text"
        for out in turn.spec.outs or ()
    }
    sent = ("context", context) if turn.recorded is None else ("replayed reply", turn.recorded)
    return [
        ("action", turn.spec.action),
        ("executor", turn.actor),
        ("turn", turn.turn),
        ("model", turn.model),
        sent,
        ("prompt", turn.prompt),
        ("outs", outs),
    ]


def _last(last: Any) -> list[tuple[str, Any]]:
    return [
        ("action", last.action),
        ("reply", last.reply),
        ("signals", last.assigned),
        ("reasoning", last.reasoning),
    ]


def _type(value: Any) -> str:
    if isinstance(value, str) and value.startswith("@"):
        return "actor"
    return type(value).__name__


__all__ = ["Views"]
