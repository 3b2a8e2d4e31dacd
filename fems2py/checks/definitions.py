"""The checks of what a script defines (§2.2, §4, §5, §6.2, §11): actors, ``code:`` files,
variables, actions, modules and methods, each once; the :class:`Namespace` of each level.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fems_runtime.words import MAX_ALIAS_HOPS

from fems2py.checks.codefiles import CodeFileError, FuncSignature, read_signatures
from fems2py.checks.meta import check_meta
from fems2py.checks.references import References
from fems2py.checks.report import Report
from fems2py.checks.scope import Namespace
from fems2py.expressions import not_a_variable_here
from fems2py.nodes import (
    Action,
    ActorDef,
    ActorValue,
    Module,
    NullValue,
    Script,
    Span,
    StringValue,
    Value,
    VarDecl,
)
from fems2py.sources import SourceFileError, read_source_file
from fems2py.visitor import NodeVisitor


class _Named(Protocol):
    """A definition: a name and where it is written."""

    @property
    def name(self) -> str: ...

    @property
    def span(self) -> Span: ...


def unique(items: Iterable[_Named], what: str | None, report: Report) -> dict[str, Any]:
    """Items by name, the first definition winning; with ``what``, a second item with a
    taken name is reported (§2.2; the parser reports actions, modules and methods)."""
    found: dict[str, Any] = {}
    for item in items:
        if item.name not in found:
            found[item.name] = item
        elif what is not None:
            report.error(
                f"{what} '{item.name}' is defined twice",
                item.span,
                f"first defined at line {found[item.name].span.line}",
            )
    return found


def check_actors(script: Script, report: Report) -> None:
    """Actors defined twice, actors sharing a soul (§6.2), and an ai actor whose source is a
    user id (§6.3): the run would fail at its first turn, naming model 0."""
    unique_actors = unique(script.actors, "actor", report)
    souls: dict[str, list[ActorDef]] = {}
    for actor in unique_actors.values():
        souls.setdefault(actor.soul, []).append(actor)
        if actor.kind == "ai" and actor.source is not None and actor.source.isdigit():
            report.error(
                f"source:{actor.source} is a person's user id (§6.3), not a model for the "
                f"ai actor {actor.name}",
                actor.span,
                "leave source: out for the default model, or name a model; "
                f"a player is human {actor.name} = source:{actor.source}",
            )
    for soul, actors in souls.items():
        if len(actors) < 2:
            continue
        players = [a for a in actors if a.kind == "human" and a.source == "0"]
        others = [a for a in actors if a not in players]
        if len(others) <= 1:
            continue
        for actor in others[1:]:
            report.error(
                f"actors {others[0].name} and {actor.name} share soul '{soul}'",
                actor.span,
                "give each actor its own soul: (only a human with source:0 may share one)",
            )


@dataclass(frozen=True)
class CodeFiles:
    """What the ``code:`` files of a script hold (§5): each readable alias's function
    signatures, each alias's file, and the aliases whose file is missing or broken."""

    signatures: dict[str, dict[str, FuncSignature]]
    paths: dict[str, Path]
    broken_aliases: frozenset[str]


def read_code_files(script: Script, base_dir: Path, root: Path | None, report: Report) -> CodeFiles:
    """Each ``code:`` file read with :mod:`ast` (relative paths start at ``base_dir`` and stay
    inside ``root``, default ``base_dir``); a file that cannot be read is reported."""
    signatures: dict[str, dict[str, FuncSignature]] = {}
    paths: dict[str, Path] = {}
    broken: set[str] = set()
    seen: set[str] = set()
    for alias in script.code:
        if alias.alias in seen:
            report.error(f"code alias '{alias.alias}' is defined twice", alias.span)
            continue
        seen.add(alias.alias)
        paths[alias.alias] = base_dir / alias.path
        try:
            path, data = read_source_file(base_dir, alias.path, root)
            paths[alias.alias] = path
            signatures[alias.alias] = read_signatures(data, alias.path)
        except SourceFileError as problem:
            broken.add(alias.alias)
            report.error(f"code file '{alias.path}' {problem.reason}", alias.span, problem.hint)
        except CodeFileError as problem:
            broken.add(alias.alias)
            report.error(str(problem), alias.span, f"looked at {path}")
    return CodeFiles(signatures, paths, frozenset(broken))


def namespaces_of(script: Script, report: Report) -> tuple[Namespace, dict[int, Namespace]]:
    """The script's namespace and each module's (by ``id`` of the module), with what each
    defines; names defined twice are reported, and each module's ``meta:``."""
    actors = frozenset(actor.name for actor in script.actors)
    root = Namespace("main", None, None)
    _fill(root, script.variables, script.actions, (), actors, report)
    root.modules = unique(script.modules, None, report)
    root.methods = unique(script.methods, None, report)
    namespaces: dict[int, Namespace] = {}

    def add(module: Module, parent: Namespace) -> None:
        key = f"module:{module.name}" if parent.module is None else f"{parent.key}/{module.name}"
        namespace = Namespace(key, module, parent)
        namespaces[id(module)] = namespace
        _fill(namespace, module.variables, module.actions, module.params, actors, report)
        namespace.modules = unique(module.modules, None, report)
        namespace.methods = unique(module.methods, None, report)
        for nested in module.modules:
            add(nested, namespace)
        check_meta(module.meta, module, report)

    for module in script.modules:
        add(module, root)
    return root, namespaces


