"""The files a script names, read safely: ``file:"…"`` texts (§1.5) and ``code:`` files (§5).

A path is relative to the script's folder and, with symlinks resolved, must name a regular file
of at most 1 MiB inside the script's folder tree, or inside the root given by ``--root DIR``.
Anything else (``/proc/self/environ``, ``../../etc/passwd``, a symlink out, a device, a FIFO)
is refused before it is opened, so a build never embeds, waits on or reads what lies outside.
Where a path may lead is the runtime's one confinement rule (``fems_runtime.paths``), which the
built-in tools use at run time.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fems_runtime.paths import OutsideRoot, inside_root

MAX_BYTES = 1 << 20  # 1 MiB
# O_NONBLOCK: a FIFO swapped in after the check cannot make open() wait for a writer
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


class SourceFileError(Exception):
    """A named file that may not or cannot be read; ``reason`` completes "file 'PATH' …" and
    ``hint`` says what to do."""

    def __init__(self, reason: str, hint: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


def allowed_root(base_dir: Path, root: Path | None = None) -> Path:
    """The folder whose tree a script's files must lie in: ``root`` if given, else the
    script's folder ``base_dir``; symlinks resolved."""
    return (root if root is not None else base_dir).resolve()


def source_path(base_dir: Path, path: str, root: Path | None = None) -> Path:
    """The resolved path of ``path`` (relative to ``base_dir``) once it is known to be a regular
    file of at most 1 MiB inside :func:`allowed_root`; else :class:`SourceFileError`. Nothing
    is opened."""
    allowed = allowed_root(base_dir, root)
    try:
        target = inside_root(allowed, base_dir.resolve() / path)
    except OutsideRoot:
        where = "--root" if root is not None else "the script's folder"
        raise SourceFileError(
            f"is outside {where} ({allowed})",
            "a script may only name files inside its own folder tree; "
            "give a wider folder with --root DIR",
        ) from None
    except (ValueError, UnicodeError, OSError):  # a NUL byte, a lone surrogate
        raise SourceFileError("is not a valid path", "write the path as plain text") from None
    try:
        info = target.stat()
    except FileNotFoundError:
        raise SourceFileError("does not exist", f"looked for {target}") from None
    except OSError as error:
        raise SourceFileError(f"cannot be read: {error.strerror}", f"looked at {target}") from None
    _check_kind(info, target)
    return target


def read_source_file(base_dir: Path, path: str, root: Path | None = None) -> tuple[Path, bytes]:
    """:func:`source_path` and the file's bytes, read through a descriptor that follows no
    symlink and never blocks, checked again once open (the file could be swapped meanwhile)."""
    target = source_path(base_dir, path, root)
    try:
        handle = os.open(target, _OPEN_FLAGS)
    except OSError as error:
        raise SourceFileError(f"cannot be read: {error.strerror}", f"looked at {target}") from None
    with os.fdopen(handle, "rb") as stream:
        _check_kind(os.fstat(handle), target)
        data = stream.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise _too_large(target)
    return target, data


def read_regular(path: Path, limit: int) -> bytes | None:
    """The first ``limit`` bytes of ``path`` when it is a regular file (not a symlink, FIFO or
    device), else None; opening never waits and follows no symlink."""
    try:
        handle = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(handle).st_mode):  # a directory: fdopen would raise
        os.close(handle)
        return None
    with os.fdopen(handle, "rb") as stream:
        return stream.read(limit)


def _check_kind(info: os.stat_result, target: Path) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise SourceFileError("is a directory", f"looked at {target}")
    if not stat.S_ISREG(info.st_mode):
        raise SourceFileError(
            "is not a regular file (a device, FIFO or socket)", f"looked at {target}"
        )
    if info.st_size > MAX_BYTES:
        raise _too_large(target)


def _too_large(target: Path) -> SourceFileError:
    return SourceFileError(
        "is larger than 1 MiB", f"{target}: keep long texts and code in smaller files"
    )
