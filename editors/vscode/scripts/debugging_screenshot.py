"""Takes the debugging guide's screenshot: a werewolf vote stopped in VS Code's debug view.

A tool for the docs' maintainers, not part of the extension (.vscodeignore leaves it out of
fems.vsix) nor of the test suite. It runs code-server (VS Code in the browser) with the packaged
extension, opens a copy of examples/werewolf, sets a breakpoint on the prompt line of
`action vote @mind(@voter):`, starts "FEM: Debug this script" with the offline mock model, waits
for the stop, expands the Turn scope and its context in the Variables pane, and saves a PNG of the
window (pngquant makes it small, when installed).

What it needs, none of it installed by the project:

- code-server 4.100 or later, e.g. ``npm install --prefix /opt/code-server code-server@4.100.3``
  (its postinstall fetches ripgrep from the network; where that fails, install with
  ``--ignore-scripts`` and build the native modules with ``npm rebuild``);
- Debian's ``chromium`` and, optionally, ``pngquant``;
- playwright's Python package (a dev dependency of the project) and fems2py with its ``lsp`` extra;
- the packaged extension: ``cd editors/vscode && npm ci && npm run package``.

Run it from the repository's root::

    python editors/vscode/scripts/debugging_screenshot.py \\
        --code-server /opt/code-server/node_modules/.bin/code-server \\
        --out docs/images/debugging-vote.png --out docs/zh/images/debugging-vote.png

``--fems2py`` (default: the one on PATH) is the fems2py that the extension's language server and
debugger run, in the environment of this script. If a step fails, the window at that moment is
saved beside the first ``--out`` as ``*.failed.png``. Look at the PNG before committing it.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from playwright.sync_api import Locator, Page, ViewportSize, sync_playwright

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "werewolf"
SCRIPT = "werewolf.fems"
BREAKPOINT = "action vote @mind(@voter):"
MODULE_OPTIONS = ["--model", "fems/mock", "--seed", "1", "--souls", "souls.yaml"]
WINDOW: ViewportSize = {"width": 1400, "height": 900}
SIDEBAR_GROWTH = 240  # pixels the side bar is widened by
VARIABLES_GROWTH = 140  # and the Variables pane made taller by
CHROMIUM_FLAGS = [  # playwright adds --headless and a fresh profile of its own
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# A quiet window: no welcome page, tips, chat or minimap; the debug toolbar in the title bar.
SETTINGS = {
    "workbench.colorTheme": "Default Dark Modern",
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "workbench.welcomePage.walkthroughs.openOnInstall": False,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "chat.commandCenter.enabled": False,
    "security.workspace.trust.enabled": False,
    "extensions.ignoreRecommendations": True,
    "telemetry.telemetryLevel": "off",
    "update.showReleaseNotes": False,
    "editor.minimap.enabled": False,
    "editor.fontSize": 13,
    "debug.toolBarLocation": "commandCenter",
    "debug.internalConsoleOptions": "neverOpen",
}


def breakpoint_line() -> int:
    """The line (from 1) of the vote's `prompt:`, found by its text so an edit cannot move it."""
    lines = (EXAMPLE / SCRIPT).read_text(encoding="utf-8").splitlines()
    header = lines.index(BREAKPOINT)
    if lines[header + 1].strip() != "prompt: |":
        raise SystemExit(f"{SCRIPT}: no prompt line under {BREAKPOINT!r}")
    return header + 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until_up(url: str, server: subprocess.Popen[bytes], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"code-server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"code-server did not answer on {url}")


@contextmanager
def code_server(code_server_bin: str, vsix: Path, fems2py: str, home: Path) -> Iterator[str]:
    """Runs code-server with the extension installed and the settings above; yields its URL."""
    data, extensions = home / "data", home / "extensions"
    user = data / "User"
    user.mkdir(parents=True)
    settings = SETTINGS | {
        "fems.server.command": [fems2py, "lsp"],
        "fems.debug.command": [fems2py],
        "fems.debug.args": MODULE_OPTIONS,
    }
    (user / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    dirs = ["--user-data-dir", str(data), "--extensions-dir", str(extensions)]
    subprocess.run(
        [code_server_bin, *dirs, "--install-extension", str(vsix)],
        check=True,
        capture_output=True,
    )
    port = free_port()
    command = [
        code_server_bin,
        *dirs,
        "--auth",
        "none",
        "--bind-addr",
        f"127.0.0.1:{port}",
        "--disable-telemetry",
        "--disable-update-check",
        "--disable-workspace-trust",
        "--disable-getting-started-override",
    ]
    log = (home / "code-server.log").open("wb")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_up(f"{url}/healthz", server)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


def run_command(page: Page, title: str) -> None:
    """Runs a command by its title from the command palette."""
    page.keyboard.press("F1")
    palette = page.locator(".quick-input-widget input")
    palette.wait_for()
    palette.fill(f">{title}")
    page.locator(".quick-input-list .monaco-list-row", has_text=title).first.wait_for()
    page.keyboard.press("Enter")


def open_script(page: Page, line: int) -> None:
    run_command(page, "Go to File...")
    page.keyboard.type(SCRIPT)
    page.locator(".quick-input-list .monaco-list-row", has_text=SCRIPT).first.wait_for()
    page.keyboard.press("Enter")
    page.locator(".tabs-container .tab.active", has_text=SCRIPT).wait_for()
    run_command(page, "Go to Line/Column...")
    page.keyboard.type(str(line))
    page.keyboard.press("Enter")


def pane(page: Page, title: str) -> Locator:
    """A pane of the Run and Debug view (Variables, Watch, Call Stack, Breakpoints)."""
    return page.locator(".pane").filter(
        has=page.locator(".pane-header", has_text=re.compile(f"^{title}", re.IGNORECASE))
    )


def expand(page: Page, label: str) -> None:
    """Expands a row of the Variables pane by its name."""
    row = (
        pane(page, "Variables")
        .locator(".monaco-list-row")
        .filter(has_text=re.compile(rf"^\s*{re.escape(label)}\b"))
        .first
    )
    row.wait_for()
    if row.get_attribute("aria-expanded") == "false":
        row.click()
        page.wait_for_function(
            "row => row.getAttribute('aria-expanded') === 'true'", arg=row.element_handle()
        )


def lay_out(page: Page) -> None:
    """A wider side bar, and a taller Variables pane (above a folded Watch), so that the
    Variables and the Call Stack show more."""
    watch = pane(page, "Watch")
    header = watch.locator(".pane-header")
    if header.get_attribute("aria-expanded") == "true":
        header.click()
    drag(page, page.locator(".part.sidebar"), "right", SIDEBAR_GROWTH)
    drag(page, watch, "top", VARIABLES_GROWTH)


def drag(page: Page, part: Locator, edge: Literal["right", "top"], pixels: int) -> None:
    """Drags the sash on the right or top edge of a part of the window by some pixels."""
    box = part.bounding_box()
    assert box is not None
    if edge == "right":
        start = (box["x"] + box["width"], box["y"] + box["height"] / 2)
        end = (start[0] + pixels, start[1])
    else:
        start = (box["x"] + box["width"] / 2, box["y"])
        end = (start[0], start[1] + pixels)
    page.mouse.move(*start)
    page.mouse.down()
    page.mouse.move(*end, steps=10)
    page.mouse.up()


def take(page: Page, url: str, folder: Path, line: int, out: Path) -> None:
    """Opens the folder, stops the run at the line's breakpoint and saves the window."""
    page.goto(f"{url}/?folder={folder}")
    page.locator(".monaco-workbench").wait_for(timeout=60_000)
    open_script(page, line)
    run_command(page, "Debug: Toggle Breakpoint")
    page.locator(".codicon-debug-breakpoint").first.wait_for()
    run_command(page, "FEM: Debug this script")
    page.locator(".codicon-debug-stackframe").first.wait_for(timeout=120_000)
    lay_out(page)
    expand(page, "Turn")
    expand(page, "context")
    run_command(page, "View: Focus Active Editor Group")  # no focus ring in the Variables
    page.wait_for_timeout(1000)  # the tree's animations
    page.mouse.move(WINDOW["width"] / 2, WINDOW["height"] - 5)  # no hover over the panes
    page.screenshot(path=str(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code-server", default=shutil.which("code-server"))
    parser.add_argument("--chromium", default=shutil.which("chromium"))
    parser.add_argument("--fems2py", default=shutil.which("fems2py"))
    parser.add_argument("--vsix", type=Path, default=ROOT / "editors" / "vscode" / "fems.vsix")
    parser.add_argument("--out", type=Path, action="append", required=True)
    options = parser.parse_args()
    for name in ("code_server", "chromium", "fems2py"):
        if not getattr(options, name):
            parser.error(f"no {name.replace('_', '-')} found: pass --{name.replace('_', '-')}")
    if not options.vsix.is_file():
        parser.error(f"no {options.vsix}: cd editors/vscode && npm ci && npm run package")

    with tempfile.TemporaryDirectory(prefix="fems-screenshot-") as temporary:
        home = Path(temporary)
        folder = home / "werewolf"
        shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("build", "__pycache__"))
        shot = home / "debugging-vote.png"
        with (
            code_server(options.code_server, options.vsix, options.fems2py, home) as url,
            sync_playwright() as playwright,
        ):
            browser = playwright.chromium.launch(
                executable_path=options.chromium,
                args=CHROMIUM_FLAGS,
            )
            try:
                page = browser.new_page(viewport=WINDOW)
                try:
                    take(page, url, folder, breakpoint_line(), shot)
                except Exception:
                    failed = options.out[0].with_suffix(".failed.png")
                    page.screenshot(path=str(failed))
                    sys.stderr.write(f"the window when it failed: {failed}\n")
                    raise
            finally:
                browser.close()
        if shutil.which("pngquant"):
            subprocess.run(
                ["pngquant", "--force", "--skip-if-larger", "--output", str(shot), str(shot)],
                check=False,
            )
        for out in options.out:
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, out)


if __name__ == "__main__":
    main()
