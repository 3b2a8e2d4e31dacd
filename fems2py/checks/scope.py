"""What the checks know about names: one :class:`Namespace` per lexical level, each
:class:`Use` of an action or a module (where it runs, and so which names it sees, §11.3), and
the :class:`Effects` of a node (which variables it may write and read, §12.5a).

Plain data shared by :mod:`fems2py.checker` and the checks under :mod:`fems2py.checks`, kept
apart so that those modules import it and not each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fems2py.nodes import Action, Method, Module, Span, VarDecl


@dataclass
class Namespace:
    """The definitions of one lexical level: the script itself or one module (§11.3, §11.4)."""

    key: str
    module: Module | None
    parent: Namespace | None
    variables: dict[str, VarDecl | None] = field(default_factory=dict)
    actions: dict[str, Action] = field(default_factory=dict)
    modules: dict[str, Module] = field(default_factory=dict)
    methods: dict[str, Method] = field(default_factory=dict)

    def chain(self) -> Iterable[Namespace]:
        level: Namespace | None = self
        while level is not None:
            yield level
            level = level.parent

    def lexical_names(self) -> set[str]:
        return {name for level in self.chain() for name in level.variables}

    def find_action(self, name: str) -> Action | None:
        return next((lv.actions[name] for lv in self.chain() if name in lv.actions), None)

    def find_module(self, name: str) -> Module | None:
        return next((lv.modules[name] for lv in self.chain() if name in lv.modules), None)

    def find_method(self, name: str) -> Method | None:
        return next((lv.methods[name] for lv in self.chain() if name in lv.methods), None)

    def declaration(self, name: str) -> VarDecl | None:
        for level in self.chain():
            if name in level.variables:
                return level.variables[name]
        return None

    def visible(self, attribute: str) -> set[str]:
        return {name for level in self.chain() for name in getattr(level, attribute)}


@dataclass(frozen=True)
class Use:
    """Where an action or module is used: the flow's namespace, the loop variables there and
    the node (or ``fallback:`` field) that runs it, for a hint to point at (``via_action`` is
    set for an action's ``fallback:``, which sees what that action sees)."""

    namespace: Namespace
    loop_vars: frozenset[str]
    span: Span
    via_action: int | None = None


def all_modules(modules: Iterable[Module]) -> list[Module]:
    """``modules`` and the modules inside them, each before its own, in source order."""
    return [inner for module in modules for inner in (module, *all_modules(module.modules))]


@dataclass(frozen=True)
class Effects:
    """Variables a node may assign with ``=`` as a whole, and variables it may read (§12.5a)."""

    writes: frozenset[str] = frozenset()
    reads: frozenset[str] = frozenset()

    def __or__(self, other: Effects) -> Effects:
        return Effects(self.writes | other.writes, self.reads | other.reads)
