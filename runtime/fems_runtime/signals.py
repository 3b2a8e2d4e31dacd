"""Signals: how a model's reply sets variables (§10.1–§10.5).

``SET VARIABLE: <<name = value>>`` (and its Chinese and bracket variants, with Markdown emphasis
or inline code around the prefix) are found anywhere in a reply. Each body is parsed as
``target op value``; the value is data, read with the literal grammar and never evaluated
(§10.3), except that a bare actor name without its ``@`` names that actor where only an actor
fits. The out whitelist and typed outs decide what is accepted (§10.4); everything rejected
goes, as raw text, into ``SET_VARIABLE`` (§10.5), and a rejected reply's assignments can be
rolled back.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fems_runtime.authored import off_loop
from fems_runtime.out_types import (
    OUT_TYPE_ROWS,
    SignalError,
    choice_list,
    convert_value,
    out_type,
)
from fems_runtime.records import RunError
from fems_runtime.values import (
    ACTOR_NAME,
    QUOTES,
    Actor,
    LiteralError,
    check_text,
    excerpt,
    format_value,
    parse_literal,
    valid_text,
)

if TYPE_CHECKING:
    from fems_runtime.variables import Frame, Undo

# Markdown emphasis and inline code around the prefix are ignored (§10.1): **SET VARIABLE:**,
# __SET VARIABLE__:, `SET VARIABLE:` <<…>>; the marks are in the character classes that take
# spaces, so a long run of them is scanned once
_PREFIX = re.compile(r"(?:SET[\s_]*VARIABLE|设定变量|设置变量)[\s*_`]*[:：]", re.IGNORECASE)
_OPENER = re.compile(r"[ \t*_`]*(?:<<|《《|《|〈)")
_CLOSER = re.compile(r">>|》》?|〉")
_QUOTE_CHARS = "".join(QUOTES)
# a quote at the start of a body, or after a character where a value can start (= ( [ { , :),
# opens a quoted value; elsewhere (``it's``) it is just a character
_LEADING_QUOTE = re.compile(rf"\s*([{_QUOTE_CHARS}])")
_CLOSE_OR_QUOTE = re.compile(rf"({_CLOSER.pattern})|[=(\[{{,:，：]\s*([{_QUOTE_CHARS}])")
# the rest of a quoted value up to its closing quote (a backslash escapes the next character)
_QUOTE_REST = {
    opener: re.compile(rf"(?:[^\\{close}]++|\\.)*+{close}", re.DOTALL)
    for opener, close in QUOTES.items()
}
_TARGET = re.compile(r"(?P<a>@?\w+)(?:\.(?P<b>@?\w+))?(?:\s*\[(?P<k>[^\[\]]*)\])?", re.UNICODE)
# a target has at most one [key] and one quoted key: past this many quotes and brackets
# before the operator, the body cannot be a signal
_TARGET_MARKS = 8
_OP_MARK = re.compile(rf"[=\[\]{_QUOTE_CHARS}]")
LARGE_REPLY = 64 * 1024  # replies longer than this are read in a worker thread
_WORD = re.compile(r"\w+")
_CALL = re.compile(r"(?P<fn>add|remove)\s*[(（](?P<arg>.*)[)）]", re.DOTALL)  # （ ） too (§1.4)


@dataclass(frozen=True)
class OutSpec:
    """One ``out:`` item (§9.2, §10.4), shared by signals, human turns and funcs.

    ``target`` is the variable (or dict) name. ``key`` is None for a whole variable, else the
    entry: ``"@x"`` (``dict.@x``, ``@x.attr``, ``dict[@x]``) names an actor or an actor-typed
    variable whose binding *when the value is applied* is the entry; any other key is the
    entry's key itself (``"alice"`` for ``scores.alice``, ``3`` for ``d[3]``).
    ``key_from`` names the variable of a ``dict[i]`` out (a loop variable or a declared one):
    the entry is ``dict[<value of i>]``, read again in the frame when a signal or answer is
    applied; ``key`` then holds its value when the spec was built (what ``@func`` outs use),
    which must name an entry (None or a list is a run error as the action starts).
    ``type`` names a row of :data:`~fems_runtime.out_types.OUT_TYPE_ROWS` (None: untyped);
    ``choices`` holds the already-evaluated values of ``enum``/``dropdown``. ``caption`` is the
    author's label (``name(type, "标签")``, ``label="投票"``) shown to a person (§10.8).
    An unnormalized ``target`` such as ``"votes.@voter"``, ``"@x.hp"`` or ``"d[3]"`` is split
    into target and key (a bracketed key is read as a literal: ``3`` is an int).
    """

    target: str
    key: Any = None
    type: str | None = None
    choices: tuple[Any, ...] = ()
    optional: bool = False
    caption: str | None = None
    key_from: str | None = None

    @classmethod
    def of(cls, out: OutSpec | str) -> OutSpec:
        """An out as generated code writes it: a spec, or a plain out's name."""
        return out if isinstance(out, OutSpec) else cls(out)

    def __post_init__(self) -> None:
        if (
            self.key is None
            and self.key_from is None
            and ("." in self.target or "[" in self.target)
        ):
            name, key = split_target(self.target)
            object.__setattr__(self, "target", name)
            object.__setattr__(self, "key", _key_value(key))
        if self.type is not None and self.type not in OUT_TYPE_ROWS:
            known = tuple(OUT_TYPE_ROWS)
            raise ValueError(f"unknown out type {self.type!r}; expected one of {known}")
        if self.key_from is not None:
            # the value when the action starts: None or a list names no entry, and an @func
            # out with key None would overwrite the whole dict
            problem = _key_problem(self.key_from, self.key)
            if problem is not None:
                raise RunError(f"out {self.label}: {problem}")

    @property
    def label(self) -> str:
        """How the out's target is written: ``name``, ``dict.@x``, ``dict[i]`` or ``dict[key]``
        (answers files and ``@func`` dict returns use it as the out's name)."""
        if self.key_from is not None:
            return f"{self.target}[{self.key_from}]"
        if self.key is None:
            return self.target
        if _is_actor_name(self.key):
            return f"{self.target}.{self.key}"
        return f"{self.target}[{format_value(self.key)}]"

    def entry(self, frame: Frame) -> Any:
        """The dict key this out writes, in ``frame``'s current bindings (§10.4); raise
        :class:`SignalError` when it has none (an unbound ``@x``, a key variable that is None)."""
        try:
            return self._entry(frame)
        except RunError as error:
            raise SignalError(f"'{self.label}': {error.message}") from None

    def _entry(self, frame: Frame) -> Any:
        if self.key_from is not None:
            key = frame.get(self.key_from)
            problem = _key_problem(self.key_from, key)
            if problem is not None:
                raise SignalError(f"'{self.label}': {problem}")
            return frame.entry_key(key)
        return frame.entry_key(self.key)

    def shown(self, frame: Frame | None) -> str:
        """The target with its key resolved (``wolf_pick.@you``, ``d[2]``), for people;
        :attr:`label` when there is no frame or the key cannot be resolved."""
        if frame is None or (self.key is None and self.key_from is None):
            return self.label
        try:
            key = self.entry(frame)
        except (SignalError, RunError):
            return self.label
        if _is_actor_name(key):
            return f"{self.target}.{key}"
        return f"{self.target}[{format_value(key)}]"


