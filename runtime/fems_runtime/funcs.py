"""The author's Python (§5, §9.7) and the built-in ``system.spawn`` (§9.8).

``code:`` files are loaded by path (not by module name, so two scripts' ``utils.py`` never
collide), once per path. The modules beside them are imported by name, as Python does: two
folders' ``rules.py`` in one process, imported by code in the folder that would get the other's
(read from its imports, a function's too), are a run error at load, never one of them silently.
Calls run in a worker thread; return values are mapped onto the action's outs with the spec's
errors.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fems_runtime.authored import off_loop
from fems_runtime.records import RunError
from fems_runtime.signals import OutSpec
from fems_runtime.variables import ActorSpec

if TYPE_CHECKING:
    from fems_runtime.store import Store
    from fems_runtime.values import Actor
    from fems_runtime.variables import Frame, Variables

_modules: dict[Path, ModuleType] = {}
_load_lock = threading.Lock()


@dataclass
class _CodeFolder:
    """A folder code files were loaded from: the modules beside it, and its loaded code files.
    Its modules may clash with another folder's."""

    beside: dict[str, Path]  # module name → its file: rules.py, or rules/__init__.py
    code: list[Path] = field(default_factory=list)

    def imports(self) -> set[str]:
        """The names its loaded code files import (:func:`_names_used`), read when a clash is
        possible: the common run, with one code folder, never parses a file."""
        return set().union(*(_names_used(path, self.beside) for path in self.code))


_code_folders: dict[Path, _CodeFolder] = {}
_imports_of: dict[Path, frozenset[str]] = {}  # a file's imports, parsed once


