"""One flow graph → the body of its Python function, as structured code where it can be.

A flow is a graph (§12); the generated function should read like the script. Two shapes:

* **Structured** (no concurrent branches): a chain is a sequence of ``await`` lines, a node
  whose out-edges provably exclude each other becomes ``if``/``elif`` with the "flow stuck"
  error as the final ``else``, and the code after it is the nodes' immediate post-dominator
  (the same node §12.5 merges forks at); an edge back to a label that dominates it is the
  ``continue`` of a ``while True:`` loop, the loop's one exit its ``break``. This is the
  dominator-tree structuring of Ramsey's "Beyond Relooper", cut down to what Python says
  without labelled jumps: a graph it cannot express that way raises :class:`_Unstructured`.
* **Dispatch** (a node may start several branches, or the graph resisted structuring): a
  ``while`` loop with one ``if node == …:`` per *entry* node of the flow (the start, fork
  targets and merge nodes, nodes reached from several places), since
  :meth:`fems_runtime.Context.fork` re-enters the function at a branch's first node. Each case
  is still structured: a chain, then ``if``\\ s, then ``continue``. Flat ``if``\\ s rather than
  ``match``/``case``: black's parser costs time in proportion to tokens × ``case`` labels seen
  (quadratic on a dispatch of thousands of nodes), and an ``elif`` chain that long is nested
  past what ``compile()`` accepts.

The emitter works on the parser's node names and asks its owner for each node's code
(:class:`NodeCode`). Statements come back as a tree of typed statements (:data:`Statement`:
:class:`Step`, :class:`Call`, the :class:`Jump`\\ s, :class:`Loop`, :class:`If`, …), and
every question about a body (does it fall off its end, does a path end the flow, see
:func:`ends_flow`) is answered from the statements' types, never from their text: a
condition or argument that reads like ``return None`` changes nothing. :func:`render`
turns the tree into lines once, at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from fems_runtime.words import TERMINAL_NODES

from fems2py.checks.graphs import dominators, immediate_post_dominators, reachable
from fems2py.exclusive import all_exclusive, exactly_one
from fems2py.nodes import Edge, FlowNode

# ------------------------------------------------------------------------------ statements


@dataclass(frozen=True)
class Comment:
    """A comment line, ``#`` included: a line marker or one of the author's comments."""

    text: str

    def line(self) -> str:
        return self.text


@dataclass(frozen=True)
class Line:
    """A simple statement after which the next one runs (``await ctx.loop(…)``,
    ``targets = […]``, ``node = "B"``)."""

    code: str

    def line(self) -> str:
        return self.code


@dataclass(frozen=True)
class Step:
    """``await ctx.step(NODE, ACTION)``: counts and records node ``NODE``'s step (§12.10), runs
    its action (a function's name, or none) and returns the node."""

    node: str
    action: str | None = None

    def line(self) -> str:
        args = repr(self.node) if self.action is None else f"{self.node!r}, {self.action}"
        return f"await ctx.step({args})"


@dataclass(frozen=True)
class Jump:
    """A simple statement after which the next one never runs."""


@dataclass(frozen=True)
class Return(Jump):
    """``return VALUE``: a terminal's :class:`Step` or name (the path ends the flow there), or
    a dispatch's ``node``; without a value ``return None`` (the path ends, the flow does not),
    or a bare ``return`` with ``bare`` (in a function that returns nothing). ``note``: a
    comment at the end of the line."""

    value: Step | str | None = None
    bare: bool = False
    note: str = ""

    def line(self) -> str:
        if self.bare:
            code = "return"
        elif isinstance(self.value, Step):
            code = f"return {self.value.line()}"
        else:
            code = f"return {self.value}"
        return f"{code}  # {self.note}" if self.note else code


@dataclass(frozen=True)
class Raise(Jump):
    """``raise ERROR``: the "flow stuck" error of a node, or a dispatch's unknown node."""

    error: str

    def line(self) -> str:
        return f"raise {self.error}"


@dataclass(frozen=True)
class Continue(Jump):
    """``continue``: round a ``while`` loop again."""

    def line(self) -> str:
        return "continue"


@dataclass(frozen=True)
class Break(Jump):
    """``break``: out of the ``while True:`` it is in."""

    def line(self) -> str:
        return "break"


