"""The defaults of a local model, against the real one (§15.4, §15.2): `fems2py models
--check` times one short call to the server.

SmolLM2-135M is asked to count for a long time: nothing is held against what it writes, only
against what the engine did while it wrote.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests_real.local_model import (
    CONTEXT_TOKENS,
    MODEL_ALIAS,
    RecordingProxy,
    llama_cpp_props,
    llama_server,
)

RAMBLE = """
    meta:
        max_steps = 40
    actors:
        ai @counter = source: local
    action count @ai(@counter):
        prompt: Count from 1 to 3000, one number a line, and never stop before 3000.
    mainflow:
        [START] -> count -> [START]
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A script and a model map of `model` and `api_base` only, before the real server."""
    folder = tmp_path_factory.mktemp("defaults")
    lines = RAMBLE.strip("\n").splitlines()
    (folder / "count.fems").write_text("\n".join(line[4:] for line in lines) + "\n")
    with (
        llama_server(folder / "server.log") as base,
        RecordingProxy(base, props=llama_cpp_props()) as proxy,
    ):
        (folder / "fems.toml").write_text(
            f'[models.local]\nmodel = "openai/{MODEL_ALIAS}"\napi_base = "{proxy.api_base}"\n',
            encoding="utf-8",
        )
        yield folder


def test_models_check_times_a_call_to_the_server(folder: Path) -> None:
    check = subprocess.run(
        [sys.executable, "-m", "fems2py", "models", "count.fems", "--check"],
        cwd=folder, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"local → openai/{MODEL_ALIAS}  (used by the script)" in check.stdout
    assert f"window       {CONTEXT_TOKENS} tokens (said by its server at " in check.stdout
    assert "concurrency  1 at once (said by its server at " in check.stdout
    assert "check        first chunk after " in check.stdout and " tokens/s" in check.stdout
