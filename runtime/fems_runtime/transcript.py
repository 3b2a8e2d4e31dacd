"""A readable transcript of a run, printed as messages are stored (``--transcript``): a
subscriber of the run's events (:mod:`fems_runtime.events`).

Each line says who spoke and in which room: ``@Alice ▸ den (@Moderator, @Alice, @Fay)``.
Narration is set apart in italics, feedback from the validation loop is dimmed and marked as
private, tool calls (§15.5) show with a one-line preview of their results, problems the lenient
default ignores are flagged, prompts are never shown (they are private to the executor, §13.1),
and a model's reasoning shows only as a folded line saying how long it was.
``rich`` is imported only when a transcript is printed, so importing the runtime stays cheap.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Mapping
from typing import IO, Any, ClassVar

from fems_runtime.events import (
    FallbackTaken,
    MessagesStored,
    ModelCallBegan,
    ModelCallEnded,
    ProblemReported,
    ReplyChunk,
    ReplyRejected,
    RunEvent,
)
from fems_runtime.replies import Piece
from fems_runtime.values import counted
from fems_runtime.words import MESSAGE_KINDS, TranscriptShow

_SPEAKER_STYLES = ("cyan", "green", "magenta", "yellow", "blue", "bright_red", "bright_cyan")


class Transcript:
    """Prints stored messages of one run; ``everyone`` names the room that is shown as "all"."""

    def __init__(self, everyone: Collection[str], stream: IO[str] | None = None) -> None:
        from rich.console import Console

        self._console = Console(file=stream or sys.stdout, highlight=False, soft_wrap=True)
        self._everyone = frozenset(everyone)
        self._styles: dict[str, str] = {}
        self.last_live: LiveReply | None = None  # the streamed reply printed last, if any
        self._streaming: dict[int, LiveReply] = {}  # by model call
        self._shown_calls: set[int] = set()  # calls whose reply was printed as it arrived

    def __call__(self, event: RunEvent) -> None:
        """The run's subscriber: stored messages and problems as they happen, a streamed
        reply as it arrives (§15.4), its stored messages then not again."""
        match event:
            case MessagesStored():
                for message in event.messages:
                    if message.rejected and message.call not in self._shown_calls:
                        self.rejected(message.speaker, message.content)
                    elif message.call is None or message.call not in self._shown_calls:
                        self.message(message.kind, message.speaker, message.room, message.content)
                self._shown_calls.difference_update(m.call for m in event.messages)
            case ProblemReported():
                where = event.where
                self.problem(where.action or "", where.actor or "", event.problem)
            case ReplyRejected(final=True):  # the retries' feedback was shown: this is the last
                where = event.where
                problems = "; ".join(event.problems)
                self.problem(where.action or "", where.actor or "", f"{problems} (no retry left)")
            case FallbackTaken():
                where = event.where
                self.problem(where.action or "", where.actor or "", "its fallback runs")
            case ModelCallBegan(streamed=True):
                self._streaming[event.id] = self.live(event.where.actor or "", event.scope)
            case ReplyChunk():
                live = self._streaming.get(event.parent or 0)
                if live is not None:
                    live.feed(Piece(event.kind), event.chunk)
            case ModelCallEnded():
                self._finished(event)

    def _finished(self, call: ModelCallEnded) -> None:
        """A streamed call is over: its last line is printed, unless it only calls tools."""
        live = self._streaming.pop(call.id, None)
        if live is None or call.outcome != "ok":
            return
        if call.interrupted or not call.tool_calls or call.reply:
            live.finish(call.reply)
            self._shown_calls.add(call.id)

    def message(self, kind: str, speaker: str, room: Collection[str], text: str) -> None:
        """Print one stored message, as its kind's row says; ``room`` is the scope it was
        stored for."""
        show = MESSAGE_KINDS[kind].transcript
        if show == "hidden":
            return
        self.last_live = None
        self._SHOWS[show](self, speaker, room, text)

    def _folded(self, speaker: str, room: Collection[str], text: str) -> None:
        """Private to the model (§13.1): how long it was, never its text."""
        from rich.text import Text

        self._console.print(Text(f"  … {speaker} reasoned ({len(text)} characters)", style="dim"))

    def _narration(self, speaker: str, room: Collection[str], text: str) -> None:
        from rich.text import Text

        where = self._room_label(room)
        self._console.print(Text.assemble((f"  ~ {text}", "italic"), (f"  [{where}]", "dim")))

    def _feedback(self, speaker: str, room: Collection[str], text: str) -> None:
        from rich.text import Text

        self._console.print(Text(f"  (feedback to {speaker}, private) {text}", style="dim"))

    def rejected(self, speaker: str, text: str) -> None:
        """A strict turn's reply its checks rejected: kept for the record, private (§13.3)."""
        from rich.text import Text

        self.last_live = None
        self._console.print(Text(f"  (rejected reply of {speaker}, private) {text}", style="dim"))

    def _tool_call(self, speaker: str, room: Collection[str], text: str) -> None:
        from rich.text import Text

        self._console.print(Text.assemble((f"  ⚙ {speaker} calls ", "dim"), (text, "cyan")))

    def _tool_result(self, speaker: str, room: Collection[str], text: str) -> None:
        from rich.text import Text

        self._console.print(Text(f"    ↳ {speaker}: {_preview(text)}", style="dim"))

    def _dialog(self, speaker: str, room: Collection[str], text: str) -> None:
        self.header(speaker, self._room_label(room))
        for line in text.splitlines() or [""]:
            self.line(line)

    #: How each kind of message is printed (its row's ``transcript``), ``hidden`` aside.
    _SHOWS: ClassVar[dict[TranscriptShow, Callable[..., None]]] = {
        "folded": _folded,
        "narration": _narration,
        "feedback": _feedback,
        "tool_call": _tool_call,
        "tool_result": _tool_result,
        "dialog": _dialog,
    }

    def live(self, speaker: str, room: Collection[str]) -> LiveReply:
        """A reply to print as it arrives (§15.4), by ``speaker`` in ``room``."""
        return LiveReply(self, speaker, self._room_label(room))

    def header(self, speaker: str, where: str, *, live: LiveReply | None = None) -> None:
        """``@speaker ▸ room``, the line above a reply's text."""
        from rich.text import Text

        self.last_live = live
        header = Text(speaker, style=f"bold {self._style(speaker)}")
        header.append(f" ▸ {where}", style="dim")
        self._console.print(header)

    def line(self, line: str) -> None:
        """One line of a reply, indented; signal lines dimmed."""
        from rich.text import Text

        self._console.print(Text(f"    {line}", style="dim" if _is_signal(line) else ""))

    def note(self, text: str) -> None:
        """A dimmed line beside the dialog (a reply being reasoned about, a broken stream)."""
        from rich.text import Text

        self.last_live = None
        self._console.print(Text(f"  {text}", style="dim"))

    def problem(self, action: str, actor: str, text: str) -> None:
        """A reply problem the lenient default reports and ignores, or the last one of a
        strict turn and its fallback (§10.6)."""
        from rich.text import Text

        self.last_live = None
        self._console.print(Text(f"  ! {action} by {actor}: {text}", style="yellow"))

    def summary(
        self,
        headline: str,
        steps: int,
        model_calls: int,
        shown: Mapping[str, Any],
        *,
        failed: bool = False,
    ) -> None:
        """The closing block: how the run ended, how much it took, the variables asked for."""
        from rich.text import Text

        self._console.rule("summary")
        line = Text(headline, style="bold red" if failed else "bold green")
        line.append(f" · {counted(steps, 'step')} · {counted(model_calls, 'model call')}")
        self._console.print(line)
        for name, value in shown.items():
            self._console.print(Text.assemble((f"{name} = ", "dim"), (str(value), "bold")))

    def _room_label(self, room: Collection[str]) -> str:
        """``all``, ``all but @x`` when at most two actors are missing, else the members."""
        members = set(room)
        missing = sorted(self._everyone - members)
        if self._everyone and not missing:
            return "all"
        if len(members) > 2 and len(missing) <= 2:
            return "all but " + ", ".join(missing)
        return ", ".join(sorted(members))

    def _style(self, speaker: str) -> str:
        if speaker not in self._styles:
            self._styles[speaker] = _SPEAKER_STYLES[len(self._styles) % len(_SPEAKER_STYLES)]
        return self._styles[speaker]