@dataclass(frozen=True)
class Call:
    """A module call (``ctx.call(…)``) that ends the path when the module did not reach
    ``[OUT]`` (it ended at ``[BREAK]`` or nowhere, §11): ``if not await CALL: END``, where
    ``END`` is ``return None``, or ``return`` in a function that returns nothing."""

    code: str
    end: Return = Return()


@dataclass(frozen=True)
class Loop:
    """``while True:`` around ``body``: a loop back to a label; it ends only by a jump."""

    body: tuple[Statement, ...]
    header: ClassVar[str] = "while True:"


@dataclass(frozen=True)
class Dispatch:
    """The dispatch's loop: one ``if node == …:`` case per entry node (see the module docs)."""

    body: tuple[Statement, ...]
    header: ClassVar[str] = "while node is not None and node not in stop:"


@dataclass(frozen=True)
class Arm:
    """One ``if``/``elif`` arm: the comments above it, its condition's Python, its body."""

    before: tuple[Comment, ...]
    condition: str
    body: tuple[Statement, ...]


@dataclass(frozen=True)
class If:
    """``if``/``elif`` arms and an optional ``else``."""

    arms: tuple[Arm, ...]
    orelse: tuple[Statement, ...] | None = None


#: One statement of a flow function's body.
Statement = Comment | Line | Step | Return | Raise | Continue | Break | Call | Loop | Dispatch | If

#: The statements that are one line of code.
SimpleStatement = Comment | Line | Step | Return | Raise | Continue | Break

# ------------------------------------------------------------------------------ the emitter


@dataclass
class FlowGraph:
    """One function's graph: ``entry`` is ``[START]``/``[IN]`` or a loop body's head; in a loop
    body the terminals are plain nodes (an iteration ends where its branches end)."""

    nodes: Mapping[str, FlowNode]
    edges: Mapping[str, Sequence[Edge]]
    entry: str
    is_body: bool
    merges: Mapping[str, str | None] = field(default_factory=dict)

    def successors(self) -> dict[str, list[str]]:
        return {name: [edge.target for edge in edges] for name, edges in self.edges.items()}


@dataclass(frozen=True)
class NodeCode:
    """What the owner of the emitter says about each node."""

    # the statements that run node `name` (marker, comments, step, binding)
    body: Callable[[str], Sequence[Statement]]
    # the id of a node in the generated code (`"deal_2"`)
    node_id: Callable[[str], str]
    # a marker comment for a .fems line
    marker: Callable[[int], Comment]
    # the Python of an edge's condition
    condition: Callable[[Edge], str]
    # the fork call for a node with concurrent out-edges (dispatch only)
    fork: Callable[[str], str]
    # the statement raising the "flow stuck" error of a node (its data goes to a table)
    stuck: Callable[[str], Raise]
    # forget what a structuring attempt that failed asked for (comments placed, stuck nodes)
    restart: Callable[[], None]


class _Unstructured(Exception):
    """The graph needs a jump Python cannot write, or nests deeper than code a person would
    read (and Python would compile): the emitter falls back to a dispatch."""


#: How many branch arms and continuations may be open at once while a flow is structured.
#: Past it (a ladder of hundreds of forks that merge late) the flow becomes a dispatch,
#: which is flat, instead of ``if`` blocks nested past Python's own limits.
MAX_NESTING = 150


def emit(graph: FlowGraph, code: NodeCode) -> tuple[bool, list[Statement]]:
    """The function body: (True, structured statements) or (False, a dispatch loop)."""
    if not any(_is_fork(graph, name) for name in graph.edges):
        try:
            return True, _Structurer(graph, code).run()
        except _Unstructured:
            code.restart()
    return False, _Dispatcher(graph, code).run()


def _is_fork(graph: FlowGraph, name: str) -> bool:
    """Whether several of the node's out-edges may hold at once (§12.3)."""
    edges = graph.edges.get(name, ())
    if len(edges) < 2:
        return False
    if any(edge.condition is None for edge in edges):
        return True
    return not all_exclusive([edge.condition for edge in edges if edge.condition is not None])


def _opening(
    graph: FlowGraph, code: NodeCode, name: str
) -> tuple[list[Statement], Sequence[Edge], bool]:
    """A node's own lines and its out-edges; True when the path ends at the node (a terminal
    returns its name, a dead end or the end of an iteration returns None, §12.3, §12.9)."""
    statements: list[Statement] = list(code.body(name))
    edges = graph.edges.get(name, ())
    if not graph.is_body and name in TERMINAL_NODES:
        step = statements[-1] if statements else None
        if isinstance(step, Step):
            return [*statements[:-1], Return(step)], edges, True  # a step returns its node
        return [*statements, Return(repr(name))], edges, True
    if not edges:
        return [*statements, Return()], edges, True
    return statements, edges, False


