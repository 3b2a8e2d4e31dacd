"""Whether edge conditions provably exclude each other, so that at most one can hold (§12.3).

A node whose out-edge conditions exclude each other never starts concurrent branches, so its
edges can be generated as ``if``/``elif``. The proof is small and sound: each condition is a
formula of ``and``/``or``/``not`` over *atoms* (comparisons, names, calls); two atoms may
contradict (``x == 1`` / ``x == 2``, ``x in y`` / ``x not in y``, ``n > 0`` / ``n == 0``);
every truth assignment of the atoms that no contradiction forbids is tried, and the conditions
are exclusive when none makes two of them true. Atoms are otherwise treated as independent,
which can only miss an exclusion, never invent one. A condition that calls the author's code
(``ctx.code(…)``) is never called exclusive: ``if``/``elif`` would skip calls the fork
semantics makes.
"""

from __future__ import annotations

import ast
import functools
import itertools
import math
from collections.abc import Callable, Sequence

from fems2py.nodes import Expr

_MAX_ATOMS = 12  # 4,096 assignments; more than real conditions use

_COMPLEMENTS = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}


def all_exclusive(conditions: Sequence[Expr]) -> bool:
    """Whether no two of ``conditions`` can hold at once."""
    return _check(tuple(condition.python for condition in conditions), exhaustive=False)


def exactly_one(conditions: Sequence[Expr]) -> bool:
    """Whether exactly one of ``conditions`` holds, whatever the values: they exclude each
    other and between them cover every case (through exact complements: ``==``/``!=``,
    ``in``/``not in``, ``is``/``is not`` of the same operands, ``x``/``not x``). The last
    one can then be an ``else``."""
    return _check(tuple(condition.python for condition in conditions), exhaustive=True)


def forget_proofs() -> None:
    """Drop the proofs this process keeps (see :func:`_check`)."""
    _check.cache_clear()


@functools.lru_cache(maxsize=4096)
def _check(conditions: tuple[str, ...], *, exhaustive: bool) -> bool:
    """The proof, on the conditions' Python alone: kept per process, so a rebuild after an
    edit (an editor, a watch loop) proves again only the nodes whose conditions changed."""
    trees = []
    for condition in conditions:
        if "ctx.code(" in condition:
            return False
        try:
            trees.append(ast.parse(condition, mode="eval").body)
        except SyntaxError:
            return False
    atoms: dict[str, tuple[int, ast.expr]] = {}  # each atom's dump: its index, its first node
    indexes: dict[int, int] = {}  # id of each atom node of the trees: its atom's index
    for tree in trees:
        _collect(tree, atoms, indexes)
    if len(atoms) > _MAX_ATOMS:
        return False
    found = [node for _, node in atoms.values()]
    dump = functools.cache(ast.dump)  # the atoms' operands are compared pair by pair
    conflicts = [
        (i, j)
        for i, j in itertools.combinations(range(len(found)), 2)
        if _contradict(found[i], found[j], dump)
    ]
    complements = [
        (i, j)
        for i, j in itertools.combinations(range(len(found)), 2)
        if _complement(found[i], found[j], dump)
    ]
    for values in itertools.product((False, True), repeat=len(found)):
        if any(values[i] and values[j] for i, j in conflicts):
            continue
        if any(values[i] == values[j] for i, j in complements):
            continue
        holding = sum(_holds(tree, values, indexes) for tree in trees)
        if holding > 1 or (exhaustive and holding == 0):
            return False
    return True


def _collect(
    tree: ast.expr, atoms: dict[str, tuple[int, ast.expr]], indexes: dict[int, int]
) -> None:
    """The atoms of ``tree`` into ``atoms`` (one per distinct ``ast.dump``, numbered in order),
    and the index of each atom node's atom into ``indexes``."""
    if isinstance(tree, ast.BoolOp):
        for value in tree.values:
            _collect(value, atoms, indexes)
    elif isinstance(tree, ast.UnaryOp) and isinstance(tree.op, ast.Not):
        _collect(tree.operand, atoms, indexes)
    else:
        indexes[id(tree)] = atoms.setdefault(ast.dump(tree), (len(atoms), tree))[0]


def _holds(tree: ast.expr, values: tuple[bool, ...], indexes: dict[int, int]) -> bool:
    """Whether ``tree`` holds when its atoms have ``values`` (in the order of ``indexes``)."""
    if isinstance(tree, ast.BoolOp):
        results = (_holds(value, values, indexes) for value in tree.values)
        return all(results) if isinstance(tree.op, ast.And) else any(results)
    if isinstance(tree, ast.UnaryOp) and isinstance(tree.op, ast.Not):
        return not _holds(tree.operand, values, indexes)
    return values[indexes[id(tree)]]


_EXACT = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In}
_EXACT.update({ast.Is: ast.IsNot, ast.IsNot: ast.Is})


def _complement(a: ast.expr, b: ast.expr, dump: Callable[[ast.AST], str]) -> bool:
    """Whether atom ``b`` is exactly ``not a`` (``x == y`` / ``x != y`` …): one of them holds."""
    if not (isinstance(a, ast.Compare) and isinstance(b, ast.Compare)):
        return False
    if len(a.ops) != 1 or len(b.ops) != 1:
        return False
    same = dump(a.left) == dump(b.left)
    same = same and dump(a.comparators[0]) == dump(b.comparators[0])
    return same and _EXACT.get(type(a.ops[0])) is type(b.ops[0])


def _contradict(a: ast.expr, b: ast.expr, dump: Callable[[ast.AST], str]) -> bool:
    """Whether atoms ``a`` and ``b`` can never both be true."""
    if not (isinstance(a, ast.Compare) and isinstance(b, ast.Compare)):
        return False
    if len(a.ops) != 1 or len(b.ops) != 1 or dump(a.left) != dump(b.left):
        return False
    op_a, op_b = type(a.ops[0]), type(b.ops[0])
    right_a, right_b = a.comparators[0], b.comparators[0]
    if dump(right_a) == dump(right_b) and _COMPLEMENTS.get(op_a) is op_b:
        return True
    if not (isinstance(right_a, ast.Constant) and isinstance(right_b, ast.Constant)):
        return False
    if op_a is ast.Eq and op_b is ast.Eq:
        return bool(right_a.value != right_b.value)
    first, second = _interval(op_a, right_a.value), _interval(op_b, right_b.value)
    return first is not None and second is not None and _disjoint(first, second)


# An interval of numbers: (low, low included, high, high included).
_Interval = tuple[float, bool, float, bool]


def _interval(op: type[ast.cmpop], value: object) -> _Interval | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    bound = float(value)
    return {
        ast.Eq: (bound, True, bound, True),
        ast.Lt: (-math.inf, False, bound, False),
        ast.LtE: (-math.inf, False, bound, True),
        ast.Gt: (bound, False, math.inf, False),
        ast.GtE: (bound, True, math.inf, False),
    }.get(op)


def _disjoint(a: _Interval, b: _Interval) -> bool:
    (low_a, in_low_a, high_a, in_high_a), (low_b, in_low_b, high_b, in_high_b) = a, b
    if high_a < low_b or high_b < low_a:
        return True
    if high_a == low_b:
        return not (in_high_a and in_low_b)
    if high_b == low_a:
        return not (in_high_b and in_low_a)
    return False