class LiveReply:
    """A streamed reply printed as it arrives (§15.4): each line once it is complete, in the
    format of a stored reply, under its speaker's header (repeated when another reply's lines
    came in between). Its reasoning shows as one folded line, never as the reply's text."""

    def __init__(self, transcript: Transcript, speaker: str, where: str) -> None:
        self._transcript = transcript
        self._speaker = speaker
        self._where = where
        self._held = ""  # the line still being written
        self._received = ""
        self._reasoning = False

    def feed(self, kind: Piece, chunk: str) -> None:
        """The stream's listener: one piece of the reply, of its reasoning, or a discard."""
        if kind == Piece.REASONING:
            if not self._reasoning:
                self._reasoning = True
                self._transcript.note(f"… {self._speaker} is reasoning")
            return
        if kind == Piece.DISCARD:  # the stream broke off: the call is made again
            self._held = self._received = ""
            self._transcript.note(f"(the reply of {self._speaker} broke off; asked again)")
            return
        self._received += chunk
        *lines, self._held = (self._held + chunk).split("\n")
        for line in lines:
            self._line(line)

    def finish(self, final: str) -> None:
        """The reply as stored: what it adds to the text received (an interrupt's marker) is
        printed, then the last line."""
        if final.startswith(self._received):
            self.feed(Piece.TEXT, final[len(self._received) :])
        if self._held or self._transcript.last_live is not self:
            self._line(self._held)
        self._held = ""

    def _line(self, line: str) -> None:
        if self._transcript.last_live is not self:
            self._transcript.header(self._speaker, self._where, live=self)
        self._transcript.line(line)


def _preview(text: str, limit: int = 160) -> str:
    """A tool result on one line: its start, and how long it is when it is cut."""
    flat = " ⏎ ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return flat if len(flat) <= limit else f"{flat[:limit]}… ({len(text)} characters)"


def _is_signal(line: str) -> bool:
    upper = line.upper()
    return "SET VARIABLE" in upper or "设定变量" in line or "设置变量" in line