@dataclass(frozen=True)
class RawSignal:
    """One signal found in a reply: its whole text, its body (None if malformed) and position."""

    text: str
    body: str | None
    start: int
    end: int


@dataclass(frozen=True)
class Signal:
    """A parsed body: ``target`` (with ``key`` for entries), ``op`` and the value's text."""

    target: str
    key: str | None
    op: str
    value_text: str


def split_target(text: str) -> tuple[str, str | None]:
    """``name`` → (name, None); ``dict.@x``/``attr.@x``/``@x.attr`` → (dict, "@x");
    ``dict.key`` → (dict, "key"); ``dict[key]`` → (dict, key text)."""
    match = _TARGET.fullmatch(text.strip())
    if match is None or (match["b"] is not None and match["k"] is not None):
        raise SignalError(
            f"'{excerpt(text.strip())}' is not a variable, dict entry or actor attribute"
        )
    a, b, k = match["a"], match["b"], match["k"]
    if k is not None:
        if not k.strip():
            raise SignalError(f"'{excerpt(text.strip())}' has an empty key")
        return a, k.strip()
    if b is None:
        return a, None
    if a.startswith("@") and not b.startswith("@"):
        return b, a  # @x.attr
    return a, b  # dict.@x, attr.@x, dict.key


def extract_signals(reply: str) -> list[RawSignal]:
    """Every signal in ``reply``, in order. A prefix without a closed bracket pair is returned
    with ``body=None`` and the rest of its line as ``text`` (it goes to ``SET_VARIABLE``).

    Every prefix starts a signal, even inside another signal's quoted value, so a body never
    reaches past the next prefix: each stretch of the reply is read once, and the time is
    linear in its length whatever it holds (§10.3).
    """
    found: list[RawSignal] = []
    prefixes = [(match.start(), match.end()) for match in _PREFIX.finditer(reply)]
    for index, (start, after) in enumerate(prefixes):
        limit = prefixes[index + 1][0] if index + 1 < len(prefixes) else len(reply)
        opener = _OPENER.match(reply, after, limit)
        close = _find_close(reply, opener.end(), limit) if opener else None
        if opener is None or close is None:
            line_end = reply.find("\n", after, limit)
            end = limit if line_end < 0 else line_end
            found.append(RawSignal(reply[start:end].strip(), None, start, end))
            continue
        body_end, end = close
        body = reply[opener.end() : body_end]
        found.append(RawSignal(reply[start:end], body.strip(), start, end))
    return found


