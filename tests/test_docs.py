"""The documentation holds together: every `§N` cited anywhere in the repository is a heading of
the language reference (docs/reference/), the English and Chinese references have the same
sections, every ```fems block of docs/ passes `fems2py check` (or shows exactly what the check
prints), and no tracked file points outside the repository.

Markers for a ```fems block, in an HTML comment on the line before it (invisible on the site):

- `<!-- fems: output -->` — the block is checked as `example.fems` and the next ```text
  block is exactly what `fems2py check example.fems` prints (exit 1 when it says `error:`);
  `python tests/test_docs.py` writes what it prints now into every such block;
- `<!-- fems: error -->` — the block shows a mistake without its output: the check must report
  an error (exit 1);
- `<!-- fems: in=examples/NAME -->` — the block is checked inside a copy of that example's
  folder, for scripts that name its `code:` or `file:` files. Both may be combined with a comma.

A block whose only line is a snippet include (`--8<-- "examples/town/town.fems"`, which the site
replaces by the file) is that file, checked in a copy of its folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
ZH_REFERENCE = ROOT / "docs" / "zh" / "reference"

SECTION_CITED = re.compile(r"§\s?(\d+(?:\.\d+)*[a-z]?)(?![\w])")
SECTION_HEADING = re.compile(r"^#{1,6} (\d+(?:\.\d+)*[a-z]?)\.? ", re.MULTILINE)
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"<!-- fems: ([^>]*?) -->\s*$")
SNIPPET = re.compile(r'^--8<-- "([^"]+)"\n?$')
OUTSIDE = re.compile(r"\.\./shared|shared/(?:spec|seeds|bench)|/work/share[d]")
# the hostile-path tests use such paths as data: the files a build must refuse to read
OUTSIDE_AS_DATA = {"tests/test_hostile_files.py", "tests/test_fuzz_hostile.py"}


def _tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [ROOT / name for name in listed.split("\0") if name]


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        return None


def _sections(folder: Path) -> dict[str, set[str]]:
    """Section numbers of each reference page, by file name."""
    return {
        page.name: set(SECTION_HEADING.findall(page.read_text(encoding="utf-8")))
        for page in sorted(folder.glob("*.md"))
    }


def _nav_pages(entries: list) -> list[str]:
    """The page files of a mkdocs.yml `nav:` (entries are paths, or titles over paths or lists)."""
    pages = []
    for entry in entries:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


@pytest.mark.parametrize(
    ("config_file", "docs_dir", "excluded"),
    [("mkdocs.yml", "docs", ("zh/", "tour/", "README.md")), ("mkdocs.zh.yml", "docs/zh", ())],
)
def test_the_site_lists_every_page_and_only_pages_that_exist(config_file, docs_dir, excluded):
    """Each site's nav names its own pages (a link to the other site is a URL, not a page):
    the Chinese site once inherited the English nav, whose pages it lacks."""
    config = yaml.safe_load((ROOT / config_file).read_text(encoding="utf-8"))
    listed = [page for page in _nav_pages(config["nav"]) if not page.startswith("/")]
    missing = [page for page in listed if not (ROOT / docs_dir / page).is_file()]
    assert not missing, f"{config_file} lists pages that do not exist: {missing}"
    pages = {
        str(page.relative_to(ROOT / docs_dir))
        for page in (ROOT / docs_dir).rglob("*.md")
        if not str(page.relative_to(ROOT / docs_dir)).startswith(excluded)
    }
    assert sorted(pages - set(listed)) == [], f"pages missing from the nav of {config_file}"


def test_the_sites_share_settings_but_not_lists_they_would_append():
    """Zensical merges an inherited config by appending lists: the shared base sets none that
    a site sets for itself, so neither site gets the other's nav, search or exclusions."""
    base = yaml.safe_load((ROOT / "mkdocs.base.yml").read_text(encoding="utf-8"))
    assert not {"nav", "plugins", "exclude_docs"} & set(base), sorted(base)
    for config_file in ("mkdocs.yml", "mkdocs.zh.yml"):
        config = yaml.safe_load((ROOT / config_file).read_text(encoding="utf-8"))
        assert config["INHERIT"] == "mkdocs.base.yml"
        assert {"nav", "plugins", "docs_dir", "site_dir"} <= set(config), config_file
        assert "markdown_extensions" not in config, f"{config_file}: would be appended twice"


