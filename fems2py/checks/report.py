"""The diagnostics of one check of a script, as the checks find them (:class:`Report`).

Every check reports through one :class:`Report`, so that an unknown name is reported once, at
its first use, with the lines of its other uses in the hint (one mistake, one diagnostic).
"""

from __future__ import annotations

import dataclasses

from fems2py.checks.usage import holder
from fems2py.diagnostics import Diagnostic
from fems2py.nodes import ActionBlock, Span


class Report:
    """Collects a script's diagnostics; :meth:`diagnostics` gives them in source order."""

    def __init__(self) -> None:
        self.items: list[Diagnostic] = []
        #: The uses of each unknown name after the first reported, with their hints.
        self.later_uses: dict[tuple[str, ActionBlock | None], list[tuple[Span, str | None]]] = {}
        #: Actions no flow uses (§12.11), once known: the uses of an unknown name inside one
        #: are reported apart from the others, as they become warnings.
        self.unused_actions: tuple[ActionBlock, ...] = ()

    def __len__(self) -> int:
        """How many diagnostics were reported so far."""
        return len(self.items)

    def error(self, message: str, span: Span, hint: str | None = None) -> None:
        self.items.append(Diagnostic("error", message, span, hint))

    def warning(self, message: str, span: Span, hint: str | None = None) -> None:
        self.items.append(Diagnostic("warning", message, span, hint))

    def undefined(self, message: str, span: Span, hint: str | None) -> None:
        """An unknown name is reported at its first use only; the other uses are listed in
        that report's hint (one mistake, one diagnostic). Uses inside an unused action are
        reported apart: they become warnings, the others must stay errors."""
        key = self._key(message, span)
        later = self.later_uses.get(key)
        if later is None:
            self.later_uses[key] = []
            self.error(message, span, hint)
        else:
            later.append((span, hint))

    def _key(self, message: str, span: Span) -> tuple[str, ActionBlock | None]:
        return message, holder(self.unused_actions, Diagnostic("error", message, span))

    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """Every diagnostic once, in source order; an unknown name's at its first use, with that
        use's hint (which may say where it runs without the name, §11.3)."""
        items = []
        for item in self.items:
            later = self.later_uses.get(self._key(item.message, item.span))
            if later and item.severity == "error":
                uses = sorted([(item.span, item.hint), *later], key=lambda u: _position(u[0]))
                (first, hint), *others = uses  # the hint of the use shown: it may say where it runs
                lines = sorted({span.line for span, _ in others} - {first.line})
                if lines:
                    also = f"also used at line{'s' if len(lines) > 1 else ''} "
                    also += ", ".join(map(str, lines))
                    hint = f"{hint}; {also}" if hint else also
                item = dataclasses.replace(item, span=first, hint=hint)
            items.append(item)
        unique = list(dict.fromkeys(items))
        return tuple(sorted(unique, key=lambda d: (d.span.line, d.span.col)))


def _position(span: Span) -> tuple[int, int]:
    return span.line, span.col
