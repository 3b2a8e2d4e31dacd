"""When a run exports OpenTelemetry (issue 31): ``--otel`` or the standard variables turn it
on, ``run(otel=False)`` keeps it off; a run that does not export never imports
opentelemetry; a missing extra is one line with the ``pip install`` command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fems_runtime.otel import captures_content, wanted

from fems2py.build import build_file

SCRIPT = """\
actors:
    ai @a
action talk @ai(@a):
    prompt: Say something.
mainflow:
    [START] -> talk -> [END]
"""
REPORT_IMPORTS = (
    "import atexit, sys\n"
    "atexit.register(lambda: print(\n"
    "    'sdk' if 'opentelemetry.sdk' in sys.modules\n"
    "    else 'forwarded' if 'fems_runtime.otel.forward' in sys.modules\n"
    "    else 'imported' if 'opentelemetry' in sys.modules else 'not'\n"
    "))\n"
)


@pytest.mark.parametrize(
    ("option", "environment", "on"),
    [
        (None, {}, False),
        (True, {}, True),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        (None, {"OTEL_SERVICE_NAME": "werewolf"}, True),
        (None, {"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test"}, True),
        (None, {"OTEL_SERVICE_NAME": "  "}, False),
        (False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False),
        (None, {"OTEL_EXPORTER_OTLP_HEADERS": "a=b"}, False),
    ],
)
def test_export_is_on_with_the_option_or_a_standard_variable(
    option: bool | None, environment: dict[str, str], on: bool
) -> None:
    assert wanted(option, environment) is on


@pytest.mark.parametrize(
    ("value", "captured"), [("", False), ("false", False), ("true", True), ("TRUE", True)]
)
def test_content_is_captured_only_when_asked(value: str, captured: bool) -> None:
    environment = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": value}
    assert captures_content(environment) is captured


@pytest.fixture
def module(tmp_path: Path) -> Path:
    script = tmp_path / "talk.fems"
    script.write_text(SCRIPT, encoding="utf-8")
    return build_file(script, tmp_path / "talk.py").output


def run(module: Path, *args: str, prelude: str = "", **environment: str) -> tuple[int, str, str]:
    """The module's command line in a fresh interpreter, with ``prelude`` run first; no
    ``OTEL_*`` variable but ``environment``'s."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    code = prelude + (
        "import runpy, sys\n"
        f"sys.argv = [{str(module)!r}, *{list(args)!r}]\n"
        f"runpy.run_path({str(module)!r}, run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, **environment},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


def test_a_run_that_does_not_export_never_imports_opentelemetry(module: Path) -> None:
    """Nor does one that exports: its export process does (the run only forwards events)."""
    status, out, err = run(module, "--db", ":memory:", prelude=REPORT_IMPORTS)
    assert status == 0, err
    assert out.strip().splitlines()[-1] == "not"
    status, out, err = run(
        module,
        "--db",
        ":memory:",
        "--otel",
        prelude=REPORT_IMPORTS,
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
    )
    assert status == 0, err
    assert out.strip().splitlines()[-1] == "forwarded"


def test_a_missing_extra_is_one_line_with_the_pip_command(module: Path) -> None:
    without = "import sys\nsys.modules['opentelemetry'] = None  # not installed\n"
    status, _, err = run(module, "--db", ":memory:", prelude=without, OTEL_SERVICE_NAME="talk")
    assert status == 1
    assert err.strip() == (
        "talk.fems: error: --otel needs the OpenTelemetry packages: "
        "pip install 'fems-runtime[otel]'"
    )