def test_the_reference_has_a_page_per_part():
    pages = sorted(page.name for page in REFERENCE.glob("*.md"))
    assert "index.md" in pages
    numbered = [page for page in pages if page != "index.md"]
    assert [page[:2] for page in numbered] == [f"{n:02d}" for n in range(1, 18)]


def test_each_reference_page_is_titled_by_its_number():
    for page in REFERENCE.glob("[0-9][0-9]-*.md"):
        title = page.read_text(encoding="utf-8").splitlines()[0]
        assert title.startswith(f"# {int(page.name[:2])}. "), page.name


def test_every_section_cited_in_the_repository_is_a_heading_of_the_reference():
    headings = set().union(*_sections(REFERENCE).values())
    unknown = []
    for path in _tracked_files():
        text = _text(path)
        if text is None:
            continue
        for number, line in _citations(text):
            if number not in headings:
                unknown.append(f"{path.relative_to(ROOT)}:{line}: §{number}")
    assert not unknown, "cited sections that docs/reference lacks:\n" + "\n".join(unknown)


def _citations(text: str) -> list[tuple[str, int]]:
    return [
        (match.group(1), text.count("\n", 0, match.start()) + 1)
        for match in SECTION_CITED.finditer(text)
    ]


def test_the_section_check_finds_citations_with_and_without_a_letter():
    assert [n for n, _ in _citations("see §12.5a, §3 and § 16.4.\n(§13.2)")] == [
        "12.5a",
        "3",
        "16.4",
        "13.2",
    ]


def test_the_chinese_reference_has_the_same_sections_as_the_english_one():
    if not ZH_REFERENCE.exists():
        pytest.skip("docs/zh/reference is written in parallel and not merged yet")
    english, chinese = _sections(REFERENCE), _sections(ZH_REFERENCE)
    assert sorted(chinese) == sorted(english)
    for page, numbers in english.items():
        assert chinese[page] == numbers, (
            f"{page}: only in English {sorted(numbers - chinese[page])}, "
            f"only in Chinese {sorted(chinese[page] - numbers)}"
        )


@dataclass(frozen=True)
class FemsBlock:
    """One ```fems block of the docs, with what its marker asks and the output shown after it."""

    page: str
    line: int
    source: str
    shows_output: bool
    shows_error: bool
    folder: str | None
    shown: str | None

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def _fems_blocks() -> list[FemsBlock]:
    blocks = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        fences = list(FENCE.finditer(text))
        for index, fence in enumerate(fences):
            if fence.group(1) != "fems":
                continue
            before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = MARKER.search(before)
            options = [o.strip() for o in marker.group(1).split(",")] if marker else []
            folder = next((o[3:] for o in options if o.startswith("in=")), None)
            source = fence.group(2)
            included = SNIPPET.match(source)
            if included:
                source = (ROOT / included.group(1)).read_text(encoding="utf-8")
                folder = str(Path(included.group(1)).parent)
            following = fences[index + 1] if index + 1 < len(fences) else None
            shown = following.group(2) if following and following.group(1) == "text" else None
            blocks.append(
                FemsBlock(
                    page=str(page.relative_to(ROOT)),
                    line=text.count("\n", 0, fence.start()) + 1,
                    source=source,
                    shows_output="output" in options,
                    shows_error="error" in options,
                    folder=folder,
                    shown=shown,
                )
            )
    return blocks


BLOCKS = _fems_blocks()


def test_the_docs_have_fems_examples_to_check():
    assert len(BLOCKS) >= 30
    assert sum(block.shows_output for block in BLOCKS) >= 3


