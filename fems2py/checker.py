"""The semantic checker: every build-time check the spec names, on a parsed :class:`Script`.

The parser reports what is wrong with the text; this stage reports what is wrong with the
meaning — undeclared names (§4.1), unknown actions, modules, methods and ``code:`` functions,
fields that do not fit the action kind (§9.2), the loop-variable rule (§9.5), module arity
(§11.2), flow structure (§12) — and computes what code generation needs: the merge node of
every fork (§12.5) and the signatures of the ``code:`` functions (§5).

:func:`check` runs the checks of :mod:`fems2py.checks` in the order their results are needed:
``meta:`` (``meta.py``), what the script defines (``definitions.py``: actors, ``code:`` files,
the namespace of each level), ``tools:`` (``tools.py``), where each action and module runs
(``flows.py``) and so which names each sees (§11.3, ``callers.py``), each action and method
(``actions.py``), then the flows (``flows.py``, with ``shared_state.py``). Every reference to
a name goes through one :class:`~fems2py.checks.references.References`, every diagnostic into
one :class:`~fems2py.checks.report.Report`. It never raises on a user mistake: everything
becomes a :class:`Diagnostic`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fems2py.checks.actions import ActionChecks
from fems2py.checks.callers import Callers, Key, action_key, module_key
from fems2py.checks.codefiles import FuncSignature
from fems2py.checks.definitions import (
    check_actors,
    check_variable_values,
    namespaces_of,
    read_code_files,
)
from fems2py.checks.flows import FlowInputs, Uses, check_flows, collect_uses, flows_of
from fems2py.checks.meta import check_meta
from fems2py.checks.references import References
from fems2py.checks.report import Report
from fems2py.checks.scope import Namespace, Use, all_modules
from fems2py.checks.tools import check_tools
from fems2py.checks.usage import excuse_unused, unused_actions, without_unused
from fems2py.diagnostics import Diagnostic
from fems2py.nodes import ActionBlock, Graph, Loop, Script, Span
from fems2py.visitor import walk

__all__ = ["CheckedScript", "check"]


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
    report = Report()
    check_meta(script.meta, None, report)
    check_actors(script, report)
    code = read_code_files(script, base_dir, root, report)
    graphs = [script.flow, *(module.flow for module in all_modules(script.modules))]
    loop_variables = {var for graph in graphs for var in _loop_variables(graph)}
    references = References(
        script, report, code.signatures, code.broken_aliases, frozenset(loop_variables)
    )
    check_tools(references, base_dir)
    top, namespaces = namespaces_of(script, report)
    every = [top, *namespaces.values()]
    flows = flows_of(script, top, namespaces)
    uses = collect_uses(flows, every)
    unused = report.unused_actions = unused_actions(script, top, namespaces)
    callers = references.callers = Callers.of(every, _uses_of(uses, namespaces))
    seen, seen_by_action = callers.names.namespace_names(), callers.names.action_names()
    actions = ActionChecks(references)
    for namespace in every:
        check_variable_values(namespace, references)
        names = seen.get(id(namespace), frozenset())
        for action in namespace.actions.values():
            with references.reading_in(action_key(action)):
                extra = seen_by_action.get(id(action), frozenset())
                actions.check_action(action, namespace, names | extra)
        for method in namespace.methods.values():
            actions.check_method(method, names)
    caller_loop_vars = callers.loop_vars.namespace_names()
    inputs = FlowInputs(script, flows, namespaces, seen, caller_loop_vars, references)
    merge_nodes = check_flows(inputs)
    return CheckedScript(
        script=without_unused(script, unused),
        diagnostics=tuple(excuse_unused(report.diagnostics(), unused)),
        unused_actions=unused,
        merge_nodes=merge_nodes,
        code_signatures=code.signatures,
        code_files=code.paths,
        string_keys=frozenset(references.string_keys),
    )


def _uses_of(uses: Uses, modules: Mapping[int, Namespace]) -> dict[Key, list[Use]]:
    """The uses of each module and action that is used, by :data:`~fems2py.checks.callers.Key`."""
    return {
        **{module_key(modules[key]): found for key, found in uses.modules.items() if found},
        **{("action", key): found for key, found in uses.actions.items() if found},
    }


def _loop_variables(graph: Graph | None) -> set[str]:
    """The variables every ``for``/``par`` of a flow binds, nested bodies included."""
    return {node.var for node in walk(graph) if isinstance(node, Loop)}
