"""Where each module and action runs, and so which names of its callers it may read (§11.3).

A module or an action reads the names of the places it runs: its caller's loop variables, a
calling module's locals. :class:`Spread` works them out over the
:class:`~fems2py.checks.flows.Uses` of a script: with ``everywhere``, the names bound at every
place it runs (what a read may rely on), else those bound at some place. For a name bound at
only some, :meth:`Spread.unbound_chain` finds the place that leaves it unbound, which
:class:`Callers` words for a hint: an error that only says "unknown" sends a reader looking for
a typo, when the fix is at a call elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fems2py.checks.scope import Namespace, Use
from fems2py.nodes import Action

#: ``("module", id of its namespace)`` or ``("action", id of the action)``.
Key = tuple[str, int]

__all__ = ["Callers", "Key", "Spread", "action_key", "module_key"]


def module_key(namespace: Namespace) -> Key:
    return "module", id(namespace)


def action_key(action: Action) -> Key:
    return "action", id(action)


def _seen_at(
    base: Mapping[int, frozenset[str]], extra: Mapping[Key, Iterable[str]], use: Use
) -> set[str]:
    """The names bound where ``use`` runs: its namespace's own, those its module (and, for a
    ``fallback:``, its action) sees where they run, and the loop variables around it."""
    names = set(base[id(use.namespace)]) | set(extra.get(module_key(use.namespace), ()))
    if use.via_action is not None:
        names |= set(extra.get(("action", use.via_action), ()))
    return names | use.loop_vars


@dataclass(frozen=True)
class Spread:
    """What each module and action sees where it runs, on top of ``base`` (by ``id`` of the
    namespace): ``extra``, by :data:`Key`, the names of the places it runs; ``grounded``, the
    keys some chain of uses from the main flow reaches (the others never run)."""

    base: Mapping[int, frozenset[str]]
    uses_of: Mapping[Key, Sequence[Use]]
    grounded: frozenset[Key]
    extra: Mapping[Key, frozenset[str]]

    @staticmethod
    def of(
        base: Mapping[int, frozenset[str]],
        uses_of: Mapping[Key, Sequence[Use]],
        grounded: frozenset[Key],
        *,
        everywhere: bool,
    ) -> Spread:
        """A fixpoint over uses. With ``everywhere``, only the names bound at every place (a
        module called both inside and outside a loop cannot read the loop variable, §11.3),
        else the names bound at any place. Modules and actions that never run get the names of
        any place, so that calls among themselves (``&R`` in R) cannot vouch for names no
        caller binds."""
        every_use = [use for uses in uses_of.values() for use in uses]
        universe = set().union(*base.values(), *(use.loop_vars for use in every_use))
        extra = {key: set(universe) if everywhere and key in grounded else set() for key in uses_of}
        # the ones that never run first: what they see does not depend on the others
        for keys, meet in ((uses_of.keys() - grounded, False), (grounded, everywhere)):
            changed = True
            while changed:
                changed = False
                for key in keys:
                    sets = [_seen_at(base, extra, use) for use in uses_of[key]]
                    new = set.intersection(*sets) if meet else set.union(*sets)
                    if new != extra[key]:
                        extra[key], changed = new, True
        frozen = {key: frozenset(names) for key, names in extra.items()}
        return Spread(base, uses_of, grounded, frozen)

    def namespace_names(self) -> dict[int, frozenset[str]]:
        """The names each namespace sees: its own and those every call of its module binds."""
        return {
            key: names | self.extra.get(("module", key), frozenset())
            for key, names in self.base.items()
        }

    def action_names(self) -> dict[int, frozenset[str]]:
        """The names each action sees besides its namespace's, by ``id`` of the action."""
        return {key: names for (kind, key), names in self.extra.items() if kind == "action"}

    def unbound_chain(self, key: Key, name: str, some: Spread) -> list[tuple[Key, Use]]:
        """Where ``key`` runs without ``name``: the first such use in source order and, while
        that use is in a module (or a ``fallback:``) that runs without it in turn though
        ``some`` of its places bind it, the use of that one, out to the call that leaves it
        unbound; empty when every place binds ``name``."""
        return self._chain(key, name, some, {key})

    def _chain(self, key: Key, name: str, some: Spread, visited: set[Key]) -> list[tuple[Key, Use]]:
        lacking = [use for use in self.uses_of.get(key, ()) if name not in self.seen_at(use)]
        lacking.sort(key=lambda use: (use.span.line, use.span.col))
        for use in lacking:
            outer = self.outer(use)
            if outer is None or outer not in self.grounded or name not in some.extra.get(outer, ()):
                return [(key, use)]  # what runs it binds the name nowhere: this use is the gap
            if outer not in visited:
                visited.add(outer)
                found = self._chain(outer, name, some, visited)
                if found:
                    return [(key, use), *found]
        return [(key, lacking[0])] if lacking else []

    def seen_at(self, use: Use) -> set[str]:
        return _seen_at(self.base, self.extra, use)

    @staticmethod
    def outer(use: Use) -> Key | None:
        """What runs ``use`` in turn: the action whose ``fallback:`` it is, else the module
        whose flow holds it; None in the main flow."""
        if use.via_action is not None:
            return "action", use.via_action
        return module_key(use.namespace) if use.namespace.module is not None else None


