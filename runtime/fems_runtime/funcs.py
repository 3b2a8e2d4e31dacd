"""The author's Python (§5, §9.7) and the built-in ``system.spawn`` (§9.8).

``code:`` files are loaded by path (not by module name, so two scripts' ``utils.py`` never
collide), once per path. The modules beside them are imported by name, as Python does: two
folders' ``rules.py`` in one process are a run error, never one of them silently. Calls run in
a worker thread; return values are mapped onto the action's outs with the spec's errors.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
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
_code_folders: set[Path] = set()  # where loaded code files are: their modules may clash


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
        _find_beside(resolved.parent)
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[name]
            _one_module_per_name(resolved)  # a clash explains the failure better than its symptom
            message = f"importing {resolved} failed: {type(error).__name__}: {error}"
            raise RunError(message) from error
        try:
            _one_module_per_name(resolved)
        except RunError:
            del sys.modules[name]
            raise
        _modules[resolved] = module
        return module


def _find_beside(folder: Path) -> None:
    """Let a code file import the modules beside it (``from rules import ROLES``), as ``python
    file.py`` would, wherever the run was started (§5). The folder goes last on the import path:
    a file beside it never hides an installed module or the standard library's."""
    _code_folders.add(folder)
    if str(folder) not in sys.path:
        sys.path.append(str(folder))


def _one_module_per_name(code: Path) -> None:
    """Python keeps one module per name in a process: a code file with ``rules.py`` beside it
    silently gets another code folder's ``rules`` when that was imported first, or when that
    folder came first on the import path; which one depends on what else the process ran. So
    that is a run error (§5), checked after the file ran (its imports are then in
    ``sys.modules``). A module from anywhere else (the standard library, an installed package)
    wins by design, in every run alike."""
    folder = code.parent
    with os.scandir(folder) as entries:
        for entry in entries:
            stem, suffix = os.path.splitext(entry.name)
            name = stem if suffix == ".py" else entry.name
            theirs = getattr(sys.modules.get(name), "__file__", None)
            if not isinstance(theirs, str) or "." in name:
                continue  # not loaded (the common case), or a module without a file
            mine = Path(entry.path) if suffix == ".py" else Path(entry.path, "__init__.py")
            other = Path(theirs).resolve()
            home = other.parent.parent if other.name == "__init__.py" else other.parent
            if home == folder or home not in _code_folders or not mine.is_file():
                continue  # its own, or from the standard library, an installed package …
            if mine.resolve() == other:
                continue  # a link to the very file: the same code
            raise RunError(
                f"code file {code} has {mine.relative_to(folder)} beside it, but this process "
                f"already imported '{name}' from {other}, beside another code file: Python "
                f"keeps one module per name, so {code.name} would run with that one; rename "
                "one of the two"
            )


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