def _find_close(text: str, start: int, limit: int) -> tuple[int, int] | None:
    """The first closing bracket in ``text[start:limit]`` outside quoted values: (body end,
    signal end), or None.

    A quote only opens a value where one can start (at the start, after ``= ( [ { , :``), so
    apostrophes in bare text (``it's``) are just characters; a quote that does not close
    before ``limit`` is a character too, and the first closing bracket at all ends the body.
    Each step is one regex search, so a stretch is scanned once.
    """
    leading = _LEADING_QUOTE.match(text, start, limit)
    quote = leading.start(1) if leading is not None else None
    position = start
    while True:
        if quote is None:
            found = _CLOSE_OR_QUOTE.search(text, position, limit)
            if found is None:
                return None
            if found.group(1) is not None:
                return found.start(), found.end()
            quote = found.start(2)
        rest = _QUOTE_REST[text[quote]].match(text, quote + 1, limit)
        if rest is None:
            found = _CLOSER.search(text, start, limit)
            return (found.start(), found.end()) if found is not None else None
        position, quote = rest.end(), None


def parse_signal(body: str) -> Signal:
    """Parse ``target op value`` (§10.2); ops ``=``, ``+=``, ``-=``, ``= add(v)``, ``= remove(v)``."""
    i = _first_op(body)
    if i is None:
        raise SignalError("expected 'name = value', 'name += value' or 'name -= value'")
    if body[i] in "+-":
        op, value = body[i] + "=", body[i + 2 :]
        target_text = body[:i]
    else:
        op, value = "=", body[i + 1 :]
        target_text = body[:i]
    target, key = split_target(target_text)
    value = value.strip()
    call = _CALL.fullmatch(value)
    if op == "=" and call is not None:
        op, value = call["fn"], call["arg"].strip()
    if not value and op != "=":
        raise SignalError(f"'{op}' needs a value")
    return Signal(target, key, op, value)


