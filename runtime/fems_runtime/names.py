"""How a generated module names things, so that it need not say a name twice (§16.2).

The compiler names each function after what it runs, and the runtime reads the ``.fems`` name
back from the function: one rule, kept here and imported by the compiler (the runtime never
imports the compiler).

* An action or module declared inside module ``M`` runs as function ``<M's function>_<name>``
  (``DevLoop_review``, ``DevLoop_CoderSandbox``); a top-level one is named as written. The
  ``.fems`` name is the function's name without the longest ``<module function>_`` it starts
  with (:func:`declared_name`). Where that gives another name (a name Python reserves, one
  taken twice, a top-level action named ``DevLoop_x`` beside module ``DevLoop``), the generated
  code says it: ``action="x"`` in the turn, the name first in ``@fr.module("x", …)``.
* A loop node or module call node without a label of its own is named after what it runs:
  ``par_coder`` for ``par @coder in …`` (:func:`loop_node`), ``&DevLoop`` for ``&DevLoop(…)``
  (:func:`call_node`); ``ctx.loop``/``ctx.call`` take another name as ``node=``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


def declared_name(function: str, module_functions: Collection[str]) -> str:
    """The ``.fems`` name of generated function ``function``: without the longest prefix
    ``F_`` where ``F`` is one of ``module_functions`` (the module flows' function names)."""
    cut = 0
    for index, char in enumerate(function):
        if char == "_" and index > 0 and function[:index] in module_functions:
            cut = index + 1
    return function[cut:] if cut < len(function) else function


def loop_node(kind: str, var: str) -> str:
    """The node id of an unlabelled ``for``/``par`` loop: ``par_coder`` for ``par @coder``."""
    return f"{kind}_{var.lstrip('@')}"


def call_node(module: str) -> str:
    """The node id of an unlabelled call of module ``module``: ``&DevLoop``."""
    return f"&{module}"


class DeclaredNames:
    """The ``.fems`` names of one generated module's functions (:func:`declared_name`), with
    its module flows found in the module's namespace (functions carrying ``fems_module``)."""

    def __init__(self, namespace: Mapping[str, object]) -> None:
        self.module_functions = frozenset(
            name
            for name, value in namespace.items()
            if callable(value) and getattr(value, "fems_module", None) is not None
        )
        self._names: dict[str, str] = {}

    def of(self, function: str) -> str:
        """The ``.fems`` name of the function named ``function``."""
        name = self._names.get(function)
        if name is None:
            name = self._names[function] = declared_name(function, self.module_functions)
        return name


__all__ = ["DeclaredNames", "call_node", "declared_name", "loop_node"]