def _check(block: FemsBlock, folder: Path) -> tuple[int, str]:
    """`fems2py check example.fems` on the block, in ``folder``: exit status and output."""
    workdir = folder / "example"
    if block.folder:
        shutil.copytree(ROOT / block.folder, workdir)
    else:
        workdir.mkdir()
    (workdir / "example.fems").write_text(block.source, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEMS_")}
    env["COLUMNS"] = "80"
    done = subprocess.run(
        [sys.executable, "-m", "fems2py", "check", "example.fems"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_every_fems_block_of_the_docs_passes_the_check_or_shows_its_output(block, tmp_path):
    returncode, printed = _check(block, tmp_path)
    if block.shows_output:
        assert block.shown is not None, f"{block}: no ```text block after it"
        assert printed == block.shown, f"{block}: the check prints\n{printed}"
        assert returncode == (1 if "error:" in printed else 0), block
    elif block.shows_error:
        assert returncode == 1 and ": error: " in printed, f"{block}: {printed}"
    else:
        assert returncode == 0, f"{block}: {printed}"
        assert printed == "example.fems: ok\n", f"{block}: {printed}"


def test_no_tracked_file_points_outside_the_repository():
    outside = []
    for path in _tracked_files():
        name = str(path.relative_to(ROOT))
        text = _text(path)
        if text is None or name in OUTSIDE_AS_DATA:
            continue
        outside += [
            f"{name}:{text.count(chr(10), 0, m.start()) + 1}" for m in OUTSIDE.finditer(text)
        ]
    assert not outside, "files that refer outside the repository:\n" + "\n".join(outside)


def test_the_site_highlights_fems_blocks_with_the_fem_lexer():
    from pygments.lexers import get_lexer_by_name
    from pygments.token import Error, Keyword, Name, String

    source = (ROOT / "docs" / "tour" / "dinner.fems").read_text(encoding="utf-8")
    tokens = list(get_lexer_by_name("fems").get_tokens(source))
    assert not [value for kind, value in tokens if kind in Error]
    assert "".join(value for _, value in tokens) == source
    kinds = {value: kind for kind, value in tokens if value.strip()}
    assert kinds["action"] in Keyword.Declaration
    assert kinds["@ai"] in Keyword.Type
    assert kinds["@speaker"] in Name.Variable
    assert kinds["[START]"] in Name.Builtin
    assert kinds["[Round]"] in Name.Label
    assert kinds["{friends}"] in String.Interpol


def fill_shown_outputs() -> None:
    """Write what the check prints now into the ```text block after every `<!-- fems: output -->`
    block (after a deliberate change of a diagnostic: review the diff like code)."""
    import tempfile

    for block in reversed(_fems_blocks()):  # from the end, so earlier positions stay valid
        if not block.shows_output or block.shown is None:
            continue
        with tempfile.TemporaryDirectory() as folder:
            _, printed = _check(block, Path(folder))
        if printed == block.shown:
            continue
        page = ROOT / block.page
        text = page.read_text(encoding="utf-8")
        start = sum(len(line) + 1 for line in text.split("\n")[: block.line - 1])
        shown_at = text.index("```text\n", start) + len("```text\n")
        text = text[:shown_at] + printed + text[text.index("```", shown_at) :]
        page.write_text(text, encoding="utf-8")
        print(f"{block}: shown output updated")


if __name__ == "__main__":  # python tests/test_docs.py
    fill_shown_outputs()


def test_the_commands_page_lists_every_command_and_module_option():
    """docs/guide/commands.md is where a newcomer looks an option up: it lacked fems2py debug
    and the module's --debug and --listen."""
    from fems_runtime.options import RUN_OPTIONS

    from fems2py.cli import _argument_parser

    page = (ROOT / "docs" / "guide" / "commands.md").read_text(encoding="utf-8")
    commands = next(
        action.choices for action in _argument_parser()._actions if isinstance(action.choices, dict)
    )
    missing = [f"fems2py {name}" for name in commands if f"`fems2py {name}" not in page]
    missing += [
        option.flag
        for option in RUN_OPTIONS
        if not re.search(rf"`[^`\n]*{option.flag}(?![\w-])", page)
    ]
    assert missing == []