def _first_op(body: str) -> int | None:
    """Index of the assignment operator: the first ``=`` outside quotes and brackets
    (moved back one character for ``+=``/``-=``); None when there is none, or when more
    quotes and brackets come before it than any target has (a bounded search)."""
    depth = 0
    i = 0
    for _ in range(_TARGET_MARKS):
        mark = _OP_MARK.search(body, i)
        if mark is None:
            return None
        i = mark.start()
        ch = body[i]
        if ch in QUOTES:
            end = body.find(QUOTES[ch], i + 1)
            if end < 0:
                return None
            i = end + 1
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif depth == 0:
            return i - 1 if i > 0 and body[i - 1] in "+-" else i
        i += 1
    return None


@dataclass(frozen=True)
class Applied:
    """An accepted signal: what it set and how to undo it."""

    raw: str
    target: str
    key: Any
    op: str
    value: Any
    out: OutSpec | None
    undo: Undo = field(repr=False, compare=False)


@dataclass(frozen=True)
class Rejected:
    """A signal that failed to parse or was not allowed, with the reason."""

    raw: str
    reason: str


@dataclass
class SignalOutcome:
    """What applying a reply's signals did; :meth:`rollback` undoes every accepted one."""

    applied: list[Applied] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    outs: tuple[OutSpec, ...] | None = None

    @property
    def SET_VARIABLE(self) -> list[str]:  # noqa: N802 - the name the spec gives the list
        """The raw text of every rejected signal, in reply order (§10.5)."""
        return [r.raw for r in self.rejected]

    @property
    def unset(self) -> list[OutSpec]:
        """Non-optional outs no accepted signal set (a failed validation when strict, §10.6)."""
        if not self.outs:
            return []
        set_outs = {id(a.out) for a in self.applied}  # by identity: choices may hold lists
        return [o for o in self.outs if not o.optional and id(o) not in set_outs]

    def rollback(self) -> None:
        """Undo the accepted assignments, newest first."""
        for item in reversed(self.applied):
            item.undo()
        self.applied.clear()


def match_out(
    target: str, key: str | None, frame: Frame, outs: Sequence[OutSpec] | None
) -> OutSpec | None:
    """Check a target against the whitelist (§10.4) and return the matching out (None when
    the action has no ``out:``); raise :class:`SignalError` when it is not allowed."""
    if not frame.declared(target):
        where = _written(target, key)
        raise SignalError(f"'{where}' is not a declared variable")
    if outs is None:
        return None
    for out in outs:
        keyed = out.key is not None or out.key_from is not None
        if out.target != target or keyed != (key is not None):
            continue
        if key is None or _same_entry(out, key, frame):
            return out
    allowed = ", ".join(o.label for o in outs) or "nothing"
    shown = _written(target, key)
    raise SignalError(f"'{shown}' may not be set by this action (out: {allowed})")


def _same_entry(out: OutSpec, key: str, frame: Frame) -> bool:
    """Whether a signal's key text names ``out``'s entry: written like the out (``d[i]``,
    ``votes.@voter``), or naming the same key (``d[2]`` while ``i`` is 2, ``votes.@Eve`` while
    ``@voter`` is ``@Eve``; ``d["2"]`` and ``d[2]`` alike, as a model cannot know the type)."""
    if key == out.key_from or (out.key_from is None and key == out.key):
        return True
    try:
        wanted = out.entry(frame)
        given = frame.entry_key(_key_value(key))
    except (RunError, SignalError):
        return False
    return wanted == given or format_value(wanted) == format_value(given)


def _key_problem(name: str, key: Any) -> str | None:
    """Why the value of key variable ``name`` cannot name a dict entry, or None."""
    if key is None:
        return f"{name} has no value to use as a key"
    try:
        hash(key)
    except TypeError:
        return f"{name} is {format_value(key)}, which cannot be a dict key"
    return None


def _written(target: str, key: str | None) -> str:
    """A signal's target as written: ``x``, ``votes.@Eve``, ``d[2]``."""
    if key is None:
        return target
    return f"{target}.{key}" if _is_actor_name(key) or key.isidentifier() else f"{target}[{key}]"


