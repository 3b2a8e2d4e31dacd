"""A readable transcript of a run, printed as messages are stored (``--transcript``).

Each line says who spoke and in which room: ``@Alice ▸ den (@Moderator, @Alice, @Fay)``.
Narration is set apart in italics, feedback from the validation loop is dimmed and marked as
private, tool calls (§15.5) show with a one-line preview of their results, problems the lenient
default ignores are flagged, prompts are never shown (they are private to the executor, §13.1),
and a model's reasoning shows only as a folded line saying how long it was.
``rich`` is imported only when a transcript is printed, so importing the runtime stays cheap.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping
from typing import IO, Any

_SPEAKER_STYLES = ("cyan", "green", "magenta", "yellow", "blue", "bright_red", "bright_cyan")


class Transcript:
    """Prints stored messages of one run; ``everyone`` names the room that is shown as "all"."""

    def __init__(self, everyone: Collection[str], stream: IO[str] | None = None) -> None:
        from rich.console import Console

        self._console = Console(file=stream or sys.stdout, highlight=False, soft_wrap=True)
        self._everyone = frozenset(everyone)
        self._styles: dict[str, str] = {}

    def message(self, kind: str, speaker: str, room: Collection[str], text: str) -> None:
        """Print one stored message; ``room`` is the scope it was stored for."""
        from rich.text import Text

        if kind == "prompt":
            return
        if kind == "reasoning":  # private to the model (§13.1): folded, never the reply's text
            self._console.print(
                Text(f"  … {speaker} reasoned ({len(text)} characters)", style="dim")
            )
            return
        where = self._room_label(room)
        if kind == "narration":
            self._console.print(Text.assemble((f"  ~ {text}", "italic"), (f"  [{where}]", "dim")))
            return
        if kind == "feedback":
            self._console.print(Text(f"  (feedback to {speaker}, private) {text}", style="dim"))
            return
        if kind == "tool_call":
            self._console.print(Text.assemble((f"  ⚙ {speaker} calls ", "dim"), (text, "cyan")))
            return
        if kind == "tool_result":
            self._console.print(Text(f"    ↳ {speaker}: {_preview(text)}", style="dim"))
            return
        header = Text(speaker, style=f"bold {self._style(speaker)}")
        header.append(f" ▸ {where}", style="dim")
        self._console.print(header)
        for line in text.splitlines() or [""]:
            style = "dim" if _is_signal(line) else ""
            self._console.print(Text(f"    {line}", style=style))

    def problem(self, action: str, actor: str, text: str) -> None:
        """A reply problem the lenient default reports and ignores (§10.6)."""
        from rich.text import Text

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
        line.append(f" · {steps} steps · {model_calls} model calls")
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


def _preview(text: str, limit: int = 160) -> str:
    """A tool result on one line: its start, and how long it is when it is cut."""
    flat = " ⏎ ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return flat if len(flat) <= limit else f"{flat[:limit]}… ({len(text)} characters)"


def _is_signal(line: str) -> bool:
    upper = line.upper()
    return "SET VARIABLE" in upper or "设定变量" in line or "设置变量" in line
