"""The semantic checker: every build-time check the spec names, on a parsed :class:`Script`.

The parser reports what is wrong with the text; this stage reports what is wrong with the
meaning — undeclared names (§4.1), unknown actions, modules, methods and ``code:`` functions,
fields that do not fit the action kind (§9.2), the loop-variable rule (§9.5), module arity
(§11.2), flow structure (§12) — and computes what code generation needs: the merge node of
every fork (§12.5) and the signatures of the ``code:`` functions (§5).

It never raises on a user mistake: everything becomes a :class:`Diagnostic`.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fems_runtime.words import FIXED_ACTOR_ATTRIBUTES as STATIC_ATTRIBUTES

from fems2py.checks.codefiles import CodeFileError, FuncSignature, Param, read_signatures
from fems2py.checks.flows import FlowChecker
from fems2py.checks.scope import Namespace, Use
from fems2py.checks.tools import check_tools
from fems2py.checks.usage import excuse_unused, holder, unused_actions, without_unused
from fems2py.diagnostics import Diagnostic, suggest
from fems2py.kinds import ACTION_KINDS
from fems2py.nodes import (
    Action,
    ActionBlock,
    ActorDef,
    ActorValue,
    Expr,
    FuncRef,
    Graph,
    Loop,
    MetaEntry,
    Method,
    Module,
    ModuleCall,
    NullValue,
    NumberValue,
    PathRef,
    Script,
    Span,
    StringValue,
    Target,
    Text,
    Value,
    VarDecl,
)
from fems2py.sources import SourceFileError, read_source_file
from fems2py.visitor import BindingVisitor, NodeVisitor, walk

__all__ = ["CheckedScript", "FuncSignature", "Param", "check"]

#: §8.1: ``in:`` names of memory/context methods that are not variables.
METHOD_INPUTS = frozenset({"prompt", "session", "session_id", "turn", "turn_id", "@actor"})
#: §10.5: names a ``resolve:`` argument list may use besides variables and ``in:`` names.
RESOLVE_INPUTS = frozenset({"SET_VARIABLE", "prompt", "llm_output"})
#: §9.8: the built-in ``system.spawn``.
SPAWN = FuncSignature("spawn", (Param("spawn_requests", False),), False, 0)

#: §3: the keys of a script's ``meta:``, and the few a module's ``meta:`` accepts.
META_KEYS = (
    *("name", "version", "id", "owner", "database", "session", "system_safety"),
    *("output_style", "max_steps", "delay", "model", "max_concurrency"),
    *("timeout", "retry_budget", "max_tool_rounds", "max_tokens", "max_cost"),
)
MODULE_META_KEYS = ("max_steps", "delay")
_SESSION = re.compile(r"\s*(?:new|\d+(?:\s*/\s*new)?)\s*", re.IGNORECASE)


class _Named(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def span(self) -> Span: ...


@dataclass(frozen=True)
class CheckedScript:
    """A script with everything the checker found and computed, ready for code generation.

    ``merge_nodes`` maps (flow key, fork node) to the node where the fork's branches merge, or
    None when they never do (§12.5). Flow keys are ``"main"``, ``"module:Name"`` and
    ``"module:Outer/Inner"``; node names are unique within a flow, loop bodies included.
    Every node with two or more out-edges has an entry; a loop body's head (named like its
    loop node) has one when it has two or more start lines, and None means the branches merge
    only at the end of the iteration. An explicit ``join`` is the merge node of its fork (the
    nearest dominating node with several out-edges).
    ``code_signatures`` maps each ``code:`` alias to its functions' signatures (an alias whose
    file is missing or broken is absent), ``code_files`` each alias to the file's path.
    ``string_keys`` says which ``dict[word]`` keys are literal strings.
    """

    script: Script
    diagnostics: tuple[Diagnostic, ...]
    merge_nodes: dict[tuple[str, str], str | None] = field(default_factory=dict)
    code_signatures: dict[str, dict[str, FuncSignature]] = field(default_factory=dict)
    code_files: dict[str, Path] = field(default_factory=dict)
    #: Spans of ``dict[word]`` targets whose bare word is no variable where the action runs,
    #: so the key is the string itself (§4.2; see :class:`~fems2py.nodes.Target`).
    string_keys: frozenset[Span] = frozenset()
    #: Actions no flow uses (§12.11): left out of ``script``; the problems inside them are
    #: warnings (see :func:`fems2py.checks.usage.excuse_unused` for the parser's).
    unused_actions: tuple[ActionBlock, ...] = ()

    @property
    def has_errors(self) -> bool:
        return any(diagnostic.severity == "error" for diagnostic in self.diagnostics)


def check(script: Script, base_dir: Path, root: Path | None = None) -> CheckedScript:
    """Check ``script`` (whose relative paths start at ``base_dir`` and stay inside ``root``,
    default ``base_dir``) and compute merge nodes."""
    checker = Checker(script, base_dir, root)
    checker.run()
    unused = checker.unused_actions
    return CheckedScript(
        script=without_unused(script, unused),
        diagnostics=tuple(excuse_unused(checker.sorted_diagnostics(), unused)),
        unused_actions=unused,
        merge_nodes=checker.merge_nodes,
        code_signatures=checker.signatures,
        code_files=checker.code_files,
        string_keys=frozenset(checker.string_keys),
    )


class Checker:
    """One run of the checks over one script; collects diagnostics and computed facts."""

    def __init__(self, script: Script, base_dir: Path, root: Path | None = None) -> None:
        self.script = script
        self.base_dir = base_dir
        self.files_root = root
        self.items: list[Diagnostic] = []
        self.later_uses: dict[tuple[str, ActionBlock | None], list[Span]] = {}
        graphs = [script.flow, *(module.flow for module in _all_modules(script.modules))]
        self.loop_variables = {var for graph in graphs for var in _loop_variables(graph)}
        self.merge_nodes: dict[tuple[str, str], str | None] = {}
        self.signatures: dict[str, dict[str, FuncSignature]] = {}
        self.code_files: dict[str, Path] = {}
        self.broken_aliases: set[str] = set()
        self.actors = {actor.name for actor in script.actors}
        #: Names whose definition had a syntax error: already reported, so their uses pass.
        self.broken = script.broken_names
        self.root = Namespace("main", None, None)
        self.namespaces: dict[int, Namespace] = {}
        self.action_uses: dict[int, list[Use]] = {}
        self.module_uses: dict[int, list[Use]] = {}
        self.visible_names: dict[int, set[str]] = {}
        self.action_extra: dict[int, set[str]] = {}
        self.caller_loop_vars: dict[int, set[str]] = {}
        self.string_keys: set[Span] = set()
        self.unused_actions: tuple[ActionBlock, ...] = ()

    # ------------------------------------------------------------------ reporting

    def error(self, message: str, span: Span, hint: str | None = None) -> None:
        self.items.append(Diagnostic("error", message, span, hint))

    def warning(self, message: str, span: Span, hint: str | None = None) -> None:
        self.items.append(Diagnostic("warning", message, span, hint))

    def declare_hint(self, name: str) -> str:
        """How to fix an undeclared name: a loop variable used outside its loop, a module's
        local read elsewhere, or vars:."""
        local = self.module_local_hint(name)
        if local is not None:
            return local
        if name in self.loop_variables:
            return f"'{name}' is bound only inside the body of its for/par loop (§12.7)"
        return f"every variable is declared in vars: first (§4.1), e.g. {name} = 0"

    def module_local_hint(self, name: str) -> str | None:
        """§12.11: a name declared only in a module's vars: is that module's (§11.2); say
        where it is declared and how to share it."""
        found = self.module_locals.get(name)
        if found is None:
            return None
        module, line = found
        return (
            f"'{name}' is a local of module {module} (line {line}); "
            "declare it in the top-level vars: to share it between modules"
        )

    @functools.cached_property
    def module_locals(self) -> dict[str, tuple[str, int]]:
        """Each name declared in some module's vars: → (that module, the line); the first
        module in source order when several declare it."""
        found: dict[str, tuple[str, int]] = {}
        for module in _all_modules(self.script.modules):
            for decl in module.variables:
                found.setdefault(decl.name, (module.name, decl.span.line))
        return found

    def undefined(self, message: str, span: Span, hint: str | None) -> None:
        """An unknown name is reported at its first use only; the other uses are listed in
        that report's hint (one mistake, one diagnostic). Uses inside an unused action are
        reported apart: they become warnings, the others must stay errors."""
        key = self.undefined_key(message, span)
        later = self.later_uses.get(key)
        if later is None:
            self.later_uses[key] = []
            self.error(message, span, hint)
        else:
            later.append(span)

    def undefined_key(self, message: str, span: Span) -> tuple[str, ActionBlock | None]:
        return message, holder(self.unused_actions, Diagnostic("error", message, span))

    def sorted_diagnostics(self) -> tuple[Diagnostic, ...]:
        items = []
        for item in self.items:
            later = self.later_uses.get(self.undefined_key(item.message, item.span))
            if later and item.severity == "error":
                first, *others = sorted([item.span, *later], key=lambda s: (s.line, s.col))
                lines = sorted({span.line for span in others} - {first.line})
                hint = item.hint
                if lines:
                    also = f"also used at line{'s' if len(lines) > 1 else ''} "
                    also += ", ".join(map(str, lines))
                    hint = f"{hint}; {also}" if hint else also
                item = dataclasses.replace(item, span=first, hint=hint)
            items.append(item)
        unique = list(dict.fromkeys(items))
        return tuple(sorted(unique, key=lambda d: (d.span.line, d.span.col)))

    # ------------------------------------------------------------------ driver

    def run(self) -> None:
        self.check_meta(self.script.meta, None)
        self.check_actors()
        self.read_code_files()
        check_tools(self)
        self.build_namespace(self.root, self.script.variables, self.script.actions, ())
        self.root.modules = self.unique(self.script.modules, None)
        self.root.methods = self.unique(self.script.methods, None)
        for module in self.script.modules:
            self.build_module(module, self.root)
        flows = FlowChecker(self)
        flows.collect_uses()
        self.unused_actions = unused_actions(self.script, self.root, self.namespaces)
        self.propagate_names()
        for namespace in [self.root, *self.namespaces.values()]:
            self.check_variable_values(namespace)
            for action in namespace.actions.values():
                self.check_action(action, namespace)
            for method in namespace.methods.values():
                self.check_method(method, namespace)
        flows.check_all()

    # ------------------------------------------------------------------ definitions

    def unique(self, items: Iterable[_Named], what: str | None) -> dict[str, Any]:
        """Items by name, the first definition winning; with ``what``, a second item with a
        taken name is reported (§2.2; the parser reports actions, modules and methods)."""
        found: dict[str, Any] = {}
        for item in items:
            if item.name not in found:
                found[item.name] = item
            elif what is not None:
                self.error(
                    f"{what} '{item.name}' is defined twice",
                    item.span,
                    f"first defined at line {found[item.name].span.line}",
                )
        return found

    def build_namespace(
        self,
        namespace: Namespace,
        variables: Iterable[VarDecl],
        actions: Iterable[Action],
        params: tuple[str, ...],
    ) -> None:
        for name in params:  # reserved or repeated names are reported by the parser
            namespace.variables[name] = None
        declared: dict[str, VarDecl] = {}
        for decl in variables:
            if decl.name in declared:
                first = declared[decl.name].span.line
                self.error(
                    f"variable '{decl.name}' is declared twice",
                    decl.span,
                    f"first declared at line {first}",
                )
                continue
            if decl.name in params:
                self.error(f"variable '{decl.name}' has the name of a module parameter", decl.span)
                continue
            if namespace.parent is None and decl.name in self.actors:
                self.error(
                    f"'{decl.name}' is both an actor and a variable",
                    decl.span,
                    "rename the variable; an actor variable may hold the actor instead",
                )
            declared[decl.name] = decl
            namespace.variables[decl.name] = decl
        namespace.actions = self.unique(actions, None)

    def build_module(self, module: Module, parent: Namespace) -> None:
        key = f"module:{module.name}" if parent.module is None else f"{parent.key}/{module.name}"
        namespace = Namespace(key, module, parent)
        self.namespaces[id(module)] = namespace
        self.build_namespace(namespace, module.variables, module.actions, module.params)
        namespace.modules = self.unique(module.modules, None)
        namespace.methods = self.unique(module.methods, None)
        for nested in module.modules:
            self.build_module(nested, namespace)
        self.check_meta(module.meta, module)

    def check_variable_values(self, namespace: Namespace) -> None:
        """§4.2/§4.3: actors named in values exist; an actor variable holds one actor or ""."""
        names = namespace.lexical_names() | self.broken
        for decl in namespace.variables.values():
            if decl is None:
                continue
            for ref in _actor_refs(decl.value):
                self.check_name(ref.name, ref.span, names)
            value = decl.value
            if decl.name.startswith("@") and not (
                isinstance(value, ActorValue | NullValue)
                or (isinstance(value, StringValue) and value.value == "")
            ):
                self.error(
                    f'actor variable {decl.name} holds one actor or "" (unbound)',
                    value.span,
                    f'write {decl.name} = @name or {decl.name} = ""; a plain variable '
                    f"({decl.name[1:]} = …) holds anything else (§4.3)",
                )

    def check_meta(self, entries: Iterable[MetaEntry], module: Module | None) -> None:
        """§3: known keys (unknown ones are a warning), each once, numbers where numbers go."""
        allowed = MODULE_META_KEYS if module is not None else META_KEYS
        seen: dict[str, int] = {}
        for entry in entries:
            key, value = entry.key, entry.value
            if key in seen:
                self.error(
                    f"meta key '{key}' is given twice",
                    entry.span,
                    f"first given at line {seen[key]}",
                )
                continue
            seen[key] = entry.span.line
            if key not in allowed:
                if module is not None and key in META_KEYS:
                    message = f"meta key '{key}' has no effect in a module and is ignored"
                    hint = "a module's meta: accepts max_steps and delay (§3)"
                else:
                    message = f"unknown meta key '{key}' is ignored"
                    hint = suggest(key, allowed) or "meta keys are: " + ", ".join(allowed)
                self.warning(message, entry.span, hint)
            elif key in ("max_steps", "max_concurrency") and not _whole_number(value, 1):
                self.error(
                    f"meta '{key}' must be a whole number ≥ 1",
                    value.span,
                    f"e.g. {key} = {100 if key == 'max_steps' else 8}",
                )
            elif key == "max_tool_rounds" and not _whole_number(value, 0):
                self.error(
                    "meta 'max_tool_rounds' must be a whole number ≥ 0",
                    value.span,
                    "e.g. max_tool_rounds = 8 (model → tools → model rounds per reply, §15.5)",
                )
            elif key == "max_tokens" and not _whole_number(value, 1):
                self.error(
                    "meta 'max_tokens' must be a whole number ≥ 1",
                    value.span,
                    "e.g. max_tokens = 400 (the most tokens one reply may have, §3)",
                )
            elif key == "max_cost" and not (isinstance(value, NumberValue) and value.value >= 0):
                self.error(
                    "meta 'max_cost' must be a number of US dollars ≥ 0",
                    value.span,
                    "e.g. max_cost = 0.50 (the run stops once its recorded cost passes it, §15.6)",
                )
            elif key == "delay" and not (isinstance(value, NumberValue) and value.value >= 0):
                self.error(
                    "meta 'delay' must be a number of seconds ≥ 0", value.span, "e.g. delay = 0.5"
                )
            elif key in ("timeout", "retry_budget") and not (
                isinstance(value, NumberValue) and value.value > 0
            ):
                example = "timeout = 60" if key == "timeout" else "retry_budget = 120"
                self.error(
                    f"meta '{key}' must be a number of seconds > 0", value.span, f"e.g. {example}"
                )
            elif key == "session" and not (
                _whole_number(value, 0)
                or (isinstance(value, StringValue) and _SESSION.fullmatch(value.value))
            ):
                self.error(
                    "meta 'session' must be new, a session number, or 'N / new'",
                    value.span,
                    "session = new starts a new session; session = 3 / new continues 3 or creates it",
                )

    def check_actors(self) -> None:
        """Duplicate actor names and souls (§6.2), duplicate blueprints."""
        unique_actors = self.unique(self.script.actors, "actor")
        souls: dict[str, list[ActorDef]] = {}
        for actor in unique_actors.values():
            souls.setdefault(actor.soul, []).append(actor)
        for soul, actors in souls.items():
            if len(actors) < 2:
                continue
            players = [a for a in actors if a.kind == "human" and a.source == "0"]
            others = [a for a in actors if a not in players]
            if len(others) <= 1:
                continue
            for actor in others[1:]:
                self.error(
                    f"actors {others[0].name} and {actor.name} share soul '{soul}'",
                    actor.span,
                    "give each actor its own soul: (only a human with source:0 may share one)",
                )

    def read_code_files(self) -> None:
        seen: set[str] = set()
        for alias in self.script.code:
            if alias.alias in seen:
                self.error(f"code alias '{alias.alias}' is defined twice", alias.span)
                continue
            seen.add(alias.alias)
            self.code_files[alias.alias] = self.base_dir / alias.path
            try:
                path, data = read_source_file(self.base_dir, alias.path, self.files_root)
                self.code_files[alias.alias] = path
                self.signatures[alias.alias] = read_signatures(data, alias.path)
            except SourceFileError as problem:
                self.broken_aliases.add(alias.alias)
                self.error(f"code file '{alias.path}' {problem.reason}", alias.span, problem.hint)
            except CodeFileError as problem:
                self.broken_aliases.add(alias.alias)
                self.error(str(problem), alias.span, f"looked at {path}")

    # ------------------------------------------------------------------ names in scope

    def propagate_names(self) -> None:
        """Names a module or action sees through its callers (§11.3)."""
        namespaces = [self.root, *self.namespaces.values()]
        self.visible_names, self.action_extra = self.spread(
            {id(ns): ns.lexical_names() for ns in namespaces}
        )
        self.caller_loop_vars, _ = self.spread({id(ns): set() for ns in namespaces})

    def spread(self, base: dict[int, set[str]]) -> tuple[dict[int, set[str]], dict[int, set[str]]]:
        """A fixpoint over uses: each namespace (by id) and each action (by id) gets the names
        of every place it is used, loop variables there included, on top of ``base``."""
        seen = {key: set(names) for key, names in base.items()}
        action_seen: dict[int, set[str]] = {key: set() for key in self.action_uses}

        def seen_at(use: Use) -> set[str]:
            names = seen[id(use.namespace)] | use.loop_vars
            if use.via_action is not None:
                names |= action_seen.get(use.via_action, set())
            return names

        changed = True
        while changed:
            changed = False
            for module_id, uses in self.module_uses.items():
                target = seen[id(self.namespaces[module_id])]
                for use in uses:
                    new = seen_at(use) - target
                    if new:
                        target |= new
                        changed = True
            for action_id, uses in self.action_uses.items():
                for use in uses:
                    new = seen_at(use) - action_seen[action_id]
                    if new:
                        action_seen[action_id] |= new
                        changed = True
        return seen, action_seen

    def names_of(self, namespace: Namespace) -> set[str]:
        """Variables visible in a namespace: its own, the enclosing ones', its callers'."""
        return self.visible_names.get(id(namespace), set())

    def action_names(self, action: Action, namespace: Namespace) -> set[str]:
        """What an action sees: its namespace's names plus those of every place it runs."""
        return self.names_of(namespace) | self.action_extra.get(id(action), set())

    def namespace_of(self, module: Module) -> Namespace:
        return self.namespaces[id(module)]

    # ------------------------------------------------------------------ reference checks

    def check_name(
        self, name: str, span: Span, names: set[str], *, string_hint: bool = False
    ) -> bool:
        """A read of a variable or actor (§4.1); reports and returns False when undeclared."""
        if name in self.broken:
            return True
        if name.startswith("@"):
            if name in self.actors or name in names:
                return True
            candidates = self.actors | {n for n in names if n.startswith("@")}
            hint = (
                self.module_local_hint(name)
                or suggest(name, candidates)
                or (
                    self.declare_hint(name)
                    if name in self.loop_variables
                    else "define it in actors: or declare it in vars:"
                )
            )
            self.undefined(f"unknown actor '{name}'", span, hint)
            return False
        if name in names:
            return True
        found = self.module_local_hint(name) or suggest(
            name, {n for n in names if not n.startswith("@")}
        )
        if found is None and string_hint and name.isidentifier():
            found = f"did you mean the string '{name}'? Otherwise declare it in vars:"
        self.undefined(f"undeclared variable '{name}'", span, found or self.declare_hint(name))
        return False

    def check_path(self, ref: PathRef, names: set[str], *, string_hint: bool = False) -> None:
        if ref.name in self.signatures or ref.name in self.broken_aliases:
            return
        if not self.check_name(ref.name, ref.span, names, string_hint=string_hint):
            return
        if ref.attr is None or ref.attr in STATIC_ATTRIBUTES or ref.attr in names:
            return
        hint = self.module_local_hint(ref.attr) or suggest(
            ref.attr, {n for n in names if not n.startswith("@")} | STATIC_ATTRIBUTES
        )
        self.error(
            f"unknown attribute '{ref.attr}' of {ref.name}",
            ref.span,
            hint or f"declare a dict in vars: ({ref.attr} = {{}}) to give actors this attribute",
        )

    def check_expr(self, expr: Expr | None, names: set[str], *, string_hint: bool = False) -> None:
        """Every read of an embedded expression, and every ``alias.fn`` it calls (§12.2)."""
        if expr is None:
            return
        for ref in expr.reads:
            self.check_path(ref, names, string_hint=string_hint)
        for alias, func in code_calls(expr.python):
            self.check_func(FuncRef(alias, func, expr.span), builtin_ok=False)

    def check_target(self, target: Target, names: set[str], *, out: bool = False) -> None:
        """An assignment or out target (§9.6, §10.4): the variable must be declared, and so
        must a variable key (``dict.@x``, ``dict[i]``, an expression's reads). ``out``: a key
        of an out must be an actor, a variable or a literal (it is resolved when the signal
        or return value is applied, §10.4)."""
        if target.name in self.broken or target.key in self.broken:
            return
        if target.key_kind == "index":
            self.check_index_key(target, names, out=out)
        if target.key_kind == "name" and target.key in names:
            self.warning(
                f"'{target.written}' writes the key '{target.key}' (a name after '.' is the key "
                f"itself), not the value of the variable {target.key}",
                target.span,
                f"write {target.name}[{target.key}] for the entry at {target.key}'s value, or "
                f'{target.name}["{target.key}"] to keep the string key',
            )
        if target.key_kind == "actor" and target.key is not None:
            self.check_name(target.key, target.span, names)
            if target.name in STATIC_ATTRIBUTES:
                self.error(
                    f"cannot assign the static attribute '{target.name}' of {target.key}",
                    target.span,
                    "type, soul, source, tools and name are fixed by actors:",
                )
                return
        if target.name.startswith("@") and target.name in self.actors:
            if target.name not in names:
                self.error(
                    f"'{target.name}' is an actor, not a variable, and cannot be assigned",
                    target.span,
                    f'declare an actor variable in vars: ({target.name[:1]}x = "")',
                )
            return
        if target.name in names:
            return
        hint = self.module_local_hint(target.name) or suggest(target.name, names)
        hint = hint or self.declare_hint(target.name)
        self.undefined(f"undeclared variable '{target.name}'", target.span, hint)

    def check_index_key(self, target: Target, names: set[str], *, out: bool) -> None:
        """``dict[key]``: a bare word that names no variable here is the string itself (§4.2);
        other reads must be declared; an out's key must be simple."""
        expr = target.key_expr
        if expr is None:
            return
        word = target.key_word
        if word is not None:
            if word not in names and word not in self.broken:
                self.string_keys.add(target.span)
                near = suggest(word, {n for n in names if not n.startswith("@")})
                if near is not None:
                    self.warning(
                        f"'{word}' is not a variable here, so the key of "
                        f"'{target.written}' is the string '{word}'",
                        expr.span,
                        f'{near} (write {target.name}["{word}"] for the string itself)',
                    )
            return
        if out and expr.reads:
            self.error(
                f"the key of out '{target.written}' must be @x, a variable or a literal",
                expr.span,
                "compute the key in an @assign first, e.g. key = …, then write "
                f"out: {target.name}[key]",
            )
            return
        self.check_expr(expr, names, string_hint=True)

    def check_func(self, ref: FuncRef, *, builtin_ok: bool) -> FuncSignature | None:
        """``alias.fn`` must name a function of a ``code:`` file (§5) or the built-in spawn."""
        if ref.alias == "system" and "system" not in self.signatures:
            if ref.func == "spawn" and builtin_ok:
                return SPAWN
            if ref.func == "spawn":
                self.error("system.spawn can only be called by an @func action", ref.span)
            else:
                self.error(
                    f"unknown built-in 'system.{ref.func}'", ref.span, "did you mean 'spawn'?"
                )
            return None
        if ref.alias in self.broken_aliases or ref.alias in self.broken:
            return None
        functions = self.signatures.get(ref.alias)
        if functions is None:
            hint = suggest(ref.alias, [*self.signatures, *self.broken_aliases])
            if hint is None and ref.func == "spawn":
                hint = "the built-in is system.spawn (§9.8)"
            self.error(
                f"unknown code alias '{ref.alias}'",
                ref.span,
                hint or f'declare it in code: ({ref.alias} = file:"{ref.alias}.py")',
            )
            return None
        signature = functions.get(ref.func)
        if signature is None:
            path = next(c.path for c in self.script.code if c.alias == ref.alias)
            self.error(
                f"'{ref.alias}.{ref.func}' is not defined in {path}",
                ref.span,
                suggest(ref.func, functions),
            )
        return signature

    def check_arguments(
        self,
        signature: FuncSignature,
        ref: FuncRef,
        keywords: Iterable[tuple[str, Span]],
        *,
        complete: bool,
        span: Span,
    ) -> None:
        """Keyword arguments must be parameters; with ``complete``, required ones must be given."""
        given: set[str] = set()
        for keyword, keyword_span in keywords:
            given.add(keyword)
            if not signature.accepts(keyword):
                names = [param.name for param in signature.params or ()]
                self.error(
                    f"'{ref.alias}.{ref.func}' has no parameter '{keyword}'",
                    keyword_span,
                    suggest(keyword, names) or f"its parameters are: {', '.join(names) or 'none'}",
                )
        if complete:
            for name in signature.required:
                if name not in given:
                    self.error(
                        f"'{ref.alias}.{ref.func}' needs argument '{name}', which in: does not pass",
                        span,
                        "add '@actor' to in: (it is passed as actor_info, §8.1)"
                        if name == "actor_info"
                        else f"add '{name} = …' to in:",
                    )

    def check_module_call(self, call: ModuleCall, namespace: Namespace, names: set[str]) -> None:
        """``&M(args)``: the module exists where it is called and the arity fits (§11.2)."""
        for arg in call.args:
            self.check_expr(arg, names, string_hint=True)
        module = namespace.find_module(call.module)
        if module is None and call.module in self.broken:
            return
        if module is None:
            hint = suggest(call.module, namespace.visible("modules"))
            self.undefined(f"undefined module '&{call.module}'", call.span, hint)
            return
        if len(call.args) != len(module.params):
            wanted = len(module.params)
            params = f" ({', '.join(module.params)})" if module.params else ""
            plural = "" if wanted == 1 else "s"
            self.error(
                f"module '&{module.name}' takes {wanted} argument{plural}{params} "
                f"but {len(call.args)} {'was' if len(call.args) == 1 else 'were'} given",
                call.span,
            )

    # ------------------------------------------------------------------ actions (§9)

    def check_action(self, action: Action, namespace: Namespace) -> None:
        names = self.action_names(action, namespace)
        spans = dict(action.field_spans)
        if ACTION_KINDS[action.kind].has_executor and action.executor is not None:
            self.check_name(action.executor, spans.get("executor", action.span), names)
        if action.role is not None:
            self.check_name(action.role, spans.get("role", action.span), names)
        in_names = self.check_inputs(action, names)
        for text in (action.prompt, action.showprompt):
            self.check_text(text, names, in_names)
        if action.scope is not None:
            for item in action.scope.items:
                if item.kind != "all":
                    self.check_name(item.name, item.span, names)
        for out in action.outs or ():
            self.check_target(out.target, names, out=True)
            if out.type is not None and out.type.choices_from is not None:
                self.check_target(out.type.choices_from, names)
        for assignment in action.assignments:
            self.check_target(assignment.target, names)
            self.check_expr(assignment.value, names, string_hint=True)
        self.check_resolve(action, names, in_names)
        self.check_methods_used(action, namespace)
        if action.fallback is not None:
            self.check_fallback(action, namespace, names)
        interrupt = action.interrupt
        if interrupt is not None:
            condition = interrupt.condition
            lone = condition.reads[0] if condition and len(condition.reads) == 1 else None
            if lone is not None and condition is not None and condition.text.strip() == lone.name:
                if not (lone.name in names or lone.name in self.actors or lone.name in self.broken):
                    self.error(
                        f"interrupt: '{lone.name}' is not a declared variable",
                        lone.span,
                        self.module_local_hint(lone.name)
                        or "interrupt: takes HUMAN, HUMAN_EXCEPT(@a, …), a condition such as "
                        "night == true, or alias.function (§10.7)",
                    )
            else:
                self.check_expr(condition, names, string_hint=True)
            if interrupt.func is not None:
                self.check_func(interrupt.func, builtin_ok=False)
            for actor in interrupt.actors:
                self.check_name(actor, interrupt.span or action.span, names)

    def check_inputs(self, action: Action, names: set[str]) -> set[str]:
        """``in:`` items (§9.4, §9.7); returns the names the prompt may use."""
        if action.inputs is None:
            if action.kind == "func" and action.func is not None:
                self.check_implicit_inputs(action, names)
            return set()
        for item in action.inputs:
            if item.expr is None:
                self.check_name(item.name, item.span, names)
            else:
                self.check_expr(item.expr, names, string_hint=True)
        if action.kind == "func" and action.func is not None:
            signature = self.check_func(action.func, builtin_ok=True)
            if signature is not None:
                keywords = [(item.name.lstrip("@"), item.span) for item in action.inputs]
                self.check_arguments(
                    signature, action.func, keywords, complete=True, span=action.func.span
                )
        return {item.name for item in action.inputs}

    def check_implicit_inputs(self, action: Action, names: set[str]) -> None:
        """§9.7: without ``in:``, each parameter without default takes the same-named variable."""
        assert action.func is not None
        signature = self.check_func(action.func, builtin_ok=True)
        if signature is None:
            return
        for param in signature.required:
            if param not in names:
                self.error(
                    f"parameter '{param}' of '{action.func.alias}.{action.func.func}' has no "
                    f"default and no variable '{param}' is declared",
                    action.func.span,
                    self.module_local_hint(param)
                    or f"declare '{param}' in vars: or pass it with in: {param} = …",
                )

    def check_text(self, text: Text | None, names: set[str], in_names: set[str]) -> None:
        """``{placeholders}`` (§9.4): declared names, or ``in:`` names when ``in:`` is given."""
        if text is None:
            return
        for placeholder in text.placeholders:
            ref = placeholder.ref
            known = ref.name in names or ref.name in self.actors or ref.name in self.broken
            if not in_names and not known and not ref.name.startswith("@"):
                hint = suggest(ref.name, {n for n in names if not n.startswith("@")})
                if self.module_local_hint(ref.name) is not None:
                    hint = None  # where it is declared says more than a look-alike name
                literal = f"write {{{{{placeholder.path}}}}} for literal braces"
                self.undefined(
                    f"undeclared variable '{ref.name}'",
                    ref.span,
                    f"{hint} Or {literal}"
                    if hint
                    else f"{self.declare_hint(ref.name)}; or {literal}",
                )
            elif not in_names:
                self.check_path(ref, names)
            elif ref.name not in in_names and (ref.name in names or ref.name in self.actors):
                self.warning(
                    f"'{{{placeholder.path}}}' stays literal text: '{ref.name}' is not listed in in:",
                    placeholder.span,
                    "with in:, only the names it lists are substituted (§9.4)",
                )

    def check_resolve(self, action: Action, names: set[str], in_names: set[str]) -> None:
        resolve = action.resolve
        if resolve is None:
            return
        signature = self.check_func(resolve.func, builtin_ok=False)
        if resolve.args is None:
            return
        allowed = names | in_names | RESOLVE_INPUTS
        for arg in resolve.args:
            if arg not in allowed:
                self.check_name(arg, resolve.span, allowed)
        if signature is not None:
            keywords = [(arg, resolve.span) for arg in resolve.args]
            self.check_arguments(
                signature, resolve.func, keywords, complete=False, span=resolve.span
            )

    def check_methods_used(self, action: Action, namespace: Namespace) -> None:
        for kind, name in (("memory", action.memory), ("context", action.context)):
            if name is None:
                continue
            method = namespace.find_method(name)
            span = dict(action.field_spans).get(kind, action.span)
            if method is None and name in self.broken:
                continue
            if method is None:
                candidates = {
                    n for lv in namespace.chain() for n, m in lv.methods.items() if m.kind == kind
                }
                self.error(f"unknown {kind} method '{name}'", span, suggest(name, candidates))
            elif method.kind != kind:
                self.error(f"'{name}' is a {method.kind} method, not a {kind} method", span)

    def check_fallback(self, action: Action, namespace: Namespace, names: set[str]) -> None:
        _CheckFallback(self).visit(action.fallback, action, namespace, names)

    # ------------------------------------------------------------------ methods (§8)

    def check_method(self, method: Method, namespace: Namespace) -> None:
        names = self.names_of(namespace)
        signature = self.check_func(method.func, builtin_ok=False)
        keywords: list[tuple[str, Span]] = []
        for item in method.inputs:
            if item.expr is not None:
                self.check_expr(item.expr, names)
            elif item.name not in METHOD_INPUTS:
                self.check_name(item.name, item.span, names)
            keyword = "actor_info" if item.name == "@actor" else item.name.lstrip("@")
            keywords.append((keyword, item.span))
        if signature is not None:
            self.check_arguments(signature, method.func, keywords, complete=True, span=method.span)
        for output in method.outputs:
            if output not in names and output not in self.broken:
                hint = self.module_local_hint(output) or suggest(output, names)
                self.error(f"undeclared variable '{output}'", method.span, hint)

    # ------------------------------------------------------------------ helpers for flows

    def is_unbound_actor_variable(self, name: str, namespace: Namespace) -> bool:
        """§9.5: an actor variable declared as ``""`` (or null) is bound only by a loop."""
        if not name.startswith("@") or name in self.actors:
            return False
        decl = namespace.declaration(name)
        if decl is None:
            return False
        value = decl.value
        return isinstance(value, NullValue) or (
            isinstance(value, StringValue) and value.value == ""
        )