def _key_value(text: str | None) -> Any:
    """The key a signal's key text names: ``@x`` as written, a literal otherwise (§10.3)."""
    if text is None or ACTOR_NAME.fullmatch(text):
        return text
    return parse_literal(text, None, make_actor=str)


def _is_actor_name(key: Any) -> bool:
    return isinstance(key, str) and ACTOR_NAME.fullmatch(key) is not None


def _entry(out: OutSpec | None, key: str | None, frame: Frame) -> Any:
    """Where a signal writes: the matching out's entry (its key, in the current bindings),
    else the signal's own key read as data (an action without ``out:``)."""
    if key is None:
        return None
    if out is not None and (out.key is not None or out.key_from is not None):
        return out.entry(frame)
    return _key_value(key)


def assign_out(
    frame: Frame, target: str, key: Any, op: str, value: Any, out: OutSpec | None
) -> Undo:
    """Convert ``value`` for ``out`` and apply ``target[key] op value``; return the undo.

    ``key`` is the entry's key (None: the whole variable); an ``"@x"`` key resolves to its
    current binding. An actor variable (``@v``) holds a defined actor or ``""`` (§4.3): only
    ``=`` sets it; a ``string`` out's text that names one is that actor (real scripts declare
    ``@KILL(string, "目标")``).
    """
    if key is None and op != "=" and target.startswith("@"):
        raise SignalError(f"{target} holds an actor: only '=' sets it (<<{target} = @name>>)")
    converted = convert_value(out, value, frame)
    actor_variable = key is None and op == "=" and target.startswith("@")
    if actor_variable and isinstance(converted, str) and frame.variables.is_actor(converted):
        converted = frame.variables.actor(converted)
    if (
        actor_variable
        and converted not in ("", None)
        and not (isinstance(converted, Actor) and frame.variables.is_actor(converted))
    ):
        raise SignalError(
            f"{target} holds an actor: write @name, not '{excerpt(format_value(converted))}'"
        )
    try:
        if key is None:
            return frame.assign(target, op, converted)
        return frame.assign(target, op, converted, key)
    except RunError as error:
        raise SignalError(error.message) from None


@dataclass(frozen=True)
class ReadSignal:
    """A signal read from a reply without looking at any variable: its raw text (lone surrogates
    replaced), the parsed body and value, or the ``problem`` that rejects it."""

    raw: str
    signal: Signal | None
    value: Any = None
    problem: str | None = None


def read_signals(reply: str, actors: Container[str]) -> list[ReadSignal]:
    """Find every signal in ``reply`` and parse its body and value (§10.1–§10.3): the part of
    :func:`apply_signals` that reads no variable, linear in the reply's length, safe to run in
    a worker thread. ``actors`` are the defined actor names (``@name`` values must be one)."""
    found: list[ReadSignal] = []
    for raw in extract_signals(reply):
        text = valid_text(raw.text)
        if raw.body is None:
            found.append(ReadSignal(text, None, problem="no <<…>> after SET VARIABLE:"))
            continue
        try:
            signal = parse_signal(check_text(raw.body))
        except (SignalError, LiteralError) as error:
            found.append(ReadSignal(text, None, problem=str(error)))
            continue
        try:
            value = parse_literal(signal.value_text, actors, make_actor=str)
        except LiteralError as error:
            found.append(ReadSignal(text, signal, problem=str(error)))
            continue
        found.append(ReadSignal(text, signal, value))
    return found