def _fill(
    namespace: Namespace,
    variables: Iterable[VarDecl],
    actions: Iterable[Action],
    params: tuple[str, ...],
    actors: frozenset[str],
    report: Report,
) -> None:
    """A namespace's parameters, variables (each once, §4.1) and actions."""
    for name in params:  # reserved or repeated names are reported by the parser
        namespace.variables[name] = None
    declared: dict[str, VarDecl] = {}
    for decl in variables:
        if decl.name in declared:
            first = declared[decl.name].span.line
            report.error(
                f"variable '{decl.name}' is declared twice",
                decl.span,
                f"first declared at line {first}",
            )
            continue
        if decl.name in params:
            report.error(f"variable '{decl.name}' has the name of a module parameter", decl.span)
            continue
        if namespace.parent is None and decl.name in actors:
            report.error(
                f"'{decl.name}' is both an actor and a variable",
                decl.span,
                "rename the variable; an actor variable may hold the actor instead",
            )
        read_as = not_a_variable_here(decl.name)
        if read_as is not None:
            report.error(
                f"'{decl.name}' cannot name a variable: a condition reads it as {read_as}",
                decl.span,
                f"choose another name, e.g. my_{decl.name} (§12.2)",
            )
        declared[decl.name] = decl
        namespace.variables[decl.name] = decl
    namespace.actions = unique(actions, None, report)


def check_variable_values(namespace: Namespace, references: References) -> None:
    """§4.2/§4.3: actors named in values exist; an actor variable holds one actor or ""."""
    names = namespace.lexical_names() | references.broken
    for decl in namespace.variables.values():
        if decl is None:
            continue
        for ref in _actor_refs(decl.value):
            references.check_name(ref.name, ref.span, names)
        value = decl.value
        if decl.name.startswith("@") and not (
            isinstance(value, ActorValue | NullValue)
            or (isinstance(value, StringValue) and value.value == "")
        ):
            references.report.error(
                f'actor variable {decl.name} holds one actor or "" (unbound)',
                value.span,
                f'write {decl.name} = @name or {decl.name} = ""; a plain variable '
                f"({decl.name[1:]} = …) holds anything else (§4.3)",
            )
    check_alias_cycles(namespace, references.actors, references.report)
    check_alias_lengths(namespace, references.actors, references.report)


def check_alias_cycles(namespace: Namespace, actors: frozenset[str], report: Report) -> None:
    """§4.3: actor variables bound to each other in a cycle (``@a = @b``, ``@b = @a``) never
    reach an actor. Each cycle is reported once, at the first of its declarations here."""
    for decl in namespace.variables.values():
        cycle = _alias_cycle(decl, namespace, actors) if decl is not None else None
        if cycle is None:
            continue
        ours = [d for d in cycle if namespace.variables.get(d.name) is d]
        if min(ours, key=lambda d: (d.span.line, d.span.col)) is decl:
            path = " → ".join([*(d.name for d in cycle), decl.name])
            report.error(
                f"actor variable {decl.name} is an alias of itself: {path}",
                decl.value.span,
                f'bind one of them to an actor or to "" (unbound), e.g. {cycle[-1].name} = ""; '
                "an alias chain must end at an actor (§7.2)",
            )


def check_alias_lengths(namespace: Namespace, actors: frozenset[str], report: Report) -> None:
    """§7.2: the run follows an alias chain through at most ``MAX_ALIAS_HOPS`` variables; a
    longer chain declared here is reported once, at its first variable (the one no other
    actor variable is bound to)."""
    declared = [d for d in namespace.variables.values() if d is not None]
    bound_to = {d.value.name for d in declared if isinstance(d.value, ActorValue)}
    for decl in declared:
        chain = _alias_chain(decl, namespace, actors)
        end = chain[-1].value
        if decl.name in bound_to or not isinstance(end, ActorValue) or end.name not in actors:
            continue
        if len(chain) - 1 > MAX_ALIAS_HOPS:
            report.error(
                f"actor variable {decl.name} passes through {len(chain) - 1} actor variables to "
                f"reach {end.name}; the run follows at most {MAX_ALIAS_HOPS}",
                decl.value.span,
                f"bind it nearer the actor, e.g. {decl.name} = {end.name} (§7.2)",
            )


def _alias_chain(decl: VarDecl, namespace: Namespace, actors: frozenset[str]) -> list[VarDecl]:
    """``decl`` and the declarations its alias chain passes through, up to the one bound to an
    actor, to an undeclared name, or to a declaration already in the chain (a cycle)."""
    chain = [decl]
    while isinstance(chain[-1].value, ActorValue) and chain[-1].value.name not in actors:
        following = namespace.declaration(chain[-1].value.name)
        if following is None or following in chain:
            break
        chain.append(following)
    return chain


def _alias_cycle(
    decl: VarDecl, namespace: Namespace, actors: frozenset[str]
) -> list[VarDecl] | None:
    """The declarations of the alias chain from ``decl`` when it comes back to ``decl``."""
    chain = _alias_chain(decl, namespace, actors)
    end = chain[-1].value
    closes = isinstance(end, ActorValue) and namespace.declaration(end.name) is decl
    return chain if closes else None


class _ActorRefs(NodeVisitor[None]):
    """Collects every ``@name`` inside a literal, list items and dict keys and values included."""

    def __init__(self) -> None:
        self.found: list[ActorValue] = []

    def visit_ActorValue(self, value: ActorValue) -> None:
        self.found.append(value)


def _actor_refs(value: Value) -> list[ActorValue]:
    """Every ``@name`` inside a literal, list items and dict keys and values included."""
    refs = _ActorRefs()
    refs.visit(value)
    return refs.found
