"""One confinement rule for every path a script or a model names (§1.5, §5, §15.5).

A path is taken relative to a root folder (an absolute path is taken as it is), every symlink
along it is resolved, and the real path must lie inside the root's real path. ``../``, absolute
paths and symlinks that lead out of the root are all refused the same way. The built-in tools
(``read``, ``list``, ``write``) use it at run time; the compiler uses it for ``file:`` and
``code:`` paths, so both keep to the same rule.
"""

from __future__ import annotations

from pathlib import Path


class OutsideRoot(ValueError):
    """A path that leads outside its root folder; the message names the path and the root."""


def inside_root(root: str | Path, path: str | Path) -> Path:
    """The real path of ``path`` (relative to ``root``) when it lies inside ``root``.

    Raises :class:`OutsideRoot` otherwise. The path need not exist: the symlinks of the part
    that exists are resolved, and the rest cannot leave the root without a ``..`` that the
    resolution removes first.
    """
    real_root = Path(root).resolve()
    real = (real_root / Path(path)).resolve()
    if not real.is_relative_to(real_root):
        raise OutsideRoot(f"'{path}' is outside {real_root}")
    return real
