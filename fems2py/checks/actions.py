"""The checks of actions (§9, §10) and of memory/context methods (§8).

What each field of an action names (its executor, the prompt's placeholders, ``in:``,
``out:``, ``resolve:``, ``memory:``/``context:``, ``fallback:``, ``interrupt:``) must exist
where the action runs; :class:`ActionChecks` asks :class:`~fems2py.checks.references.References`
about each name, with the names the action sees (worked out by the checker, §11.3).
"""

from __future__ import annotations

from collections.abc import Set

from fems_runtime.words import ACTOR_TYPES

from fems2py.checks.references import References
from fems2py.checks.scope import Namespace
from fems2py.diagnostics import suggest
from fems2py.kinds import ACTION_KINDS
from fems2py.nodes import Action, Interrupt, Method, ModuleCall, Placeholder, Span, Text
from fems2py.visitor import BindingVisitor

#: §8.1: ``in:`` names of memory/context methods that are not variables.
METHOD_INPUTS = frozenset({"prompt", "session", "session_id", "turn", "turn_id", "@actor"})
#: §10.5: names a ``resolve:`` argument list may use besides variables and ``in:`` names.
RESOLVE_INPUTS = frozenset({"SET_VARIABLE", "prompt", "llm_output"})


class ActionChecks:
    """Checks actions and methods of one script through its :class:`References`."""

    def __init__(self, references: References) -> None:
        self.references = references
        self.report = references.report

    def check_action(self, action: Action, namespace: Namespace, names: Set[str]) -> None:
        """What an action's fields name exists where the action runs (``names``: the
        variables it sees there, §11.3), and its fields fit one another."""
        spans = dict(action.field_spans)
        if ACTION_KINDS[action.kind].has_executor and action.executor is not None:
            self.references.check_name(action.executor, spans.get("executor", action.span), names)
        if action.role is not None:
            self.references.check_name(action.role, spans.get("role", action.span), names)
        in_names = self.check_inputs(action, names)
        for text in (action.prompt, action.showprompt):
            self.check_text(text, names, in_names)
        if action.scope is not None:
            for item in action.scope.items:
                if item.kind != "all":
                    self.references.check_name(item.name, item.span, names)
        for out in action.outs or ():
            self.references.check_target(out.target, names, out=True)
            if out.type is not None and out.type.choices_from is not None:
                self.references.check_target(out.type.choices_from, names)
        for assignment in action.assignments:
            self.references.check_target(assignment.target, names)
            self.references.check_expr(assignment.value, names, string_hint=True)
        self.check_resolve(action, names, in_names)
        self.check_methods_used(action, namespace)
        if action.fallback is not None:
            self.check_fallback(action, namespace, names)
        if action.interrupt is not None:
            self.check_interrupt(action, action.interrupt, names)

    def check_interrupt(self, action: Action, interrupt: Interrupt, names: Set[str]) -> None:
        """``interrupt:`` (§10.7): its condition, function or actors exist; a lone bare
        ``human`` or ``ai`` is the string (§12.2), always true, so every turn would be cut
        short at once: an error that points at ``HUMAN``."""
        forms = "HUMAN, HUMAN_EXCEPT(@a, …), a condition such as night == true, or alias.function"
        condition = interrupt.condition
        lone = condition.reads[0] if condition and len(condition.reads) == 1 else None
        if condition is not None and not condition.reads and condition.text.strip() in ACTOR_TYPES:
            word = condition.text.strip()
            self.report.error(
                f"interrupt: '{word}' is the string \"{word}\", a condition that is always true",
                condition.span,
                "write HUMAN, in capitals, for 'any human input interrupts' (§10.7)",
            )
        elif lone is not None and condition is not None and condition.text.strip() == lone.name:
            if not (
                lone.name in names
                or lone.name in self.references.actors
                or lone.name in self.references.broken
            ):
                self.report.error(
                    f"interrupt: '{lone.name}' is not a declared variable",
                    lone.span,
                    self.references.module_local_hint(lone.name)
                    or f"interrupt: takes {forms} (§10.7)",
                )
        else:
            self.references.check_expr(condition, names, string_hint=True)
        if interrupt.func is not None:
            self.references.check_func(interrupt.func, builtin_ok=False)
        for actor in interrupt.actors:
            self.references.check_name(actor, interrupt.span or action.span, names)

    def check_inputs(self, action: Action, names: Set[str]) -> set[str]:
        """``in:`` items (§9.4, §9.7); returns the names the prompt may use."""
        if action.inputs is None:
            if action.func is not None:  # a @func action (§9.7)
                self.check_implicit_inputs(action, names)
            return set()
        undeclared: set[str] = set()  # a misspelt bare name is one mistake, not also a bad argument
        for item in action.inputs:
            if item.expr is None:
                if not self.references.check_name(item.name, item.span, names):
                    undeclared.add(item.name)
            else:
                self.references.check_expr(item.expr, names, string_hint=True)
        if action.func is not None:  # a @func action (§9.7)
            signature = self.references.check_func(action.func, builtin_ok=True)
            if signature is not None:
                keywords = [
                    (item.name.lstrip("@"), item.span)
                    for item in action.inputs
                    if item.name not in undeclared
                ]
                self.references.check_arguments(
                    signature,
                    action.func,
                    keywords,
                    complete=not undeclared,
                    span=action.func.span,
                )
        return {item.name for item in action.inputs}

    def check_implicit_inputs(self, action: Action, names: Set[str]) -> None:
        """§9.7: without ``in:``, each parameter without default takes the same-named variable."""
        assert action.func is not None
        signature = self.references.check_func(action.func, builtin_ok=True)
        if signature is None:
            return
        for param in signature.required:
            if param not in names:
                self.report.error(
                    f"parameter '{param}' of '{action.func.alias}.{action.func.func}' has no "
                    f"default and no variable '{param}' is declared",
                    action.func.span,
                    self.references.module_local_hint(param)
                    or f"declare '{param}' in vars: or pass it with in: {param} = …",
                )

    def check_text(self, text: Text | None, names: Set[str], in_names: Set[str]) -> None:
        """``{placeholders}`` (§9.4): declared names, or ``in:`` names when ``in:`` is given."""
        if text is None:
            return
        for placeholder in text.placeholders:
            ref = placeholder.ref
            known = (
                ref.name in names
                or ref.name in self.references.actors
                or ref.name in self.references.broken
            )
            if not in_names and not known and not ref.name.startswith("@"):
                hint = self.references.actor_hint(ref.name, names) or suggest(
                    ref.name, {n for n in names if not n.startswith("@")}
                )
                if (
                    self.references.module_local_hint(ref.name) is not None
                    or self.references.caller_hint(ref.name) is not None
                ):
                    hint = None  # where it is declared or bound says more than a look-alike
                literal = f"write {{{{{placeholder.path}}}}} for literal braces"
                self.report.undefined(
                    f"undeclared variable '{ref.name}'",
                    ref.span,
                    f"{hint} Or {literal}"
                    if hint
                    else f"{self.references.declare_hint(ref.name)}; or {literal}",
                )
            elif not in_names:
                self.references.check_path(ref, names)
            elif ref.name not in in_names:
                self.check_literal_brace(placeholder, names, in_names)

    def check_literal_brace(
        self, placeholder: Placeholder, names: Set[str], in_names: Set[str]
    ) -> None:
        """With ``in:``, a brace the list does not name stays literal (§9.4): say so when it
        names a variable or an actor, or looks like a misspelt ``in:`` name (``{my_tsak}``);
        other braces are text, like the ``{name}`` of a JSON template."""
        name = placeholder.ref.name
        if name in names or name in self.references.actors:
            hint = "with in:, only the names it lists are substituted (§9.4)"
        elif (close := suggest(name, in_names)) is not None:
            hint = close
        else:
            return
        self.report.warning(
            f"'{{{placeholder.path}}}' stays literal text: '{name}' is not listed in in:",
            placeholder.span,
            hint,
        )

    def check_resolve(self, action: Action, names: Set[str], in_names: Set[str]) -> None:
        resolve = action.resolve
        if resolve is None:
            return
        signature = self.references.check_func(resolve.func, builtin_ok=False)
        if resolve.args is None:
            return
        allowed = names | in_names | RESOLVE_INPUTS
        for arg in resolve.args:
            if arg not in allowed:
                self.references.check_name(arg, resolve.span, allowed)
        if signature is not None:  # an ``@x`` argument is passed as ``x`` (§10.5)
            keywords = [(arg.lstrip("@"), resolve.span) for arg in resolve.args]
            self.references.check_arguments(
                signature, resolve.func, keywords, complete=False, span=resolve.span
            )

    def check_methods_used(self, action: Action, namespace: Namespace) -> None:
        for kind, name in (("memory", action.memory), ("context", action.context)):
            if name is None:
                continue
            method = namespace.find_method(name)
            span = dict(action.field_spans).get(kind, action.span)
            if method is None and name in self.references.broken:
                continue
            if method is None:
                candidates = {
                    n for lv in namespace.chain() for n, m in lv.methods.items() if m.kind == kind
                }
                listed = f"the {kind} methods are: {', '.join(sorted(candidates))}"
                hint = suggest(name, candidates) or (
                    listed if candidates else f"define it: {kind} {name}(alias.fn): (§8)"
                )
                self.report.error(f"unknown {kind} method '{name}'", span, hint)
            elif method.kind != kind:
                self.report.error(f"'{name}' is a {method.kind} method, not a {kind} method", span)

    def check_fallback(self, action: Action, namespace: Namespace, names: Set[str]) -> None:
        _CheckFallback(self.references).visit(action.fallback, action, namespace, names)

    def check_method(self, method: Method, names: Set[str]) -> None:
        """§8: a memory/context method's function, its ``in:`` and what it writes."""
        signature = self.references.check_func(method.func, builtin_ok=False)
        keywords: list[tuple[str, Span]] = []
        for item in method.inputs:
            if item.expr is not None:
                self.references.check_expr(item.expr, names)
            elif item.name not in METHOD_INPUTS:
                self.references.check_name(item.name, item.span, names)
            keyword = "actor_info" if item.name == "@actor" else item.name.lstrip("@")
            keywords.append((keyword, item.span))
        if signature is not None:
            self.references.check_arguments(
                signature, method.func, keywords, complete=True, span=method.span
            )
        for target in method.targets:
            self.references.check_target(target, names, out=True)


class _CheckFallback(BindingVisitor[None]):
    """``fallback:`` names an action or calls a module, bound like a flow node (§10.6)."""

    def __init__(self, references: References) -> None:
        self.references = references

    def visit_ModuleCall(
        self, call: ModuleCall, action: Action, namespace: Namespace, names: Set[str]
    ) -> None:
        self.references.check_module_call(call, namespace, names)

    def visit_ActionName(
        self, name: str, action: Action, namespace: Namespace, names: Set[str]
    ) -> None:
        if name in self.references.broken:
            return
        span = dict(action.field_spans).get("fallback", action.span)
        if namespace.find_action(name) is None:
            hint = suggest(name, namespace.visible("actions"))
            self.references.report.error(f"undefined fallback action '{name}'", span, hint)
        elif name == action.name:
            self.references.report.error(f"action '{action.name}' cannot be its own fallback", span)
