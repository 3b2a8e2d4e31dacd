"""Runs with ``--serve`` in their own process, for the stage's tests (§17): start one, read the
stage's URL and other lines from its stderr as they come, stop it with Ctrl+C; and a script
whose private reply streams from the fake OpenAI server (§15.4, §17.1)."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

STAGE_URL = re.compile(r"the stage is at (http://127\.0\.0\.1:\d+/\?token=\S+)")
WAIT_SECONDS = 90

WHISPER = """
    actors:
        ai @Ann = source:remote
        ai @Bob
        ai @Max

    action whisper @ai(@Ann):
        prompt: Whisper to Bob where to meet.
        scope: [@Ann, @Bob]

    action farewell @ai(@Ann):
        prompt: Say good night to everyone.
        scope: [@Ann, @Bob, @Max]

    mainflow:
        [START] -> whisper -> farewell -> [END]
"""
"""Ann's replies come from the fake server (alias ``remote``): the whisper is for Bob only (Max
is outside its room), the farewell for everyone."""

WHISPERED = "Bob, meet me at the well."
THOUGHT = "Max must not know."
FAREWELL = "Good night, all."


def before_last_word(reply: str) -> str:
    """What has arrived of ``reply`` while the fake server holds its last word."""
    return reply[: reply.rindex(" ") + 1]


def remote_model(directory: Path, api_base: str) -> None:
    """A ``fems.toml`` in ``directory`` whose alias ``remote`` is the fake server at
    ``api_base``, with a silence allowed longer than a test holds a stream."""
    (directory / "fems.toml").write_text(
        "[models]\n"
        f'remote = {{ model = "openai/test", api_base = "{api_base}", api_key = "k", '
        f"timeout = {WAIT_SECONDS * 2} }}\n",
        encoding="utf-8",
    )


@dataclass
class StageProcess:
    """A ``--serve`` run in its own process; its stderr lines are collected as they come."""

    process: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    seen: list[str] = field(default_factory=list)

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first stderr line (seen before or still to come) matching ``pattern``."""
        compiled = re.compile(pattern)
        for line in self.seen:
            if match := compiled.search(line):
                return match
        while True:
            try:
                line = self.lines.get(timeout=WAIT_SECONDS)
            except queue.Empty:
                pytest.fail(f"no line matching {pattern!r}; stderr so far:\n" + "".join(self.seen))
            self.seen.append(line)
            if match := compiled.search(line):
                return match


@contextlib.contextmanager
def serving(
    command: list[str], cwd: Path, env: dict[str, str] | None = None
) -> Iterator[StageProcess]:
    """Start ``command`` (a run with ``--serve``) in ``cwd``; stop it with Ctrl+C."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    stage = StageProcess(process)
    assert process.stderr is not None
    reader = threading.Thread(
        target=lambda: [stage.lines.put(x) for x in process.stderr], daemon=True
    )
    reader.start()
    try:
        yield stage
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=10)
        process.stderr.close()
