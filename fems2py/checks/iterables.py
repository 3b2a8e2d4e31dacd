"""What a ``for``/``par`` loop goes over, where the build can know it (§12.7): a variable whose
declared value is a number, ``true``/``false`` or a text, and that nothing in the script assigns
as a whole, is never a list, so looping over it is a build error rather than a run error."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fems2py.checks.effects import EffectFinder
from fems2py.checks.report import Report
from fems2py.checks.scope import Namespace
from fems2py.nodes import BoolValue, Loop, NumberValue, StringValue, Value


def whole_writes(namespaces: Iterable[Namespace]) -> frozenset[str]:
    """Every variable some action of the ``namespaces`` may assign as a whole (an out, or
    ``=`` without a key): its kind may change at run time."""
    finder = EffectFinder({})
    written: set[str] = set()
    for namespace in namespaces:
        for action in namespace.actions.values():
            written |= finder.action(action).writes
    return frozenset(written)


def check_iterable(
    loop: Loop,
    namespace: Namespace,
    loop_vars: frozenset[str],
    written: frozenset[str],
    report: Report,
    *,
    where: Callable[[str], str | None] = lambda name: None,
) -> None:
    """§12.7: ``for x in num`` where ``num`` is declared as a number, a bool or a text that
    no action replaces is a build error (at run time: "cannot iterate over 3"). ``loop_vars``
    are the loop variables bound around it, and ``where`` says where the module runs without a
    loop that binds ``num`` when a loop around some call of it does (§11.3)."""
    reads = loop.iterable.reads
    if len(reads) != 1 or reads[0].attr is not None:
        return
    name = reads[0].name
    if loop.iterable.text.strip() != name or name in loop_vars or name in written:
        return
    decl = namespace.declaration(name)
    kind = _not_a_list(decl.value) if decl is not None else None
    if decl is None or kind is None:
        return
    hint = f"a loop goes over a list: declare {name} as one ({name} = [a, b, …])"
    if isinstance(decl.value, NumberValue) and isinstance(decl.value.value, int):
        hint = f"loop over range({name}) for 0 … {name} - 1, or declare {name} as a list"
    unbound = where(name)
    hint = f"{unbound}; {hint}" if unbound else hint
    report.error(
        f"{loop.kind} {loop.var} in {name}: {name} is declared as {kind}, not a list, and "
        "nothing assigns it a list",
        reads[0].span,
        hint,
    )


def _not_a_list(value: Value) -> str | None:
    """How a declared value that is certainly no list reads in a message, else None."""
    if isinstance(value, BoolValue):
        return f"true/false ({'true' if value.value else 'false'})"
    if isinstance(value, NumberValue):
        return f"a number ({value.value})"
    if isinstance(value, StringValue):
        shown = value.style in ("quoted", "bare") and len(value.value) <= 20
        return f'a text ("{value.value}")' if shown else "a text"
    return None