def apply_signals(
    reply: str,
    frame: Frame,
    outs: Sequence[OutSpec] | None,
    read: Sequence[ReadSignal] | None = None,
) -> SignalOutcome:
    """Find, check and apply every signal in ``reply``, in order (§10).

    ``outs`` None means the action has no ``out:`` (any declared variable may be set). ``read``
    is :func:`read_signals` of the reply when it was already done (in a worker thread).
    """
    outcome = SignalOutcome(outs=tuple(outs) if outs is not None else None)
    if read is None:
        read = read_signals(reply, frame.variables.actors)
    bare_names = _BareActorNames(frame.variables.actors)
    for item in read:
        signal = item.signal
        if signal is None:
            outcome.rejected.append(Rejected(item.raw, item.problem or ""))
            continue
        try:
            out = match_out(signal.target, signal.key, frame, outs)
            key = _entry(out, signal.key, frame)
            if item.problem is not None:
                raise SignalError(item.problem)
            value = item.value
            if _bare_word(signal, value) and _holds_actor(out, signal.target, key, frame):
                value = bare_names.actor(value) or value
            undo = assign_out(frame, signal.target, key, signal.op, value, out)
        except (SignalError, LiteralError) as error:
            outcome.rejected.append(Rejected(item.raw, str(error)))
            continue
        except RunError as error:
            outcome.rejected.append(Rejected(item.raw, error.message))
            continue
        shown = signal.key if out is None or out.key_from is None else key
        outcome.applied.append(Applied(item.raw, signal.target, shown, signal.op, value, out, undo))
    return outcome


class _BareActorNames:
    """The defined actors by their names without ``@``, for the one leniency of §10.3: the
    exact name first, else a case-insensitive match when exactly one actor has it (the folded
    table is built on first need, once per reply)."""

    def __init__(self, actors: Mapping[str, object]) -> None:
        self._actors = actors
        self._folded: dict[str, list[str]] | None = None

    def actor(self, word: str) -> str | None:
        """``"@Bob"`` for ``Bob`` (or ``bob`` when no other actor folds to it), else None."""
        if f"@{word}" in self._actors:
            return f"@{word}"
        if self._folded is None:
            self._folded = {}
            for name in self._actors:
                self._folded.setdefault(name[1:].casefold(), []).append(name)
        matches = self._folded.get(word.casefold(), [])
        return matches[0] if len(matches) == 1 else None


def _bare_word(signal: Signal, value: Any) -> bool:
    """Whether a signal's value is one unquoted word (``Bob``), which an actor-valued out may
    read as an actor's name (§10.3); a quoted ``"Bob"`` stays a string."""
    return (
        signal.op == "="
        and isinstance(value, str)
        and signal.value_text[:1] not in QUOTES
        and _WORD.fullmatch(value) is not None
    )


def _holds_actor(out: OutSpec | None, target: str, key: Any, frame: Frame) -> bool:
    """Whether a signal's target takes actors (§10.3): an ``actor`` out, an actor variable
    (``@ballot``), a ``dropdown``/``enum`` whose choices are actors, or an entry keyed by an
    actor (``votes.@x``) that is untyped or a string and holds no number or container yet
    (``hp.@x`` stays a number), as the mock reads it (§15.3)."""
    row = out_type(out.type) if out is not None else None
    if row is not None and row.actor:
        return True
    if out is not None and row is not None and row.menu:
        variables = frame.variables
        return any(variables.is_actor(choice) for choice in choice_list(out))
    if key is None:
        return target.startswith("@")
    if (row is not None and not row.actor_entry) or not _is_actor_name(key):
        return False
    try:
        current = frame.get(target)
        entry = current.get(frame.entry_key(key)) if isinstance(current, Mapping) else None
    except RunError:
        return False
    return entry is None or isinstance(entry, str)


async def aapply_signals(reply: str, frame: Frame, outs: Sequence[OutSpec] | None) -> SignalOutcome:
    """:func:`apply_signals` on a running event loop: a long reply is read in a worker thread
    so that the other branches go on meanwhile (§10.3); its values are then applied on the
    loop, all at once, as for a short one."""
    read = None
    if len(reply) > LARGE_REPLY:
        read = await asyncio.to_thread(read_signals, reply, frame.variables.actors)
    return apply_signals(reply, frame, outs, read)


