"""Every ```python block of README.md and of every docs/*.md page runs as written, each in its own process (as a
fresh interpreter would: the `kitm_python` fixture) and fresh working directory (test ids name the file and the
block's line: ``docs/library.md:7``).

A block runs with the repository on PYTHONPATH, HF_HUB_OFFLINE=1 and KERAS_BACKEND=tensorflow, in an empty
temporary folder holding what the pages assume of a checkout (`launch/`, linked). A marker comment on the line
before a block (invisible on GitHub) says what else it needs:

- ``<!-- snippet: skip (reason) -->``: not run; the reason is required and shown in the skip list
  (``pytest -rs``).
- ``<!-- snippet: needs <state> (<command>) -->``: run after the state the pages' command makes. The
  command is run once per session in a quick form (the PREREQUISITES below: a small world, one epoch) and its
  outputs (`runs/`, `tfrecords/`) are linked into the block's folder.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shlex

import pytest

pytestmark = pytest.mark.slow

# The snippets parametrize the test at import, before any fixture: the root from this file's place.
ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# Every page whose python blocks run: the README and the docs/ pages.
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

# State name -> (the documented command the marker must name, the flags added to make it quick).
PREREQUISITES = {
    "demo run": ("python -m kitm.launch --flagfile=launch/demo.flags",
                 ["--synthetic_num_scenes=120", "--epochs=1", "--eval_every_epochs=1", "--batch_size=32",
                  "--projector_samples=0", "--progress=false"]),
}
# What the pages' commands assume of the working directory: a checkout's folders, linked.
CHECKOUT_LINKS = ("launch",)
# Outputs of a prerequisite linked into each block's folder.
PREREQUISITE_OUTPUTS = ("runs", "tfrecords")

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_MARKER = re.compile(r"<!--\s*snippet:\s*(.*?)\s*-->")
_DIRECTIVE = re.compile(r"(skip|needs)\s+(?:(?P<state>[^(]*?)\s*)?\((?P<detail>.+)\)\s*$")


@dataclasses.dataclass(frozen=True)
class Snippet:
    line: int  # 1-based line of the opening fence
    code: str
    page: str = "README.md"  # the file, relative to the repository root
    skip: str | None = None  # the reason
    needs: str | None = None  # a PREREQUISITES key
    needs_command: str | None = None


def readme_snippets(text: str, page: str = "README.md") -> list[Snippet]:
    """The python blocks of `text` (the file `page`), each with the marker on the line before its fence."""
    snippets = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip().rsplit("\n", 1)[-1]
        marker = _MARKER.fullmatch(before.strip())
        if marker is None:
            snippets.append(Snippet(line, match.group(1), page=page))
            continue
        directive = _DIRECTIVE.fullmatch(marker.group(1))
        assert directive, f"{page} line {line - 1}: unreadable snippet marker {before.strip()!r}"
        if directive.group(1) == "skip":
            snippets.append(Snippet(line, match.group(1), page=page, skip=directive.group("detail").strip()))
        else:
            snippets.append(Snippet(line, match.group(1), page=page, needs=(directive.group("state") or "").strip(),
                                    needs_command=directive.group("detail").strip()))
    return snippets


def _relative(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


SNIPPETS = [snippet for page in PAGES
            for snippet in readme_snippets(page.read_text(encoding="utf-8"), _relative(page))]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", KERAS_BACKEND="tensorflow",
                TF_CPP_MIN_LOG_LEVEL="2")


def _link_checkout(folder: pathlib.Path) -> None:
    for name in CHECKOUT_LINKS:
        (folder / name).symlink_to(ROOT / name, target_is_directory=True)


@pytest.fixture(scope="module")
def prerequisite(tmp_path_factory, kitm_python):
    """State name -> the folder where its documented command ran (once per module, on first use)."""
    made: dict[str, pathlib.Path] = {}

    def get(name: str, command: str) -> pathlib.Path:
        assert name in PREREQUISITES, f"unknown snippet prerequisite {name!r}; known: {sorted(PREREQUISITES)}"
        readme_command, quick_flags = PREREQUISITES[name]
        assert command == readme_command, f"the marker names {command!r}; the harness knows {readme_command!r}"
        if name not in made:
            folder = tmp_path_factory.mktemp("prerequisite")
            _link_checkout(folder)
            argv = shlex.split(readme_command)
            assert argv[0] == "python"
            result = kitm_python([*argv[1:], *quick_flags], cwd=folder, env=_env())
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
            made[name] = folder
        return made[name]

    return get


def test_the_pages_have_python_snippets_and_every_skip_says_why():
    assert len(SNIPPETS) >= 2
    skipped = [(snippet.page, snippet.line, snippet.skip) for snippet in SNIPPETS if snippet.skip is not None]
    assert all(reason for _, _, reason in skipped)
    print("python snippets skipped:", *(f"{page} line {line}: {reason}" for page, line, reason in skipped),
          sep="\n  ")


@pytest.mark.parametrize("page", PAGES, ids=_relative)
def test_every_marker_sits_before_a_python_block(page):
    # A marker must sit right before a python block, else it silently marks nothing.
    text = page.read_text(encoding="utf-8")
    name = _relative(page)
    marked = {snippet.line - 1 for snippet in SNIPPETS if snippet.page == name and (snippet.skip or snippet.needs)}
    for match in _MARKER.finditer(text):
        marker_line = text.count("\n", 0, match.start()) + 1
        following = text[match.end():].lstrip("\n").split("\n", 1)[0]
        assert following.startswith("```python"), f"{name} line {marker_line}: a marker not before a python block"
    assert len(marked) == sum(1 for _ in _MARKER.finditer(text))


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"{snippet.page}:{snippet.line}" for snippet in SNIPPETS])
def test_readme_python_snippet_runs(snippet, prerequisite, tmp_path, kitm_python):
    where = f"{snippet.page} line {snippet.line}"
    if snippet.skip is not None:
        pytest.skip(f"{where}: {snippet.skip}")
    work = tmp_path / "work"
    work.mkdir()
    _link_checkout(work)
    if snippet.needs is not None:
        state = prerequisite(snippet.needs, snippet.needs_command)
        for name in PREREQUISITE_OUTPUTS:
            if (state / name).exists():
                (work / name).symlink_to(state / name, target_is_directory=True)
    result = kitm_python(["-c", snippet.code], cwd=work, env=_env(), timeout=300)
    assert result.returncode == 0, (f"{where} failed:\n{snippet.code}\n"
                                    f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
