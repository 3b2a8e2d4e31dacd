"""The checks of references to names (§4.1, §5, §7.3, §11.2): one :class:`References` a script.

A variable or actor read, an attribute path, an assignment's or out's target, a ``code:``
function and its arguments, a module call: each is checked where it is written against the
names visible there (which the caller works out, §11.3), and reported in the script's
:class:`~fems2py.checks.report.Report`.
"""

from __future__ import annotations

import ast
import contextlib
import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set

from fems_runtime.words import FIXED_ACTOR_ATTRIBUTES

from fems2py.checks.callers import Callers, Key
from fems2py.checks.codefiles import FuncSignature, Param
from fems2py.checks.report import Report
from fems2py.checks.scope import Namespace, all_modules
from fems2py.diagnostics import suggest
from fems2py.nodes import DictValue, Expr, FuncRef, ModuleCall, PathRef, Script, Span, Target

#: §8.1: ``@actor`` is the speaking actor, known only to memory and context methods.
METHOD_ACTOR_HINT = (
    "@actor (the speaking actor, passed as actor_info) is an input of memory and context "
    "methods only (§8.1)"
)

#: §9.8: the built-in ``system.spawn``.
SPAWN = FuncSignature("spawn", (Param("spawn_requests", False),), False, 0)


class References:
    """Checks the references of one script. ``signatures``: the functions of each readable
    ``code:`` file; ``broken_aliases``: the aliases whose file is missing or broken (already
    reported); ``loop_variables``: every variable a ``for``/``par`` binds somewhere."""

    def __init__(
        self,
        script: Script,
        report: Report,
        signatures: Mapping[str, Mapping[str, FuncSignature]],
        broken_aliases: Set[str],
        loop_variables: Set[str],
    ) -> None:
        self.script = script
        self.report = report
        self.signatures = signatures
        self.broken_aliases = broken_aliases
        self.loop_variables = loop_variables
        self.actors = frozenset(actor.name for actor in script.actors)
        #: Names whose definition had a syntax error: already reported, so their uses pass.
        self.broken = script.broken_names
        #: Spans of ``dict[word]`` targets whose word names no variable where it is written:
        #: the key is the string itself (§4.2), found by :meth:`check_index_key`.
        self.string_keys: set[Span] = set()
        #: Where each module and action runs (§11.3), once the checker knows, and what the
        #: names being checked are read in (:meth:`reading_in`).
        self.callers: Callers | None = None
        self.reader: Key | None = None

    @contextlib.contextmanager
    def reading_in(self, reader: Key | None) -> Iterator[None]:
        """The names checked meanwhile are read in ``reader`` (a module's flow, an action): a
        name that only some of the places it runs bind gets, in its hint, a place that does
        not (§11.3), since the read itself is not what needs fixing."""
        previous, self.reader = self.reader, reader
        try:
            yield
        finally:
            self.reader = previous

    def where_unbound(self, name: str, outside: str, *, loop_var: bool = False) -> str | None:
        """Where the module or action being checked runs without ``name`` though some place it
        runs binds it (:meth:`Callers.where_unbound`)."""
        if self.callers is None:
            return None
        return self.callers.where_unbound(self.reader, name, outside, loop_var=loop_var)

    def caller_loop_hint(self, name: str) -> str | None:
        """Where the module being checked runs outside a loop that binds ``name``, when a loop
        around some other call of it does (§11.3)."""
        return self.where_unbound(name, f"a loop that binds {name}", loop_var=True)

    def caller_hint(self, name: str) -> str | None:
        """The hint for a name that some of the places the module or action being checked runs
        bind (§11.3): no typo, so it comes before any look-alike name."""
        if self.callers is None or not self.callers.partly_bound(self.reader, name):
            return None
        return self.declare_hint(name)

    def declare_hint(self, name: str) -> str:
        """How to fix an undeclared name: a loop variable used outside its loop, a module's
        local read elsewhere, or vars:."""
        local = self.module_local_hint(name)
        if local is not None:
            return local
        if name in self.loop_variables:
            hint = f"'{name}' is bound only inside the body of its for/par loop (§12.7)"
            where = self.where_unbound(name, "that loop")
            return f"{hint}, but {where}" if where else hint
        return f"every variable is declared in vars: first (§4.1), e.g. {name} = 0"

    def module_local_hint(self, name: str) -> str | None:
        """§12.11: a name declared only in a module's vars: is that module's (§11.2); say
        where it is declared, where it is read without it, and how to share it."""
        found = self.module_locals.get(name)
        if found is None:
            return None
        module, line = found
        where = self.where_unbound(name, f"module {module}")
        return (
            f"'{name}' is a local of module {module} (line {line})"
            + (f", but {where}" if where else "")
            + "; declare it in the top-level vars: to share it between modules"
        )

    def inner_definition_hint(self, kind: str, name: str) -> str | None:
        """§11.4: an action or module defined inside a module is that module's; say where, so
        that "undefined" does not read as "not written anywhere"."""
        for module in all_modules(self.script.modules):
            found = module.actions if kind == "action" else module.modules
            inner = next((item for item in found if item.name == name), None)
            if inner is not None:
                verb = "run" if kind == "action" else "call"
                return (
                    f"'{name}' is defined inside module {module.name} (line {inner.span.line}): "
                    f"only {module.name}'s flow and the modules inside it can {verb} it; "
                    "define it at the top level to share it"
                )
        return None

    @functools.cached_property
    def module_locals(self) -> dict[str, tuple[str, int]]:
        """Each name declared in some module's vars: → (that module, the line); the first
        module in source order when several declare it."""
        found: dict[str, tuple[str, int]] = {}
        for module in all_modules(self.script.modules):
            for decl in module.variables:
                found.setdefault(decl.name, (module.name, decl.span.line))
        return found

    @functools.cached_property
    def attribute_dicts(self) -> frozenset[str]:
        """Dicts declared under a static attribute's name (``name = {@a: "Ann"}``): a path
        ``@a.name`` reads the static attribute, never them (§7.3)."""
        declared = [*self.script.variables]
        for module in all_modules(self.script.modules):
            declared += module.variables
        return frozenset(
            decl.name
            for decl in declared
            if decl.name in FIXED_ACTOR_ATTRIBUTES and isinstance(decl.value, DictValue)
        )

    def check_name(
        self, name: str, span: Span, names: Set[str], *, string_hint: bool = False
    ) -> bool:
        """A read of a variable or actor (§4.1); reports and returns False when undeclared."""
        if name in self.broken:
            return True
        if name.startswith("@"):
            if name in self.actors or name in names:
                return True
            candidates = self.actors | {n for n in names if n.startswith("@")}
            hint = (
                self.caller_hint(name)
                or self.module_local_hint(name)
                or (METHOD_ACTOR_HINT if name == "@actor" else None)
                or suggest(name, candidates)
                or (
                    self.declare_hint(name)
                    if name in self.loop_variables
                    else "define it in actors: or declare it in vars:"
                )
            )
            self.report.undefined(f"unknown actor '{name}'", span, hint)
            return False
        if name in names:
            return True
        found = self.caller_hint(name) or self.module_local_hint(name)
        found = found or self.actor_hint(name, names)
        found = found or suggest(name, {n for n in names if not n.startswith("@")})
        if found is None and string_hint and name.isidentifier():
            found = f"did you mean the string '{name}'? Otherwise declare it in vars:"
        self.report.undefined(
            f"undeclared variable '{name}'", span, found or self.declare_hint(name)
        )
        return False

    def actor_hint(self, name: str, names: Set[str]) -> str | None:
        """A bare name that is an actor's, or an actor variable's, without its '@' (§6.1)."""
        actor = f"@{name}"
        if actor not in self.actors and actor not in names:
            return None
        return f"actor references carry '@' (§6.1): did you mean {actor}?"

    def check_path(self, ref: PathRef, names: Set[str], *, string_hint: bool = False) -> None:
        if ref.name in self.signatures or ref.name in self.broken_aliases:
            return
        if not self.check_name(ref.name, ref.span, names, string_hint=string_hint):
            return
        if ref.attr in FIXED_ACTOR_ATTRIBUTES and ref.attr in self.attribute_dicts:
            self.report.warning(
                f"{ref.name}.{ref.attr} is the actor's own {ref.attr}, not an entry of the dict "
                f"'{ref.attr}' (§7.3)",
                ref.span,
                f"read the entry as {ref.attr}[{ref.name}], or rename the dict (my_{ref.attr})",
            )
        if ref.attr is None or ref.attr in FIXED_ACTOR_ATTRIBUTES or ref.attr in names:
            return
        hint = self.module_local_hint(ref.attr) or suggest(
            ref.attr, {n for n in names if not n.startswith("@")} | FIXED_ACTOR_ATTRIBUTES
        )
        self.report.error(
            f"unknown attribute '{ref.attr}' of {ref.name}",
            ref.span,
            hint or f"declare a dict in vars: ({ref.attr} = {{}}) to give actors this attribute",
        )

    def check_expr(self, expr: Expr | None, names: Set[str], *, string_hint: bool = False) -> None:
        """Every read of an embedded expression, and every ``alias.fn`` it calls (§12.2)."""
        if expr is None:
            return
        for ref in expr.reads:
            self.check_path(ref, names, string_hint=string_hint)
        for alias, func, called in code_calls(expr.python):
            call = FuncRef(alias, func, expr.span)
            signature = self.check_func(call, builtin_ok=False, called=called)
            if called and signature is not None and signature.is_async:
                self.report.error(
                    f"'{alias}.{func}' is an async def, which an expression cannot await",
                    expr.span,
                    "call it from an @func action, which awaits it, and read its out; "
                    "or make it a plain def (§5)",
                )

    def check_target(self, target: Target, names: Set[str], *, out: bool = False) -> None:
        """An assignment or out target (§9.6, §10.4): the variable must be declared, and so
        must a variable key (``dict.@x``, ``dict[i]``, an expression's reads). ``out``: a key
        of an out must be an actor, a variable or a literal (it is resolved when the signal
        or return value is applied, §10.4)."""
        if target.name in self.broken or target.key in self.broken:
            return
        if target.key_kind == "index":
            self.check_index_key(target, names, out=out)
        if target.key_kind == "name" and target.key in names:
            self.report.warning(
                f"'{target.written}' writes the key '{target.key}' (a name after '.' is the key "
                f"itself), not the value of the variable {target.key}",
                target.span,
                f"write {target.name}[{target.key}] for the entry at {target.key}'s value, or "
                f'{target.name}["{target.key}"] to keep the string key',
            )
        if target.key_kind == "actor" and target.key is not None:
            self.check_name(target.key, target.span, names)
            if target.name in FIXED_ACTOR_ATTRIBUTES:
                self.report.error(
                    f"cannot assign the static attribute '{target.name}' of {target.key}",
                    target.span,
                    "type, soul, source, tools and name are fixed by actors:",
                )
                return
        if target.name.startswith("@") and target.name in self.actors:
            if target.name not in names:
                self.report.error(
                    f"'{target.name}' is an actor, not a variable, and cannot be assigned",
                    target.span,
                    f'declare an actor variable in vars: ({target.name[:1]}x = "")',
                )
            return
        if target.name in names:
            return
        hint = self.caller_hint(target.name) or self.module_local_hint(target.name)
        hint = hint or suggest(target.name, names) or self.declare_hint(target.name)
        self.report.undefined(f"undeclared variable '{target.name}'", target.span, hint)

    def check_index_key(self, target: Target, names: Set[str], *, out: bool) -> None:
        """``dict[key]``: a bare word that names no variable here is the string itself (§4.2),
        one that only some places the action runs bind is an error, as its read would be
        (§7.3); other reads must be declared; an out's key must be simple."""
        expr = target.key_expr
        if expr is None:
            return
        word = target.key_word
        if word is not None:
            if word in names or word in self.broken:
                return
            if self.caller_hint(word) is not None:  # the variable, where some of its places run
                hint = f'{self.declare_hint(word)}; or write {target.name}["{word}"] for the string'
                self.report.undefined(f"undeclared variable '{word}'", expr.span, hint)
                return
            self.string_keys.add(target.span)
            near = suggest(word, {n for n in names if not n.startswith("@")})
            if near is not None:
                self.report.warning(
                    f"'{word}' is not a variable here, so the key of "
                    f"'{target.written}' is the string '{word}'",
                    expr.span,
                    f'{near} (write {target.name}["{word}"] for the string itself)',
                )
            return
        if out and expr.reads:
            self.report.error(
                f"the key of out '{target.written}' must be @x, a variable or a literal",
                expr.span,
                "compute the key in an @assign first, e.g. key = …, then write "
                f"out: {target.name}[key]",
            )
            return
        self.check_expr(expr, names, string_hint=True)

    def check_func(
        self, ref: FuncRef, *, builtin_ok: bool, called: bool = True
    ) -> FuncSignature | None:
        """``alias.fn`` must name a function of a ``code:`` file (§5) or the built-in spawn;
        a name an expression reads without calling it may be any value (``game.ROUNDS``)."""
        if ref.alias == "system" and "system" not in self.signatures:
            if ref.func == "spawn" and builtin_ok:
                return SPAWN
            if ref.func == "spawn":
                self.report.error("system.spawn can only be called by an @func action", ref.span)
            else:
                self.report.error(
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
            self.report.error(
                f"unknown code alias '{ref.alias}'",
                ref.span,
                hint or f'declare it in code: ({ref.alias} = file:"{ref.alias}.py")',
            )
            return None
        signature = functions.get(ref.func)
        if signature is None:
            path = self.code_path(ref.alias)
            self.report.error(
                f"'{ref.alias}.{ref.func}' is not defined in {path}",
                ref.span,
                suggest(ref.func, functions) or defined_functions(path, list(functions)),
            )
        elif called and signature.value is not None:
            path = self.code_path(ref.alias)
            callables = [name for name, found in functions.items() if found.value is None]
            self.report.error(
                f"'{ref.alias}.{ref.func}' is not a function: {path} sets it to "
                f"{signature.value} at line {signature.line}",
                ref.span,
                suggest(ref.func, callables) or defined_functions(path, callables),
            )
            return None
        return signature

    def code_path(self, alias: str) -> str:
        """The file of a ``code:`` alias, as the script writes it."""
        return next(c.path for c in self.script.code if c.alias == alias)

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
                self.report.error(
                    f"'{ref.alias}.{ref.func}' has no parameter '{keyword}'",
                    keyword_span,
                    suggest(keyword, names) or f"its parameters are: {', '.join(names) or 'none'}",
                )
        if complete:
            for name in signature.required:
                if name not in given:
                    self.report.error(
                        f"'{ref.alias}.{ref.func}' needs argument '{name}', which in: does not pass",
                        span,
                        "add '@actor' to in: (it is passed as actor_info, §8.1)"
                        if name == "actor_info"
                        else f"add '{name} = …' to in:",
                    )

    def check_module_call(self, call: ModuleCall, namespace: Namespace, names: Set[str]) -> None:
        """``&M(args)``: the module exists where it is called and the arity fits (§11.2)."""
        for arg in call.args:
            self.check_expr(arg, names, string_hint=True)
        module = namespace.find_module(call.module)
        if module is None and call.module in self.broken:
            return
        if module is None:
            hint = None
            if namespace.find_action(call.module) is not None:  # before a merely close module
                hint = f"'{call.module}' is an action: run it without '&' (… -> {call.module} -> …)"
                hint += "; actions take no arguments" if call.args else ""
            hint = hint or suggest(call.module, namespace.visible("modules"))
            hint = hint or self.inner_definition_hint("module", call.module)
            self.report.undefined(f"undefined module '&{call.module}'", call.span, hint)
            return
        if len(call.args) != len(module.params):
            wanted = len(module.params)
            params = f" ({', '.join(module.params)})" if module.params else ""
            plural = "" if wanted == 1 else "s"
            self.report.error(
                f"module '&{module.name}' takes {wanted} argument{plural}{params} "
                f"but {len(call.args)} {'was' if len(call.args) == 1 else 'were'} given",
                call.span,
                arity_hint(module.name, module.params, len(call.args)),
            )


def arity_hint(module: str, params: Sequence[str], given: int) -> str:
    """The call to write, with the module's own parameter names: arguments are never bound
    automatically from variables of the same name (§11.2), so a bare ``&M`` needs them spelled."""
    if not params:
        return f"'&{module}' has no parameters: call it as &{module}"
    call = f"&{module}({', '.join(params)})"
    if given == 0:
        return f"pass them: {call} (arguments are not bound automatically, §11.2)"
    if given < len(params):
        return f"pass every argument, in order: {call} (none is bound automatically, §11.2)"
    extra = given - len(params)
    return f"remove the {extra} extra argument{'' if extra == 1 else 's'}: {call}"


def code_calls(python: str) -> list[tuple[str, str, bool]]:
    """The ``ctx.code("alias").fn`` references of a rewritten expression (ARCHITECTURE.md), each
    with whether the expression calls it."""
    try:
        tree = ast.parse(python, mode="eval")
    except SyntaxError:
        return []
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    found: list[tuple[str, str, bool]] = []
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
            found.append((node.value.args[0].value, node.attr, id(node) in called))
    return found


def defined_functions(path: str, names: list[str], shown: int = 5) -> str:
    """What a code file does define, when nothing is close to the name asked for."""
    if not names:
        return f"{path} defines no functions"
    more = f", … ({len(names) - shown} more)" if len(names) > shown else ""
    return f"{path} defines: {', '.join(names[:shown])}{more}"