def grounded_keys(uses_of: Mapping[Key, Sequence[Use]]) -> frozenset[Key]:
    """The modules and actions some chain of uses from the main flow reaches."""
    grounded: set[Key] = set()
    changed = True
    while changed:
        changed = False
        for key, uses in uses_of.items():
            if key not in grounded and any(
                use.namespace.module is None or module_key(use.namespace) in grounded
                for use in uses
            ):
                grounded.add(key)
                changed = True
    return frozenset(grounded)


@dataclass(frozen=True)
class Callers:
    """What every module and action of a script sees where it runs (§11.3): ``names``, the
    variables bound at every place (their namespace's included), ``some_names`` those bound
    at some place, ``loop_vars`` and ``some_loop_vars`` the same with only the loop variables
    around those places (which a loop of its own may not shadow, §9.5, §12.7); with the words a
    hint names them by (``labels``) and the namespace each action is defined in."""

    names: Spread
    some_names: Spread
    loop_vars: Spread
    some_loop_vars: Spread
    labels: Mapping[Key, str]
    homes: Mapping[Key, int]

    @staticmethod
    def of(namespaces: Iterable[Namespace], uses_of: Mapping[Key, Sequence[Use]]) -> Callers:
        every = list(namespaces)
        grounded = grounded_keys(uses_of)
        lexical = {id(ns): frozenset(ns.lexical_names()) for ns in every}
        empty = {id(ns): frozenset[str]() for ns in every}
        labels: dict[Key, str] = {}
        homes: dict[Key, int] = {}
        for namespace in every:
            if namespace.module is not None:
                labels[module_key(namespace)] = f"&{namespace.module.name}"
            for action in namespace.actions.values():
                labels[action_key(action)] = action.name
                homes[action_key(action)] = id(namespace)
        return Callers(
            names=Spread.of(lexical, uses_of, grounded, everywhere=True),
            some_names=Spread.of(lexical, uses_of, grounded, everywhere=False),
            loop_vars=Spread.of(empty, uses_of, grounded, everywhere=True),
            some_loop_vars=Spread.of(empty, uses_of, grounded, everywhere=False),
            labels=labels,
            homes=homes,
        )

    def spreads(self, loop_var: bool) -> tuple[Spread, Spread]:
        """The names bound at every place and at some place, or only the loop variables."""
        if loop_var:
            return self.loop_vars, self.some_loop_vars
        return self.names, self.some_names

    def partly_bound(self, reader: Key | None, name: str, *, loop_var: bool = False) -> bool:
        """Whether some of the places ``reader`` runs bind ``name``, and not all (with
        ``loop_var``, bind it as a loop variable)."""
        every, some = self.spreads(loop_var)
        if reader is None or reader not in every.grounded:
            return False
        return name in some.extra.get(reader, ()) and name not in every.extra.get(reader, ())

    def where_unbound(
        self, reader: Key | None, name: str, outside: str, *, loop_var: bool = False
    ) -> str | None:
        """Where ``reader`` runs without ``name`` though some place it runs binds it
        ("&Speak is also called at line 37:16, outside that loop"), else None. With
        ``loop_var``, where it runs without a loop that binds ``name`` around it."""
        if not self.partly_bound(reader, name, loop_var=loop_var):
            return None
        assert reader is not None
        every, some = self.spreads(loop_var)
        chain = every.unbound_chain(reader, name, some)
        return self.describe(self.elided(chain), outside) if chain else None

    def elided(self, chain: list[tuple[Key, Use]]) -> list[tuple[Key, Use]]:
        """Without its first step when that is an action run once, in the module that defines
        it: where the module runs says all."""
        (key, use), *rest = chain
        alone = len(self.names.uses_of.get(key, ())) == 1
        if rest and key[0] == "action" and alone and self.homes.get(key) == id(use.namespace):
            return rest
        return chain

    def describe(self, chain: list[tuple[Key, Use]], outside: str) -> str:
        """The chain in words, from what reads the name out to the call that runs it all;
        "also" where what runs has other places too (the ones that bind the name)."""
        (key, use), *rest = chain
        text = f"{self.labels[key]} {self.runs(key)} at line {_position(use)}"
        for outer, outer_use in rest:
            if outer[0] == "action":
                text += f", the fallback: of {self.labels[outer]},"
            else:
                text += f" in {self.labels[outer]},"
            text += f" which {self.runs(outer)} at line {_position(outer_use)}"
        last = chain[-1][1].namespace.module
        if last is not None:  # it stops in a module: no call of it binds the name, or none runs
            text += f" in &{last.name}"
        return f"{text}, outside {outside}"

    def runs(self, key: Key) -> str:
        """How a module or action is run, "also" when it runs elsewhere too."""
        also = len(self.names.uses_of.get(key, ())) > 1
        if key[0] == "module":
            return "is also called" if also else "is called"
        return "also runs" if also else "runs"


def _position(use: Use) -> str:
    return f"{use.span.line}:{use.span.col}"