# ------------------------------------------------------------------------------ structured


@dataclass(frozen=True)
class _Loop:
    """A loop being structured: the label it goes back to, its nodes, its exits."""

    header: str
    nodes: frozenset[str]
    exit: str | None  # the one exit the loop breaks to
    # exits whose code never comes back (every path from them ends the flow): written inline
    final_exits: frozenset[str] = frozenset()


class _Structurer:
    def __init__(self, graph: FlowGraph, code: NodeCode) -> None:
        self.graph = graph
        self.code = code
        successors = graph.successors()
        self.successors = successors
        self.reach = reachable([graph.entry], successors)
        self.dominates = _DominatorTree(dominators(graph.entry, successors)).dominates
        self.back_edges: set[tuple[str, str]] = set()
        for source in self.reach:
            for target in successors.get(source, ()):
                if self.dominates(target, source):
                    self.back_edges.add((source, target))
        self.headers = {target for _, target in self.back_edges}
        self._check_reducible()
        terminals = set() if graph.is_body else TERMINAL_NODES & self.reach
        self.post = immediate_post_dominators(sorted(self.reach), successors, terminals)
        self.emitted: set[str] = set()
        self.depth = 0

    def _check_reducible(self) -> None:
        """Without its back edges the graph must be acyclic (else a loop has two entries)."""
        forward = {
            name: [t for t in self.successors.get(name, ()) if (name, t) not in self.back_edges]
            for name in self.reach
        }
        state: dict[str, int] = {}
        for root in sorted(self.reach):
            stack = [(root, iter(forward[root]))]
            if root in state:
                continue
            state[root] = 1
            while stack:
                name, children = stack[-1]
                for child in children:
                    if state.get(child) == 1:
                        raise _Unstructured(child)
                    if child not in state:
                        state[child] = 1
                        stack.append((child, iter(forward.get(child, ()))))
                        break
                else:
                    state[name] = 2
                    stack.pop()

    def run(self) -> list[Statement]:
        return self.sequence(self.graph.entry, None, ())

    def loop_of(self, header: str) -> _Loop:
        sources = [s for s, t in self.back_edges if t == header]
        predecessors: dict[str, list[str]] = {}
        for name in self.reach:
            for target in self.successors.get(name, ()):
                predecessors.setdefault(target, []).append(name)
        body = reachable(sources, predecessors, avoid=[header]) | {header}
        exits = {
            target
            for name in body
            for target in self.successors.get(name, ())
            if target not in body
        }
        final = {target for target in exits if self.is_final(target, body)}
        rest = exits - final
        if len(rest) > 1:
            raise _Unstructured(header)
        return _Loop(header, frozenset(body), next(iter(rest), None), frozenset(final))

    def is_final(self, name: str, loop: set[str]) -> bool:
        """Whether the flow, once at ``name``, never comes back to ``loop`` or to any loop and
        reaches nothing that is reached other than through ``name``: its code can sit where
        the flow leaves for it, and ends the flow there."""
        entering = sum(
            target == name for source in self.reach for target in self.successors.get(source, ())
        )
        after = reachable([name], self.successors)
        return (
            entering == 1
            and not (after & loop or after & self.headers)
            and all(self.dominates(name, other) for other in after)
        )

    def _continues_plainly(self, name: str, stop: str | None, loops: tuple[_Loop, ...]) -> bool:
        """Whether :meth:`sequence` at ``name`` would do nothing but run :meth:`node` there:
        no stop, loop jump, loop header or flow-ending exit is reached."""
        if name == stop or (name in self.headers and all(lp.header != name for lp in loops)):
            return False
        if not loops:
            return True
        inner = loops[-1]
        return (
            name not in (inner.header, inner.exit)
            and name not in inner.final_exits
            and name in inner.nodes
            and not any(name in (loop.header, loop.exit) for loop in loops[:-1])
        )

    def sequence(self, name: str, stop: str | None, loops: tuple[_Loop, ...]) -> list[Statement]:
        """Code running the flow from ``name``: it falls through exactly when the flow reaches
        ``stop``; every other path ends in ``return``/``raise``/``continue``/``break``."""
        if name == stop:
            return []
        if self.depth >= MAX_NESTING:
            raise _Unstructured(name)
        self.depth += 1
        try:
            return self._sequence(name, stop, loops)
        finally:
            self.depth -= 1

    def _sequence(self, name: str, stop: str | None, loops: tuple[_Loop, ...]) -> list[Statement]:
        if loops:
            inner = loops[-1]
            if name == inner.header:
                return [Continue()]
            if name == inner.exit:
                return [Break()]
            if name in inner.final_exits:
                return self.sequence(name, None, ())  # ends the flow: no loop to jump in
            if any(name in (loop.header, loop.exit) for loop in loops[:-1]):
                raise _Unstructured(name)  # a jump out of two loops at once
            if name not in inner.nodes:
                raise _Unstructured(name)
        if name in self.headers and all(loop.header != name for loop in loops):
            loop = self.loop_of(name)
            body = _without_final_continue(self.node(name, None, (*loops, loop)))
            statements: list[Statement] = [Loop(tuple(body))]
            if loop.exit is not None:
                statements += self.sequence(loop.exit, stop, loops)
            return statements
        return self.node(name, stop, loops)

    def node(self, name: str, stop: str | None, loops: tuple[_Loop, ...]) -> list[Statement]:
        graph, code = self.graph, self.code
        statements: list[Statement] = []
        # A chain is walked in a loop, not by recursion, so a flow of 10,000 nodes in a row
        # builds like a short one (only branches and loops nest).
        while True:
            if name in self.emitted:
                raise _Unstructured(name)  # reached twice: a join no construct owns
            self.emitted.add(name)
            opening, edges, done = _opening(graph, code, name)
            statements += opening
            if done:
                return statements
            if len(edges) > 1 or edges[0].condition is not None:
                break
            if not self._continues_plainly(edges[0].target, stop, loops):
                return statements + self.sequence(edges[0].target, stop, loops)
            name = edges[0].target
        join = self.post.get(name)
        inside = join is not None and (not loops or join in loops[-1].nodes)
        if join == stop or not inside:
            arm_stop, after = stop, None
        else:
            arm_stop, after = join, join
        bodies = [self.sequence(edge.target, arm_stop, loops) for edge in edges]
        statements.append(_branch(graph, name, edges, bodies, code))
        if after is not None:
            statements += self.sequence(after, stop, loops)
        return statements


