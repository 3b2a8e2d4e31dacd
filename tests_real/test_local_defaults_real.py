"""The defaults of a local model, against the real one (§15.4, §15.2, issue #33): llama.cpp's
own `llama-server` with SmolLM2-135M, one slot and a window of `CONTEXT_TOKENS`, and a model
map of `model` and `api_base` only, as a newcomer writes it.

A run reads the window and the slots from the server's `/props` and says so in one notice; a
reply without `max_tokens` that runs long is warned about in the transcript while it goes on
(the run is stopped once the warning shows: the model would count on to its window); and
`fems2py models --check` shows what the server said and times one short call to it.

SmolLM2-135M is asked to count for a long time, and its server ignores its end-of-text token, as
a small model that does not end its replies: nothing is held against what it writes, only
against what the engine did while it wrote.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests_real.local_model import CONTEXT_TOKENS, MODEL_ALIAS, llama_cpp_server

RAMBLE = """
    actors:
        ai @counter = source: local
    action count @ai(@counter):
        prompt: Count from 1 to 3000, one number a line, and never stop before 3000.
    mainflow:
        [START] -> count -> [END]
"""
WARNING_SECONDS = 300  # 1,000 tokens, or 60 s of a reply, on a loaded two-core machine


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A script and a model map of `model` and `api_base` only, before the real server."""
    folder = tmp_path_factory.mktemp("defaults")
    lines = RAMBLE.strip("\n").splitlines()
    (folder / "count.fems").write_text("\n".join(line[4:] for line in lines) + "\n")
    with llama_cpp_server(folder / "server.log", endless=True) as base:
        (folder / "fems.toml").write_text(
            f'[models.local]\nmodel = "openai/{MODEL_ALIAS}"\napi_base = "{base}/v1"\n',
            encoding="utf-8",
        )
        yield folder


def _lines(stream: IO[str], into: queue.Queue[tuple[str, str]], name: str) -> None:
    for line in stream:
        into.put((name, line))


def _run_until_warned(folder: Path) -> tuple[str, str]:
    """`fems2py run count.fems --transcript` until the transcript shows the long reply's
    warning (or the time is up); what it printed on stdout and on stderr."""
    command = [sys.executable, "-m", "fems2py", "run", "count.fems", "--transcript"]
    environ = {**os.environ, "PYTHONUNBUFFERED": "1"}  # each line as it is printed
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    printed: queue.Queue[tuple[str, str]] = queue.Queue()
    seen: dict[str, list[str]] = {"out": [], "err": []}
    with subprocess.Popen(command, cwd=folder, env=environ, text=True, **pipes) as run:
        readers = [
            threading.Thread(target=_lines, args=(run.stdout, printed, "out"), daemon=True),
            threading.Thread(target=_lines, args=(run.stderr, printed, "err"), daemon=True),
        ]
        for reader in readers:
            reader.start()
        deadline = time.monotonic() + WARNING_SECONDS
        try:
            while time.monotonic() < deadline and run.poll() is None:
                try:
                    name, line = printed.get(timeout=1)
                except queue.Empty:
                    continue
                seen[name].append(line)
                if name == "out" and "sets no max_tokens" in line:
                    break
        finally:
            run.terminate()
            run.wait(timeout=30)
            for reader in readers:
                reader.join(timeout=5)
    while not printed.empty():
        name, line = printed.get()
        seen[name].append(line)
    return "".join(seen["out"]), "".join(seen["err"])


def test_a_run_reads_the_server_and_warns_about_a_long_reply(folder: Path) -> None:
    out, err = _run_until_warned(folder)
    notices = [line for line in err.splitlines() if "as llama.cpp's server at" in line]
    assert notices == [
        f"fems: model openai/{MODEL_ALIAS}: context_window {CONTEXT_TOKENS}, max_concurrency 1, "
        f"as llama.cpp's server at {_base(folder)}/props says (set them in its model-map entry "
        "to decide yourself)"
    ], err[-2000:]
    warnings = [line for line in out.splitlines() if "sets no max_tokens" in line]
    assert len(warnings) == 1, out[-2000:]
    (warning,) = warnings
    assert warning.startswith("  ! count by @counter: the reply of @counter has run to about ")
    assert "set max_tokens" in warning
    assert "Traceback" not in err


def _base(folder: Path) -> str:
    """The server's address (without `/v1`) as the model map names it."""
    text = (folder / "fems.toml").read_text(encoding="utf-8")
    return text.split('api_base = "', 1)[1].split('"', 1)[0].removesuffix("/v1")


def test_models_check_times_a_call_to_the_server(folder: Path) -> None:
    check = subprocess.run(
        [sys.executable, "-m", "fems2py", "models", "count.fems", "--check"],
        cwd=folder, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"local → openai/{MODEL_ALIAS}  (used by the script)" in check.stdout
    said = f"(said by llama.cpp's server at {_base(folder)}/props)"
    assert f"window       {CONTEXT_TOKENS} tokens {said}" in check.stdout
    assert f"concurrency  1 at once {said}" in check.stdout
    assert "check        first chunk after " in check.stdout and " tokens/s" in check.stdout
