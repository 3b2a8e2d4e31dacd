"""The built-in tools (§15.5): ``read``, ``list``, ``glob``, ``grep``, ``write`` and ``edit``.

They are the tools of the coding hosts real scripts were written for, so ``tools: [read,
write, edit, glob, grep]`` works as it reads. Each is a method of :class:`Workspace`, described
to the model by its signature and docstring like any ``code:`` function, and confined to one
root folder (the script's folder or ``--root``): every path goes through
:func:`fems_runtime.paths.inside_root`, so ``../``, absolute paths and symlinks that lead out are
refused the same way, and the walks of ``glob`` and ``grep`` never follow a link out of the root.

Every result is bounded: a file, a listing or a search past its cap is cut with a note saying
so, and ``grep`` stops reading after :data:`GREP_READ_LIMIT` bytes, so a huge file costs the
run a bounded amount of time and memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from fems_runtime.paths import OutsideRoot, inside_root

READ_LIMIT = 50_000
"""Bytes of a file ``read`` returns; the rest is cut with a note saying so."""
LIST_LIMIT = 500
"""Entries of a folder ``list`` returns, and paths ``glob`` returns."""
GLOB_SCAN_LIMIT = 20_000
"""Paths ``glob`` looks at before it stops (a pattern over a huge tree)."""
GREP_MATCH_LIMIT = 200
"""Matching lines ``grep`` returns."""
GREP_LINE_LIMIT = 400
"""Characters of one matching line ``grep`` shows."""
GREP_READ_LIMIT = 50_000_000
"""Bytes ``grep`` reads in all before it stops, so a huge file cannot stall the run."""
WRITE_LIMIT = 1_000_000
"""Bytes ``write`` and ``edit`` may leave in a file."""
_BINARY_PROBE = 8192


class Workspace:
    """The built-in tools, confined to ``root``: every path is relative to it (§15.5)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    def tool(self, name: str) -> Callable[..., str]:
        """The built-in tool ``name`` bound to this root: named in a table, so that only the
        six tools, never a helper method, can be offered to a model."""
        tools: dict[str, Callable[..., str]] = {
            "read": self.read,
            "list": self.list,
            "glob": self.glob,
            "grep": self.grep,
            "write": self.write,
            "edit": self.edit,
        }
        return tools[name]

    def read(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """Read a text file inside the project folder and return its content.

        `path` is relative to the project folder. `start_line` and `end_line` (1-based,
        inclusive) return only those lines. More than 50000 bytes are cut, with a note
        saying so.
        """
        target = self._inside(path)
        if not target.is_file():
            raise FileNotFoundError(f"no file '{path}'")
        if start_line is None and end_line is None:
            with open(target, "rb") as fh:
                data = fh.read(READ_LIMIT + 1)
            cut = len(data) > READ_LIMIT
            text = _text(data[:READ_LIMIT], path, partial=cut)
            if cut:
                size = target.stat().st_size
                text += f"\n[cut: '{path}' has {size} bytes; the first {READ_LIMIT} are shown]"
            return text
        return self._read_lines(target, path, start_line or 1, end_line)

    def _read_lines(self, target: Path, path: str, first: int, last: int | None) -> str:
        if first < 1 or (last is not None and last < first):
            raise ValueError(
                "lines are numbered from 1 and end_line may not come before start_line"
            )
        taken: list[bytes] = []
        size = 0
        number = 0
        with open(target, "rb") as fh:
            for number, line in enumerate(fh, start=1):
                if last is not None and number > last:
                    break
                if number < first:
                    continue
                if b"\x00" in line:
                    raise ValueError(f"'{path}' is not a text file")
                if size + len(line) > READ_LIMIT:
                    shown = f"lines {first}-{number - 1}" if number > first else "no line"
                    text = _text(b"".join(taken), path, partial=False)
                    text += "" if text.endswith("\n") or not text else "\n"
                    return text + f"[cut: {shown} of '{path}' shown; at most {READ_LIMIT} bytes]"
                taken.append(line)
                size += len(line)
        if number < first:
            return f"'{path}' has {number} lines; there is no line {first}"
        return _text(b"".join(taken), path, partial=False)

    def list(self, path: str = ".") -> str:
        """List a folder inside the project folder (folders end with '/', links with '@').

        `path` is relative to the project folder; '.' is the project folder itself.
        """
        target = self._inside(path)
        if not target.is_dir():
            raise NotADirectoryError(f"no folder '{path}'")
        entries = sorted(target.iterdir(), key=lambda entry: entry.name)
        lines = []
        for entry in entries[:LIST_LIMIT]:
            if entry.is_symlink():  # never followed here: its target may lie outside
                lines.append(f"{entry.name}@ (link)")
            elif entry.is_dir():
                lines.append(f"{entry.name}/")
            else:
                size = entry.stat().st_size if entry.is_file() else 0
                lines.append(f"{entry.name} ({size} bytes)")
        if len(entries) > LIST_LIMIT:
            lines.append(f"[cut: {len(entries) - LIST_LIMIT} more entries not shown]")
        return "\n".join(lines) if lines else f"'{path}' is empty"

    def glob(self, pattern: str, path: str = ".") -> str:
        """List the paths inside the project folder that match a glob pattern, one a line.

        `pattern` is relative to `path` (default: the project folder), e.g. '*.md' or
        '**/*.py' ('**' matches any number of folders). Folders end with '/'. At most 500
        paths, in name order.
        """
        if not pattern or Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            raise ValueError("the pattern is relative and may not contain '..'")
        base = self._inside(path)
        if not base.is_dir():
            raise NotADirectoryError(f"no folder '{path}'")
        found: list[str] = []
        scanned = 0
        for match in base.glob(pattern):
            scanned += 1
            if scanned > GLOB_SCAN_LIMIT:
                break
            shown = self._shown(match)
            if shown is not None:
                found.append(shown + ("/" if match.is_dir() else ""))
        found.sort()
        lines = found[:LIST_LIMIT]
        if len(found) > LIST_LIMIT:
            lines.append(f"[cut: {len(found)} paths match; the first {LIST_LIMIT} are shown]")
        if scanned > GLOB_SCAN_LIMIT:
            lines.append(f"[cut: stopped after {GLOB_SCAN_LIMIT} paths; narrow the pattern]")
        return "\n".join(lines) if lines else f"no path matches '{pattern}'"

    def grep(
        self, pattern: str, path: str = ".", glob: str = "**/*", ignore_case: bool = False
    ) -> str:
        """Search text files inside the project folder for lines matching a regular expression.

        `pattern` is a Python regular expression; `path` a file or a folder (default: the
        project folder), searched through the files whose path matches `glob` (default: all).
        Each match is 'file:line: text'. At most 200 matches; binary files are skipped.
        """
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as error:
            raise ValueError(f"invalid regular expression: {error}") from None
        target = self._inside(path)
        if target.is_file():
            files: Iterator[Path] = iter([target])
        elif target.is_dir():
            if Path(glob).is_absolute() or ".." in Path(glob).parts:
                raise ValueError("the glob is relative and may not contain '..'")
            files = (file for file in sorted(target.glob(glob)) if file.is_file())
        else:
            raise FileNotFoundError(f"no file or folder '{path}'")
        search = _Search(regex)
        for file in files:
            shown = self._shown(file)
            if shown is not None and not search.file(file, shown):
                break
        return search.result(pattern)

    def write(self, path: str, content: str) -> str:
        """Write a text file inside the project folder, replacing it if it exists.

        `path` is relative to the project folder; missing folders are created. At most
        1000000 bytes.
        """
        data = _capped(content)
        target = self._inside(path)
        if target.is_dir():
            raise IsADirectoryError(f"'{path}' is a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return f"wrote {len(data)} bytes to {target.relative_to(self.root).as_posix()}"

    def edit(self, path: str, old_text: str, new_text: str) -> str:
        """Replace one exact piece of text in a file inside the project folder.

        `old_text` must occur exactly once in the file (include enough of the surrounding
        lines to make it unique); it is replaced by `new_text`.
        """
        target = self._inside(path)
        if not target.is_file():
            raise FileNotFoundError(f"no file '{path}'")
        if not old_text:
            raise ValueError("old_text is empty: give the exact text to replace")
        text = _text(target.read_bytes(), path, partial=False)
        count = text.count(old_text)
        if count == 0:
            raise ValueError(f"old_text does not occur in '{path}'")
        if count > 1:
            raise ValueError(
                f"old_text occurs {count} times in '{path}'; include more of the text around "
                "it so that it occurs once"
            )
        data = _capped(text.replace(old_text, new_text, 1))
        target.write_bytes(data)
        line = text[: text.index(old_text)].count("\n") + 1
        return f"edited {target.relative_to(self.root).as_posix()} at line {line}"

    def _inside(self, path: str) -> Path:
        try:
            return inside_root(self.root, path)
        except OutsideRoot:
            raise PermissionError(f"'{path}' is outside the project folder") from None

    def _shown(self, match: Path) -> str | None:
        """``match`` relative to the root, or None when its real path lies outside (a link)."""
        try:
            inside_root(self.root, match)
        except (OutsideRoot, OSError):
            return None
        try:
            return match.relative_to(self.root).as_posix()
        except ValueError:  # found through a link that leads back inside
            return None


class _Search:
    """One ``grep``: its matches so far and the bytes it has read, both capped."""

    def __init__(self, regex: re.Pattern[str]) -> None:
        self.regex = regex
        self.lines: list[str] = []
        self.matches = 0
        self.read = 0

    def file(self, file: Path, shown: str) -> bool:
        """Search one file; False once a cap is reached and the search must stop."""
        try:
            with open(file, "rb") as fh:
                if b"\x00" in fh.read(_BINARY_PROBE):
                    return True
                fh.seek(0)
                for number, raw in enumerate(iter(lambda: fh.readline(1_000_000), b""), 1):
                    self.read += len(raw)
                    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    if self.regex.search(line):
                        self.matches += 1
                        if self.matches > GREP_MATCH_LIMIT:
                            return False
                        self.lines.append(f"{shown}:{number}: {_clip(line)}")
                    if self.read > GREP_READ_LIMIT:
                        return False
        except OSError:  # unreadable (permissions, vanished): skipped like a binary file
            return True
        return True

    def result(self, pattern: str) -> str:
        lines = list(self.lines)
        if self.matches > GREP_MATCH_LIMIT:
            lines.append(f"[cut: the first {GREP_MATCH_LIMIT} matches are shown; there are more]")
        elif self.read > GREP_READ_LIMIT:
            lines.append(
                f"[cut: stopped after reading {GREP_READ_LIMIT} bytes; narrow path or glob]"
            )
        return "\n".join(lines) if lines else f"no line matches '{pattern}'"


def _clip(line: str) -> str:
    if len(line) <= GREP_LINE_LIMIT:
        return line
    return line[:GREP_LINE_LIMIT] + f" [cut: the line has {len(line)} characters]"


def _capped(content: str) -> bytes:
    data = content.encode("utf-8")
    if len(data) > WRITE_LIMIT:
        raise ValueError(f"content has {len(data)} bytes; at most {WRITE_LIMIT} may be written")
    return data


def _text(data: bytes, path: str, *, partial: bool) -> str:
    """``data`` as UTF-8 text; a file that is not text is an error the model is told."""
    if b"\x00" in data:
        raise ValueError(f"'{path}' is not a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        if partial and error.start >= len(data) - 3:  # a character cut at the limit
            return data[: error.start].decode("utf-8")
        raise ValueError(f"'{path}' is not UTF-8 text") from None