def _without_final_continue(body: Sequence[Statement]) -> list[Statement]:
    """A loop's body without the ``continue`` that ends it, or ends the ``else`` of the
    ``if`` that ends it: the end of the body goes round again anyway."""
    last = body[-1] if body else None
    if isinstance(last, Continue):
        return list(body[:-1])
    if isinstance(last, If) and last.orelse:
        return [*body[:-1], If(last.arms, tuple(_without_final_continue(last.orelse)))]
    return list(body)


def _branch(
    graph: FlowGraph,
    name: str,
    edges: Sequence[Edge],
    bodies: Sequence[list[Statement]],
    code: NodeCode,
) -> If:
    """Exclusive out-edges as ``if``/``elif``. When exactly one condition always holds, the
    last is the ``else``; otherwise, with none holding, a loop body's head skips the
    iteration (§12.7) and any other node is stuck (§12.3), the error pointing at its first
    condition."""
    arms = [
        Arm((code.marker(edge.span.line),), code.condition(edge), tuple(body))
        for edge, body in zip(edges, bodies, strict=True)
    ]
    conditions = [edge.condition for edge in edges if edge.condition is not None]
    if len(arms) > 1 and exactly_one(conditions):
        last = arms.pop()
        return If(tuple(arms), (*last.before, *last.body))
    if graph.is_body and name == graph.entry:
        return If(tuple(arms), (Return(),))
    return If(tuple(arms), (code.marker(edges[0].span.line), code.stuck(name)))


