"""An action → its view for the ``action_*`` templates: a function running one spec (§9, §10).

:class:`ActionCode` writes each field of an action as an argument of its spec: a prompt as
``fr.lines(…)``, ``in:`` as a dict evaluated when the action runs, ``out:`` as the
``fr.OutSpec`` values, ``fallback:``/``interrupt:`` as lambdas; an ``@assign`` action as its
``ctx.assign`` statements. :class:`Scope` says which function each action and module name
stands for in a flow, for these and for :mod:`fems2py.flowcode`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fems2py.kinds import ACTION_KINDS
from fems2py.nodes import Action, Assignment, Input, ModuleCall, Out, Span, Target
from fems2py.pycode import (
    call_code,
    dict_code,
    docstring,
    line_marker,
    plain_value,
    py,
    python_name,
    python_of,
    read_code,
    text_code,
    tuple_code,
)
from fems2py.visitor import BindingVisitor

# ------------------------------------------------------------------------------ view models


@dataclass(frozen=True)
class SpecArg:
    """One argument of an action's spec: ``name=code`` (a positional one has no name), with
    a line marker before it when it is computed as the action runs from a field of its own."""

    name: str
    code: str
    marker: str = ""


@dataclass(frozen=True)
class ActionView:
    """One action: an async function taking the run's ``Context``."""

    function: str
    marker: str
    construct: str  # a comment naming the source construct when the code cannot
    docstring: str | None
    kind: str
    name: str  # the action's .fems name, which the function stands for when it can
    # ai/human/mind: arguments of ``fr.TurnSpec``; func: of ``fr.FuncSpec``
    spec_args: tuple[SpecArg, ...] = ()
    # assign: (marker, statement)
    statements: tuple[tuple[str, str], ...] = ()


# ------------------------------------------------------------------------------ scopes


@dataclass
class Scope:
    """The names visible in one flow: actions and modules (innermost wins, §11.4) and the
    variables declared on the way (for ``dict[key]`` targets)."""

    key: str
    actions: dict[str, str] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)
    variables: frozenset[str] = frozenset()

    def nested(self, key: str) -> Scope:
        return Scope(key, dict(self.actions), dict(self.modules), self.variables)


def module_call_args(scope: Scope, call: ModuleCall) -> str:
    """The arguments of ``ctx.call``/``ctx.run_module`` for a module call: the module's
    function, then the call's arguments."""
    function = scope.modules.get(call.module, python_name(call.module))
    return ", ".join([function, *(python_of(arg) for arg in call.args)])


# ------------------------------------------------------------------------------ actions


