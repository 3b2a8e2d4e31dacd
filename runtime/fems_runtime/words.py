"""The words of the FEM language that the compiler and the runtime both go by, each said once.

The compiler imports this module (the runtime never imports the compiler), as it does
:mod:`fems_runtime.names`; ``tests/test_kinds.py`` holds each table against its users, so a copy
that comes back or drifts fails a test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

#: §12.9: the nodes a flow ends at: the main flow's ``END``, a module's ``OUT`` and ``BREAK``.
TERMINAL_NODES = frozenset({"END", "OUT", "BREAK"})
#: §12.1: the node names only the main flow uses, and those only a module's flow uses.
MAIN_ONLY_NODES = frozenset({"START", "END"})
MODULE_ONLY_NODES = frozenset({"IN", "OUT", "BREAK"})
#: §12.1: names an author cannot give a node of their own.
RESERVED_NODE_NAMES = MAIN_ONLY_NODES | MODULE_ONLY_NODES

#: §11.6: how deep module calls may nest in one another, a module calling itself or not.
MAX_MODULE_DEPTH = 64

#: §7.2: how many actor variables an alias chain may pass through to reach an actor.
MAX_ALIAS_HOPS = 10

#: §10.4: the types of a typed out, in the order messages list them.
OUT_TYPES = ("int", "float", "bool", "string", "actor", "enum", "dropdown")

#: §6.1: the types of actor (``ai @Alice``, ``human @Bob``).
ACTOR_TYPES = ("ai", "human")
#: §7.3: attributes every actor has; any other attribute is a dict declared in ``vars:``.
FIXED_ACTOR_ATTRIBUTES = frozenset({"type", "soul", "source", "tools", "name"})

#: §3: a session, as ``--session`` and meta ``session`` write it: ``new``, a number N ≥ 1, or
#: ``N / new`` (N, created if it does not exist); the groups are ``number`` and ``or_new``.
SESSION_SPEC = re.compile(
    r"\s*(?:new|0*(?P<number>[1-9]\d*)(?P<or_new>\s*/\s*new)?)\s*", re.IGNORECASE
)

#: §13.2: the speaker name narration is stored and shown under (``[narrator]: text``).
NARRATOR = "narrator"

TranscriptShow = Literal[
    "hidden", "folded", "narration", "feedback", "tool_call", "tool_result", "dialog"
]
"""How ``--transcript`` prints a message: ``hidden`` not at all, ``folded`` as one line saying
how long it was, ``dialog`` under its speaker's header; the others each in a line of their own."""


@dataclass(frozen=True)
class MessageKind:
    """One kind of stored message (§13.1).

    ``in_context``: whether it is in the built-in context of those its scope names (a prompt,
    a rejected attempt and its feedback, and a model's private reasoning are in nobody's, not
    even their own actor's later turns).
    ``label``: how a context names its speaker, a :meth:`str.format` template with ``who`` (the
    speaker's name, else its soul, else ``unknown``) and ``name`` (the stored speaker name).
    """

    name: str
    in_context: bool
    label: str
    transcript: TranscriptShow


MESSAGE_KINDS: dict[str, MessageKind] = {
    kind.name: kind
    for kind in (
        MessageKind("prompt", False, "{who}", "hidden"),
        MessageKind("narration", True, NARRATOR, "narration"),
        MessageKind("reply", True, "{who}", "dialog"),
        MessageKind("human", True, "{who}", "dialog"),
        MessageKind("feedback", False, "feedback", "feedback"),
        MessageKind("tool_call", True, "{who} → tool", "tool_call"),
        MessageKind("tool_result", True, "tool {name}", "tool_result"),
        MessageKind("reasoning", False, "{who}", "folded"),
    )
}
#: The kinds a built-in context is made of, in the table's order.
VISIBLE_KINDS = tuple(name for name, kind in MESSAGE_KINDS.items() if kind.in_context)

__all__ = [
    "ACTOR_TYPES",
    "FIXED_ACTOR_ATTRIBUTES",
    "MAIN_ONLY_NODES",
    "MESSAGE_KINDS",
    "MAX_ALIAS_HOPS",
    "MAX_MODULE_DEPTH",
    "MODULE_ONLY_NODES",
    "NARRATOR",
    "OUT_TYPES",
    "RESERVED_NODE_NAMES",
    "SESSION_SPEC",
    "TERMINAL_NODES",
    "VISIBLE_KINDS",
    "MessageKind",
    "TranscriptShow",
]
