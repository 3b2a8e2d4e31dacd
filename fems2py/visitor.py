"""One way to walk the syntax tree of :mod:`fems2py.nodes`: Jinja2's ``visit_<ClassName>``.

A stage that does something per kind of node subclasses :class:`NodeVisitor` and writes one
method per class it cares about, instead of a chain of ``isinstance`` tests::

    class Describe(NodeVisitor[str]):
        def visit_ModuleCall(self, call: ModuleCall) -> str:
            return "&" + call.module

        def visit_Loop(self, loop: Loop) -> str:
            return f"{loop.kind} {loop.var}"

    Describe().visit(node.binding)

:meth:`NodeVisitor.visit` calls the method named after the node's class; a class without one
goes to :meth:`NodeVisitor.generic_visit`, which visits every child node (the dataclass
fields, tuples of nodes included) and returns None. Extra arguments of ``visit`` are passed
on to the method, so a visitor needs no state for what the caller already knows.

A flow node's binding (:data:`~fems2py.nodes.Binding`) is an action name, a module call, a
loop, a join or nothing; the two that are no node class are visited as ``visit_ActionName``
(the ``str``) and ``visit_PassThrough`` (``None``), so one visitor covers every binding.

The tree's depth is bounded by the parser (:data:`~fems2py.nodes.MAX_DEPTH`), so visiting
recursively is safe.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from fems2py.nodes import Span

_Result = TypeVar("_Result")

#: The visit method of what is no node class: a binding's action name and an empty binding.
_SPECIAL_NAMES = {str: "ActionName", type(None): "PassThrough"}


class NodeVisitor(Generic[_Result]):
    """Dispatches on the class of a node to ``visit_<ClassName>`` (see the module docs)."""

    def visit(self, node: Any, *args: Any, **kwargs: Any) -> _Result | None:
        """What the ``visit_<ClassName>`` method for ``node`` returns (or generic_visit's)."""
        method = _method_name(type(self), type(node))
        if method is None:
            return self.generic_visit(node, *args, **kwargs)
        visit: Callable[..., _Result | None] = getattr(self, method)
        return visit(node, *args, **kwargs)

    @classmethod
    def handles(cls, node_type: type) -> bool:
        """Whether this visitor has its own method for nodes of ``node_type``."""
        return _method_name(cls, node_type) is not None

    def generic_visit(self, node: Any, *args: Any, **kwargs: Any) -> _Result | None:
        """Visits every child node of ``node`` in field order; returns None."""
        for child in children(node):
            self.visit(child, *args, **kwargs)
        return None


class BindingVisitor(NodeVisitor[_Result]):
    """A visitor of one flow node's binding (or of an action's ``fallback:``, which is bound
    the same way): a binding without a method gives None, and its children, such as a loop's
    body, are not visited; they belong to other nodes."""

    def generic_visit(self, node: Any, *args: Any, **kwargs: Any) -> _Result | None:
        return None


_method_names: dict[tuple[type, type], str | None] = {}


def _method_name(visitor: type, node: type) -> str | None:
    """The name of ``visitor``'s method for nodes of class ``node``, None when it has none
    (remembered per pair of classes)."""
    key = (visitor, node)
    if key not in _method_names:
        name = "visit_" + _SPECIAL_NAMES.get(node, node.__name__)
        _method_names[key] = name if callable(getattr(visitor, name, None)) else None
    return _method_names[key]


@functools.cache
def _node_fields(cls: type) -> tuple[str, ...] | None:
    """The fields of a node class that may hold child nodes (a span never does); None for a
    class whose instances are no nodes (plain values, spans, classes themselves)."""
    if not dataclasses.is_dataclass(cls) or issubclass(cls, Span):
        return None
    return tuple(
        item.name for item in dataclasses.fields(cls) if item.name not in ("span", "field_spans")
    )


def children(node: Any) -> Iterator[Any]:
    """The child nodes of ``node`` (a node or a tuple of nodes), in field order.

    Strings, numbers, spans and other plain values are no nodes; tuples (of nodes, of pairs of
    nodes as in a dict literal) are looked into.
    """
    if isinstance(node, tuple):
        values: Any = node
    else:
        fields = _node_fields(node.__class__)
        if fields is None:
            return
        values = (getattr(node, name) for name in fields)
    for value in values:
        if isinstance(value, tuple):
            yield from children(value)
        elif _node_fields(value.__class__) is not None:
            yield value


def walk(node: Any) -> Iterator[Any]:
    """``node`` and every node below it, parents before their children (like ``ast.walk``,
    but in source order and without recursion)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(children(current))))