def apply_values(
    values: Mapping[str, Any], frame: Frame, outs: Sequence[OutSpec] | None
) -> SignalOutcome:
    """Apply already-structured values (a human's answers, §10.8) as ``=`` assignments.

    Keys are out labels (``vote``, ``votes.@voter``) or plain targets; values are data
    (``"@x"`` strings name actors). The same whitelist and typed-out rules as signals apply.
    """
    outcome = SignalOutcome(outs=tuple(outs) if outs is not None else None)
    for name, value in values.items():
        raw = f"{name} = {format_value(value)}"
        try:
            target, key = split_target(name)
            out = match_out(target, key, frame, outs)
            entry = _entry(out, key, frame)
            undo = assign_out(frame, target, entry, "=", value, out)
        except SignalError as error:
            outcome.rejected.append(Rejected(raw, str(error)))
            continue
        shown = key if out is None or out.key_from is None else entry
        outcome.applied.append(Applied(raw, target, shown, "=", value, out, undo))
    return outcome


@dataclass(frozen=True)
class ResolveResult:
    """What ``resolve`` said (§10.5): ``ok`` is False when any triple failed; ``feedback`` holds
    the texts to show the model (``show_to_ai`` true), ``messages`` every text."""

    ok: bool
    feedback: list[str]
    messages: list[str]


async def run_resolve(
    func: Callable[..., Any],
    args: Sequence[str] | None,
    frame: Frame,
    *,
    prompt: str,
    llm_output: str,
    set_variable: Sequence[str],
    inputs: Mapping[str, Any] | None = None,
    name: str = "resolve",
) -> ResolveResult:
    """Call a ``resolve:`` function off the event loop and read its triples (§10.5).

    With ``args`` each name is passed by keyword: ``SET_VARIABLE``, ``prompt``, ``llm_output``,
    an ``in:`` name, or a variable (``@x`` names pass as ``x``). Without ``args`` it gets
    ``prompt``, ``llm_output``, ``SET_VARIABLE`` (if non-empty, or if the function requires it) and
    the ``in:`` values, limited to the parameters it accepts.
    """
    inputs = dict(inputs or {})
    special = {"prompt": prompt, "llm_output": llm_output, "SET_VARIABLE": list(set_variable)}
    if args is not None:
        kwargs = {}
        for arg in args:
            if arg in special:
                kwargs[arg] = special[arg]
            elif arg in inputs:
                kwargs[arg.lstrip("@")] = inputs[arg]
            else:
                kwargs[arg.lstrip("@")] = frame.get(arg)
    else:
        kwargs = {"prompt": prompt, "llm_output": llm_output}
        if set_variable or _requires(func, "SET_VARIABLE"):
            kwargs["SET_VARIABLE"] = list(set_variable)
        kwargs.update({k.lstrip("@"): v for k, v in inputs.items()})
        kwargs = accepted_kwargs(func, kwargs)
    try:
        result = await off_loop(func, kwargs)
    except Exception as error:  # the author's code failed: report it as a run error
        raise RunError(f"{name} raised {type(error).__name__}: {error}") from error
    return read_triples(result, name)


def _requires(func: Callable[..., Any], name: str) -> bool:
    """Whether ``func`` has a parameter ``name`` without a default: leaving an empty
    ``SET_VARIABLE`` out would fail with a TypeError (§10.5)."""
    try:
        parameter = inspect.signature(func).parameters.get(name)
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty


def accepted_kwargs(func: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``kwargs`` ``func`` accepts (all of them if it takes ``**kwargs``)."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def read_triples(result: Any, name: str = "resolve") -> ResolveResult:
    """Check a resolve return: a list of ``(is_success, show_to_ai, feedback)`` (one triple alone
    is accepted too)."""
    if isinstance(result, tuple) and len(result) == 3 and isinstance(result[0], bool):
        result = [result]
    if not isinstance(result, list | tuple) or not all(
        isinstance(t, list | tuple) and len(t) == 3 for t in result
    ):
        raise RunError(
            f"{name} must return a list of (is_success, show_to_ai, feedback) triples, "
            f"not {result!r}"
        )
    ok = all(bool(t[0]) for t in result)
    messages = [str(t[2]) for t in result if t[2] not in (None, "")]
    feedback = [str(t[2]) for t in result if t[1] and t[2] not in (None, "")]
    return ResolveResult(ok, feedback, messages)