def load_code(path: str | Path) -> ModuleType:
    """Import the Python file at ``path`` (cached per resolved path, which errors name: not the
    generated module's ``…/../../`` way to it)."""
    resolved = Path(path).resolve()
    with _load_lock:
        module = _modules.get(resolved)
        if module is not None:
            return module
        if not resolved.is_file():
            raise RunError(f"code file {resolved} does not exist")
        digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
        name = f"fems_code_{resolved.stem}_{digest}"
        spec = importlib.util.spec_from_file_location(name, resolved)
        if spec is None or spec.loader is None:
            raise RunError(f"code file {resolved} cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        folder = _find_beside(resolved.parent)
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[name]
            _one_module_per_name(resolved, folder)  # a clash explains the failure better
            message = f"importing {resolved} failed: {type(error).__name__}: {error}"
            raise RunError(message) from error
        try:
            _one_module_per_name(resolved, folder)
        except RunError:
            del sys.modules[name]
            raise
        folder.code.append(resolved)
        _modules[resolved] = module
        return module


def _find_beside(folder: Path) -> _CodeFolder:
    """Let a code file import the modules beside it (``from rules import ROLES``), as ``python
    file.py`` would, wherever the run was started (§5). The folder goes last on the import path:
    a file beside it never hides an installed module or the standard library's."""
    known = _code_folders.get(folder)
    if known is None:  # a folder is scanned once: a batch loads the same ones again and again
        known = _code_folders[folder] = _CodeFolder(_modules_in(folder))
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    return known


def _modules_in(folder: Path) -> dict[str, Path]:
    """What ``import NAME`` could find in ``folder``: ``rules.py``, or ``rules/__init__.py``,
    which Python prefers when both are there."""
    found: dict[str, Path] = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            stem, suffix = os.path.splitext(entry.name)
            if suffix == ".py" and stem.isidentifier():
                found.setdefault(stem, Path(entry.path))
            elif entry.name.isidentifier() and entry.is_dir():
                init = Path(entry.path, "__init__.py")
                if init.is_file():
                    found[entry.name] = init
    return found


def _names_used(code: Path, beside: Mapping[str, Path]) -> set[str]:
    """The modules ``code`` imports anywhere in it (a function's ``import rules`` too, which
    runs only when called), and those that the modules beside it which it imports import in
    turn: every name it may run with, read before any of it runs."""
    used: set[str] = set()
    todo, seen = [code], set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            names = _imports_in(path)
            used |= names
            todo.extend(beside[name] for name in names if name in beside)
    return used


def _imports_in(path: Path) -> frozenset[str]:
    """The top-level names of a file's absolute imports (``import a.b``, ``from a import b``),
    parsed once; a file Python cannot parse imports nothing (running it says why)."""
    names = _imports_of.get(path)
    if names is None:
        try:
            tree: ast.AST = ast.parse(path.read_bytes(), str(path))
        except (OSError, SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
        names = _imports_of[path] = frozenset(found)
    return names


def _one_module_per_name(code: Path, folder: _CodeFolder) -> None:
    """Python keeps one module per name in a process: a code file importing the ``rules.py``
    beside it silently gets another code folder's ``rules`` when that was imported first, or
    when that folder comes first on the import path; and a code file of that folder importing
    ``rules`` gets this one when it wins. Which one depends on what else the process ran, so
    that is a run error (§5) as soon as the file is loaded, even when only a function imports
    ``rules``. A module from anywhere else (the standard library, an installed package) wins
    by design, in every run alike; a ``rules.py`` beside code that imports no ``rules`` is no
    clash. The file's imports are read only when another code folder has a module of a name
    this one has."""
    here, beside = code.parent, folder.beside
    elsewhere = {
        name for where, known in _code_folders.items() if where != here for name in known.beside
    }
    shared = beside.keys() & elsewhere
    if not shared:
        return  # the common case: one code folder, or folders without a name in common
    for name in sorted(_names_used(code, beside) & shared):
        path = beside[name]
        mine = path.resolve()
        others = _others(name, mine, here)
        if not others:
            continue  # theirs is a link to the very file
        found = _found(name)
        rel = path.relative_to(here)
        if found in others:
            verb = "already imported" if name in sys.modules else "would import"
            raise RunError(
                f"code file {code} has {rel} beside it, but this process {verb} '{name}' from "
                f"{found}, beside another code file: Python keeps one module per name, so "
                f"{code.name} would run with that one; rename one of the two"
            )
        if found != mine:
            continue  # the standard library's, an installed package's …: theirs too
        for theirs, known in others.items():
            if name in known.imports():
                raise RunError(
                    f"code file {code} has {rel} beside it, but code beside {theirs} imports "
                    f"'{name}' too, and this process would import it from {path}: Python keeps "
                    "one module per name, so that code would run with this one; rename one of "
                    "the two"
                )


def _others(name: str, mine: Path, folder: Path) -> dict[Path, _CodeFolder]:
    """The other code folders with their own module ``name`` (by its real file): not a link
    to ``mine`` (a real file too), which is the same code."""
    others: dict[Path, _CodeFolder] = {}
    for where, known in _code_folders.items():
        theirs = known.beside.get(name)
        if where == folder or theirs is None or not theirs.is_file():
            continue
        real = theirs.resolve()
        if real != mine:
            others[real] = known
    return others


def _found(name: str) -> Path | None:
    """The file ``import name`` gives now: the module imported already, or the one found first
    on the import path (a built-in or frozen module has no file)."""
    module = sys.modules.get(name)
    if module is not None:
        where = getattr(module, "__file__", None)
    else:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        where = spec.origin if spec is not None and spec.has_location else None
    return Path(where).resolve() if isinstance(where, str) else None


class CodeFiles:
    """The ``code:`` aliases of a script: ``alias → path``, paths relative to ``base_dir`` (the
    generated module's directory). One rule makes a module movable (§5): a file missing at its
    recorded path is taken from beside the module, under its own name, so a module copied
    together with its code files into another project keeps working."""

    def __init__(self, files: Mapping[str, str | Path], base_dir: str | Path = ".") -> None:
        self.base_dir = Path(base_dir)
        self.files = {alias: self._locate(Path(path)) for alias, path in files.items()}

    def _locate(self, path: Path) -> Path:
        recorded, beside = self.base_dir / path, self.base_dir / path.name
        return beside if not recorded.is_file() and beside.is_file() else recorded

    def module(self, alias: str) -> ModuleType:
        path = self.files.get(alias)
        if path is None:
            raise RunError(f"'{alias}' is not a code: alias")
        if not path.is_file():  # neither where it was built from nor beside the module
            where = f"in {self.base_dir}, beside the module"
            if path.parent.resolve() == self.base_dir.resolve():
                where = f"not {where}"
            else:
                built = path.parent.resolve()  # not the module's …/../src way to it
                where = f"neither in {built} (where it was built from) nor {where}"
            raise RunError(
                f"code file {path.name} is {where}: copy {path.name} there, or build the "
                "module with --bundle"
            )
        return load_code(path)

    def function(self, alias: str, name: str) -> Callable[..., Any]:
        func = getattr(self.module(alias), name, None)
        if not callable(func):
            where = self.files[alias].resolve()  # its real path, not the …/../ way to it
            raise RunError(f"{alias}.{name} is not a function in {where}")
        return func


def auto_inputs(
    func: Callable[..., Any], frame: Frame, *, name: str = "function"
) -> dict[str, Any]:
    """Inputs of a ``@func`` without ``in:`` (§9.7): each parameter takes the variable of the
    same name; a parameter without a default and without such a variable is a run error."""
    kwargs: dict[str, Any] = {}
    for param in inspect.signature(func).parameters.values():
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if frame.declared(param.name):
            kwargs[param.name] = frame.get(param.name)
        elif param.default is inspect.Parameter.empty:
            raise RunError(f"{name} needs '{param.name}', but no variable of that name is declared")
    return kwargs


async def call_function(
    func: Callable[..., Any], kwargs: Mapping[str, Any], *, name: str = "function"
) -> Any:
    """Call the author's function (:func:`off_loop`); its exceptions become :class:`RunError`
    (chained, so the traceback is still there)."""
    try:
        return await off_loop(func, kwargs)
    except TypeError as error:
        raise RunError(f"calling {name} failed: {error}") from error
    except Exception as error:
        raise RunError(f"{name} raised {type(error).__name__}: {error}") from error


def map_returns(
    value: Any, outs: Sequence[OutSpec], *, name: str = "function"
) -> list[tuple[OutSpec, Any]]:
    """Pair a return value with the outs (§9.7): a dict whose keys are exactly the out names
    key by key, any other dict to the single out (``out: hp`` with ``return {"@knight": 80}``),
    a tuple by position, anything else to the single out; ``None`` only if every out is
    optional."""
    if not outs:
        return []
    if value is None:
        if all(o.optional for o in outs):
            return []
        raise RunError(f"{name} returned None but outs {_names(outs)} expect values")
    if isinstance(value, Mapping) and not (len(outs) == 1 and set(value) != {outs[0].label}):
        labels = [o.label for o in outs]
        extra = [k for k in value if k not in labels]
        missing = [k for k in labels if k not in value]
        if extra or missing:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(missing)}")
            if extra:
                parts.append(f"unexpected {', '.join(map(str, extra))}")
            raise RunError(
                f"{name} returned a dict whose keys do not match its outs {_names(outs)}: "
                + "; ".join(parts)
            )
        return [(o, value[o.label]) for o in outs]
    if isinstance(value, tuple):
        if len(value) != len(outs):
            raise RunError(
                f"{name} returned {len(value)} values but has {len(outs)} outs {_names(outs)}"
            )
        return list(zip(outs, value, strict=True))
    if len(outs) != 1:
        raise RunError(
            f"{name} returned one value ({type(value).__name__}) but has {len(outs)} outs "
            f"{_names(outs)}; return a dict or a tuple"
        )
    return [(outs[0], value)]


def assign_returns(
    frame: Frame, value: Any, outs: Sequence[OutSpec], *, name: str = "function"
) -> list[tuple[OutSpec, Any]]:
    """:func:`map_returns`, then write each value to its out (``dict.@x`` into that entry)."""
    pairs = map_returns(value, outs, name=name)
    assign_values(frame, pairs)
    return pairs


def assign_values(frame: Frame, pairs: Sequence[tuple[OutSpec, Any]]) -> None:
    """Write each value to its out (``dict.@x`` into that entry); a resumed run replays a
    recorded function result this way (§16.4)."""
    for out, item in pairs:
        if out.key is None:
            frame.assign(out.target, "=", item)
        else:
            frame.assign(out.target, "=", item, out.key)


def _names(outs: Sequence[OutSpec]) -> str:
    return "(" + ", ".join(o.label for o in outs) + ")"


def spawn(
    variables: Variables,
    spawn_requests: Any,
    *,
    store: Store | None = None,
    session: int | None = None,
) -> list[Actor]:
    """``system.spawn`` (§9.8): create AI actors from blueprints, return their references.

    ``spawn_requests`` is a list of ``{blueprint: NAME, count: N}`` (``count`` defaults to 1).
    Actors are named ``@NAME_K`` with a fresh soul each, and recorded in the session. ``K`` is
    not taken in this run nor in the session, so a continued session's new actors never inherit
    what an earlier run's actors saw.
    """
    if isinstance(spawn_requests, Mapping):
        spawn_requests = [spawn_requests]
    if not isinstance(spawn_requests, list | tuple):
        raise RunError(f"system.spawn needs a list of {{blueprint, count}}, not {spawn_requests!r}")
    made: list[Actor] = []
    taken: set[str] = set()
    if store is not None and session is not None:
        taken = {str(row["name"]) for row in store.session_actors(session)}
    next_number: dict[str, int] = {}  # per blueprint: the numbers below are taken
    for request in spawn_requests:
        if not isinstance(request, Mapping) or "blueprint" not in request:
            raise RunError(f"system.spawn: each request needs a 'blueprint', got {request!r}")
        blueprint = variables.blueprints.get(str(request["blueprint"]))
        if blueprint is None:
            known = ", ".join(sorted(variables.blueprints)) or "none"
            raise RunError(
                f"system.spawn: no blueprint named '{request['blueprint']}' (defined: {known})"
            )
        count = request.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise RunError(f"system.spawn: count must be a whole number, not {count!r}")
        for _ in range(count):
            with variables.lock:
                number = _free_number(
                    blueprint.name, next_number.get(blueprint.name, 1), variables, taken
                )
                next_number[blueprint.name] = number + 1
                actor_name = f"@{blueprint.name}_{number}"
                spec = ActorSpec(
                    actor_name,
                    type="ai",
                    soul=f"spawned:{actor_name[1:]}",
                    source=blueprint.source,
                    tools=blueprint.tools,
                    blueprint=blueprint.name,
                )
                made.append(variables.add_actor(spec))
    if store is not None and session is not None and made:  # one write for them all
        store.record_actors(session, {str(a): _session_row(variables.actors[str(a)]) for a in made})
    return made


def _session_row(spec: ActorSpec) -> dict[str, Any]:
    """A spawned actor as the session's actors table records it."""
    return {
        "type": spec.type,
        "soul_id": spec.soul or "",
        "source": spec.source,
        "blueprint": spec.blueprint,
    }


def _free_number(blueprint: str, first: int, variables: Variables, taken: set[str]) -> int:
    """The first number from ``first`` on that names no actor of the run or the session."""
    number = first
    while f"@{blueprint}_{number}" in variables.actors or f"@{blueprint}_{number}" in taken:
        number += 1
    return number


def respawn(variables: Variables, names: Sequence[str], store: Store, session: int) -> list[Actor]:
    """Replay a recorded ``system.spawn`` (§16.4): register the actors it made again, as the
    session recorded them, instead of making new ones."""
    rows = {str(row["name"]): row for row in store.session_actors(session)}
    made: list[Actor] = []
    for name in names:
        row = rows.get(str(name))
        if row is None:
            raise RunError(f"system.spawn: the session has no record of actor {name} to resume")
        blueprint = variables.blueprints.get(str(row["blueprint"]))
        spec = ActorSpec(
            str(name),
            type=row["type"],
            soul=row["soul_id"],
            source=row["source"],
            tools=blueprint.tools if blueprint is not None else (),
            blueprint=row["blueprint"],
        )
        made.append(variables.add_actor(spec))
    return made