class _DominatorTree:
    """Answers "does ``a`` dominate ``b``" in constant time: each node's entry and exit
    times in one walk of the dominator tree, so that asking once per edge stays linear
    (walking up from ``b`` each time made a 10,000-node chain quadratic)."""

    def __init__(self, idom: Mapping[str, str]) -> None:
        children: dict[str, list[str]] = {}
        roots = []
        for node, parent in idom.items():
            if parent == node:
                roots.append(node)
            else:
                children.setdefault(parent, []).append(node)
        self._enter: dict[str, int] = {}
        self._leave: dict[str, int] = {}
        clock = 0
        for root in roots:
            stack: list[tuple[str, bool]] = [(root, False)]
            while stack:
                node, done = stack.pop()
                clock += 1
                if done:
                    self._leave[node] = clock
                    continue
                self._enter[node] = clock
                stack.append((node, True))
                stack.extend((child, False) for child in children.get(node, ()))

    def dominates(self, a: str, b: str) -> bool:
        if a not in self._enter or b not in self._enter:
            return a == b
        return self._enter[a] <= self._enter[b] and self._leave[b] <= self._leave[a]


# ------------------------------------------------------------------------------ dispatch


class _Dispatcher:
    def __init__(self, graph: FlowGraph, code: NodeCode) -> None:
        self.graph = graph
        self.code = code
        successors = graph.successors()
        self.reach = reachable([graph.entry], successors)
        predecessors: dict[str, list[str]] = {}
        for name in self.reach:
            for target in successors.get(name, ()):
                predecessors.setdefault(target, []).append(name)
        forks = {name for name in self.reach if _is_fork(graph, name)}
        merges = {graph.merges.get(name) for name in forks}
        self.entries = {
            name
            for name in self.reach
            if name == graph.entry
            or name in merges
            or len(predecessors.get(name, ())) != 1
            or predecessors[name][0] in forks
        }

    def run(self) -> list[Statement]:
        order = [name for name in self.graph.nodes if name in self.entries]
        if self.graph.entry not in order:
            order.insert(0, self.graph.entry)
        cases: list[Statement] = []
        for name in order:
            body = self.block(name)
            if falls_off(body):
                body.append(Continue())
            cases.append(If((Arm((), f"node == {self.code.node_id(name)!r}", tuple(body)),)))
        cases.append(Raise("ctx.unknown_node(node)"))
        return [Dispatch(tuple(cases)), Return("node")]

    def goto(self, name: str) -> list[Statement]:
        if name in self.entries:
            return [Line(f"node = {self.code.node_id(name)!r}")]
        return self.block(name)

    def block(self, name: str) -> list[Statement]:
        graph, code = self.graph, self.code
        statements, edges, done = _opening(graph, code, name)
        if done:
            return statements
        if len(edges) == 1 and edges[0].condition is None:
            return statements + self.goto(edges[0].target)
        if not _is_fork(graph, name):
            bodies = [self.goto(edge.target) for edge in edges]
            return [*statements, _branch(graph, name, edges, bodies, code)]
        fixed = [code.node_id(edge.target) for edge in edges if edge.condition is None]
        statements.append(Line(f"targets = {fixed!r}"))
        for edge in edges:
            if edge.condition is not None:
                append = Line(f"targets.append({code.node_id(edge.target)!r})")
                arm = Arm((code.marker(edge.span.line),), code.condition(edge), (append,))
                statements.append(If((arm,)))
        if not fixed:
            skip = graph.is_body and name == graph.entry
            otherwise: tuple[Statement, ...] = (
                (Return(),) if skip else (code.marker(edges[0].span.line), code.stuck(name))
            )
            statements.append(If((Arm((), "not targets", otherwise),)))
        statements.append(Line(f"node = await {code.fork(name)}"))
        return statements


# ------------------------------------------------------------------------------ rendering


def render(statements: Sequence[Statement], depth: int = 1) -> list[str]:
    """Source lines of ``statements``, indented ``depth`` levels (a function body is 1)."""
    pad = "    " * depth
    lines: list[str] = []
    for statement in statements:
        match statement:
            case Call(code, end):
                lines += [f"{pad}if not await {code}:", f"{pad}    {end.line()}"]
            case Loop(body) | Dispatch(body):
                lines.append(pad + statement.header)
                lines += render_body(body, depth + 1)
            case If():
                lines += _render_if(statement, depth)
            case _:
                lines.append(pad + statement.line())
    return lines