@dataclass(frozen=True)
class ActionCode:
    """Builds the :class:`ActionView` of each action of one script: the arguments of its
    spec (``fr.TurnSpec``, ``fr.FuncSpec``) or its assignments, as code."""

    # the entry targets whose key is a string word (§10.4), from the checker
    string_keys: frozenset[Span]
    # the author's `#` comment lines directly above a .fems line
    comments_above: Callable[[int], list[str]]

    def view(self, scope: Scope, action: Action, named: bool) -> ActionView:
        """The action's view; ``named``: whether its function is named after it, else a
        comment names its construct (a name Python reserves, one taken twice:
        ``DevLoop_review`` with ``action="review"`` names the rest)."""
        function = scope.actions[action.name]
        marker = line_marker(action.span.line)
        where = _in_module(scope)
        doc = docstring("\n".join(self.comments_above(action.span.line))) or None

        def construct(text: str) -> str:
            return "" if named else text

        if ACTION_KINDS[action.kind].assigns:
            statements = tuple(
                (line_marker(a.span.line), self.assign_code(a)) for a in action.assignments
            )
            construct_text = construct(f"action {action.name} @{action.kind}{where}")
            return ActionView(
                function,
                marker,
                construct_text,
                doc,
                action.kind,
                action.name,
                statements=statements,
            )
        args: list[tuple[str, str]] = []
        if action.func is not None:  # a @func action (§9.7)
            args += [("", py(action.func.alias)), ("", py(action.func.func))]
            head = f"@{action.kind}({action.func.alias}.{action.func.func})"
            if action.inputs is not None:
                args.append(("inputs", self.inputs_code(action.inputs)))
            if action.outs is not None:
                args.append(("outs", self.outs_code(action.outs)))
        else:
            assert action.executor is not None
            args.append(("", py(action.executor)))
            head = f"@{action.kind}({action.executor})"
            args += self.turn_args(scope, action)
        spec_args = self.spec_args(action, args)
        construct_text = construct(f"action {action.name} {head}{where}")
        return ActionView(
            function, marker, construct_text, doc, action.kind, action.name, spec_args=spec_args
        )

    def turn_args(self, scope: Scope, action: Action) -> list[tuple[str, str]]:
        """The spec arguments of an ai/human/mind turn after its executor, in field order."""
        args: list[tuple[str, str]] = []
        if action.role is not None:
            args.append(("role", py(action.role)))
        if action.prompt is not None:
            args.append(("prompt", text_code(action.prompt.value)))
        if action.showprompt is not None:
            args.append(("showprompt", text_code(action.showprompt.value)))
        if action.scope is not None:
            # as the script writes them: "@god", "wolves", "{alive}", "all"
            written = {"actor": "{}", "var": "{}", "expand": "{{{}}}", "all": "all"}
            items = tuple(written[item.kind].format(item.name) for item in action.scope.items)
            args.append(("scope", py(items)))
        if action.inputs is not None:
            args.append(("inputs", self.inputs_code(action.inputs)))
        if action.outs is not None:
            args.append(("outs", self.outs_code(action.outs)))
        if action.resolve is not None:
            resolve = action.resolve
            spec = [("", py(resolve.func.alias)), ("", py(resolve.func.func))]
            args.append(("resolve", call_code("fr.ResolveSpec", [*spec, ("", py(resolve.args))])))
        if action.max_retries is not None:
            args.append(("max_retries", py(action.max_retries)))
        if action.max_tool_rounds is not None:
            args.append(("max_tool_rounds", py(action.max_tool_rounds)))
        if action.max_tokens is not None:
            args.append(("max_tokens", py(action.max_tokens)))
        if action.fallback is not None:
            args.append(("fallback", self.fallback_code(scope, action.fallback)))
        if action.memory is not None:
            args.append(("memory", py(action.memory)))
        if action.context is not None:
            args.append(("context", py(action.context)))
        if action.interrupt is not None:
            args.append(("interrupt", self.interrupt_code(action)))
        if action.model is not None:
            args.append(("model", py(action.model)))
        return args

    def spec_args(self, action: Action, args: Iterable[tuple[str, str]]) -> tuple[SpecArg, ...]:
        """The spec's arguments, each computed one (``in:``, ``out:`` with a variable key or
        choices, a condition interrupt) after a marker of its field's line."""
        lines = {name: span.line for name, span in action.field_spans}
        interrupt = action.interrupt
        computed = {
            "inputs": "in",
            "outs": "out"
            if any((o.type and o.type.choices_from) or o.target.key_word for o in action.outs or ())
            else "",
            "interrupt": "interrupt"
            if interrupt and interrupt.kind in ("condition", "func")
            else "",
        }
        result = []
        for name, code in args:
            line = lines.get(computed.get(name, ""), action.span.line)
            marker = line_marker(line) if line != action.span.line else ""
            result.append(SpecArg(name, code, marker))
        return tuple(result)

    def fallback_code(self, scope: Scope, fallback: str | ModuleCall) -> str:
        call = _Fallback().visit(fallback, scope)
        assert call is not None
        return f"lambda: {call}"

    def interrupt_code(self, action: Action) -> str:
        interrupt = action.interrupt
        assert interrupt is not None
        if interrupt.kind == "human":
            return "fr.InterruptSpec('human')"
        if interrupt.kind == "human_except":
            return call_code(
                "fr.InterruptSpec", [("", py("human_except")), ("actors", py(interrupt.actors))]
            )
        if interrupt.kind == "condition":
            assert interrupt.condition is not None
            check = f"lambda: {python_of(interrupt.condition)}"
        else:
            assert interrupt.func is not None
            check = f"lambda: ctx.code({py(interrupt.func.alias)}).{interrupt.func.func}()"
        return call_code("fr.InterruptSpec", [("", py("check")), ("check", check)])

    def assign_code(self, assignment: Assignment) -> str:
        target: Target = assignment.target
        args = [py(target.name), py(assignment.op), python_of(assignment.value)]
        if target.key is not None:
            args.append(f"key={self.key_code(target)}")
        return f"ctx.assign({', '.join(args)})"

    def key_code(self, target: Target) -> str:
        """The Python for the key of an entry target, by how it was written (see
        :class:`~fems2py.nodes.Target`): ``@x`` and variables are read in the current frame,
        ``dict.key`` and string-word keys are strings, literals are their value."""
        assert target.key is not None
        if target.key_kind == "actor":  # resolved: an unbound actor variable is no key
            return f"ctx.actor({py(target.key)})"
        if target.key_kind == "name" or target.key_expr is None:
            return py(target.key)
        word = target.key_word
        if word is not None:
            return py(word) if target.span in self.string_keys else read_code(word)
        try:
            return py(ast.literal_eval(target.key_expr.python))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return python_of(target.key_expr)

    def inputs_code(self, inputs: tuple[Input, ...]) -> str:
        """``in:`` values as a dict literal, evaluated when the action runs (without ``in:``
        the spec has no ``inputs`` and the runtime passes the variables named like the
        function's parameters, §9.7)."""
        return dict_code(
            (item.name, python_of(item.expr) if item.expr is not None else read_code(item.name))
            for item in inputs
        )

    def outs_code(self, outs: tuple[Out, ...]) -> str:
        """The ``fr.OutSpec`` tuple of an action, built when it runs (§10.4): an ``@x`` key is
        passed as written and resolved when the signal is applied; a variable key
        (``dict[i]``) is passed as its current value plus ``key_from``, the variable the
        signal whitelist reads again when a signal is applied (§10.4's current binding)."""
        items = []
        for out in outs:
            target = out.target
            args = [("", py(target.name))]
            if target.key is not None:
                variable = target.key_word is not None and target.span not in self.string_keys
                key = py(target.key) if target.key_kind == "actor" else self.key_code(target)
                args.append(("key", key))
                if variable:
                    args.append(("key_from", py(target.key_word)))
            if out.type is not None:
                args.append(("type", py(out.type.name)))
                if out.type.choices_from is not None:
                    # choices={alive}: the list as it is when the action runs (§10.4)
                    choices = f"tuple({read_code(out.type.choices_from.name)})"
                    args.append(("choices", choices))
                elif out.type.choices:
                    args.append(("choices", py(tuple(plain_value(c) for c in out.type.choices))))
            if out.optional:
                args.append(("optional", "True"))
            if out.caption is not None:
                args.append(("caption", py(out.caption)))
            # a plain out is its name, as the script writes it
            items.append(args[0][1] if len(args) == 1 else call_code("fr.OutSpec", args))
        if len(items) == 1 and items[0].startswith("fr.OutSpec("):
            return items[0]  # one spec needs no one-item tuple around it
        return tuple_code(items)


class _Fallback(BindingVisitor[str]):
    """The call an action's ``fallback:`` makes: another action or a module (§10.6)."""

    def visit_ActionName(self, action: str, scope: Scope) -> str:
        return f"{scope.actions.get(action, python_name(action))}(ctx)"

    def visit_ModuleCall(self, call: ModuleCall, scope: Scope) -> str:
        return f"ctx.run_module({module_call_args(scope, call)})"


def _in_module(scope: Scope) -> str:
    """`` in module Outer/Inner`` for a module's action."""
    return f" in module {scope.key.removeprefix('module:')}" if scope.key != "main" else ""