class _CheckFallback(BindingVisitor[None]):
    """``fallback:`` names an action or calls a module, bound like a flow node (§10.6)."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker

    def visit_ModuleCall(
        self, call: ModuleCall, action: Action, namespace: Namespace, names: set[str]
    ) -> None:
        self.checker.check_module_call(call, namespace, names)

    def visit_ActionName(
        self, name: str, action: Action, namespace: Namespace, names: set[str]
    ) -> None:
        if name in self.checker.broken:
            return
        span = dict(action.field_spans).get("fallback", action.span)
        if namespace.find_action(name) is None:
            hint = suggest(name, namespace.visible("actions"))
            self.checker.error(f"undefined fallback action '{name}'", span, hint)
        elif name == action.name:
            self.checker.error(f"action '{action.name}' cannot be its own fallback", span)


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


def _all_modules(modules: Iterable[Module]) -> list[Module]:
    return [inner for module in modules for inner in (module, *_all_modules(module.modules))]


def _loop_variables(graph: Graph | None) -> set[str]:
    """The variables every ``for``/``par`` of a flow binds, nested bodies included."""
    return {node.var for node in walk(graph) if isinstance(node, Loop)}


def _whole_number(value: object, minimum: int) -> bool:
    return (
        isinstance(value, NumberValue) and isinstance(value.value, int) and value.value >= minimum
    )


def code_calls(python: str) -> list[tuple[str, str]]:
    """The ``ctx.code("alias").fn`` references of a rewritten expression (ARCHITECTURE.md)."""
    try:
        tree = ast.parse(python, mode="eval")
    except SyntaxError:
        return []
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "code"
            and node.value.args
            and isinstance(node.value.args[0], ast.Constant)
            and isinstance(node.value.args[0].value, str)
        ):
            found.append((node.value.args[0].value, node.attr))
    return found