def _render_if(statement: If, depth: int) -> list[str]:
    """An ``if``'s lines: no ``else`` after arms that all jump (its body follows them), none
    that would hold nothing but comments."""
    pad = "    " * depth
    lines: list[str] = []
    for index, arm in enumerate(statement.arms):
        lines += [pad + comment.line() for comment in arm.before]
        lines.append(f"{pad}{'elif' if index else 'if'} {arm.condition}:")
        lines += render_body(arm.body, depth + 1)
    orelse = statement.orelse or ()
    if all(_jumps(arm.body) for arm in statement.arms):
        return lines + render(orelse, depth)
    if not _only_comments(orelse):
        lines.append(pad + "else:")
        lines += render(orelse, depth + 1)
    return lines


def _jumps(statements: Sequence[Statement]) -> bool:
    """Whether ``statements`` end in a jump (what follows them never runs after them)."""
    return bool(statements) and isinstance(statements[-1], Jump)


def render_body(statements: Sequence[Statement], depth: int = 1) -> list[str]:
    """Like :func:`render`, with a ``pass`` when nothing but comments would be left."""
    lines = render(statements, depth)
    if _only_comments(statements):
        lines.append("    " * depth + "pass")
    return lines


def _only_comments(statements: Sequence[Statement]) -> bool:
    """Whether ``statements`` hold no code (none at all, or only comments)."""
    return all(isinstance(statement, Comment) for statement in statements)


def ends_flow(statements: Sequence[Statement]) -> bool:
    """Whether some path of a structured body returns a terminal's name (``[END]``, ``[OUT]``,
    ``[BREAK]``, see :func:`_opening`): the other returns are ``return None``."""
    return any(
        isinstance(statement, Return) and statement.value is not None
        for statement in _simple_statements(statements, into_loops=True)
    )


def returning_nothing(statements: Sequence[Statement], tail: bool = True) -> list[Statement]:
    """A structured body for a function that returns None (no path reaches a terminal, see
    :func:`ends_flow`): a ``return None`` that ends it (also at the end of an arm of an ``if``
    that ends it) is left out, any other is a bare ``return``, and a module call that ends it
    is just awaited; an ``else`` left with nothing but comments is dropped. ``tail``: whether
    ``statements`` end the function."""
    items = list(statements)
    if tail and items and items[-1] == Return():
        items.pop()  # the function returns None there anyway
    result: list[Statement] = []
    for index, statement in enumerate(items):
        last = tail and index == len(items) - 1
        match statement:
            case Return(value=None, bare=False, note=""):
                result.append(Return(bare=True))
            case Call(code):
                result.append(Line(f"await {code}") if last else Call(code, Return(bare=True)))
            case Loop(body):  # a `while True:` goes round again: nothing ends in it
                result.append(Loop(tuple(returning_nothing(body, False))))
            case If(arms, orelse):
                arms = tuple(
                    Arm(arm.before, arm.condition, tuple(returning_nothing(arm.body, last)))
                    for arm in arms
                )
                if orelse is not None:
                    orelse = tuple(returning_nothing(orelse, last))
                    if last and _only_comments(orelse):
                        orelse = None
                result.append(If(arms, orelse))
            case _:
                result.append(statement)
    return result


def falls_off(statements: Sequence[Statement]) -> bool:
    """Whether running ``statements`` can reach their end (a ``while True:`` ends only
    through a ``break`` of its own; ``return``, ``raise``, ``continue``, ``break`` never)."""
    if not statements:
        return True
    match statements[-1]:
        case Jump():
            return False
        case Loop(body):
            return _breaks(body)
        case If(arms, orelse):
            return orelse is None or falls_off(orelse) or any(falls_off(a.body) for a in arms)
        case _:
            return True


def _breaks(statements: Sequence[Statement]) -> bool:
    """Whether a ``break`` in ``statements`` leaves the loop they are the body of."""
    return any(
        isinstance(statement, Break)
        for statement in _simple_statements(statements, into_loops=False)
    )


def _simple_statements(
    statements: Sequence[Statement], into_loops: bool
) -> Iterator[SimpleStatement]:
    """The simple statements of ``statements``, those in the arms of their ``if``\\ s too,
    and with ``into_loops`` those in their ``while`` loops (whose ``break`` is their own)."""
    for statement in statements:
        match statement:
            case If(arms, orelse):
                for arm in arms:
                    yield from _simple_statements(arm.body, into_loops)
                yield from _simple_statements(orelse or (), into_loops)
            case Loop(body) | Dispatch(body):
                if into_loops:
                    yield from _simple_statements(body, into_loops)
            case Call():
                pass  # its own end is no path of the body's
            case _:
                yield statement
