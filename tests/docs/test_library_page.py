"""docs/library.md runs as written: its Python blocks as one script, its files and commands, in a fresh folder.

The page's convention, one HTML comment on the line before a fenced block:
- none, before a ```python block: the block is part of the page's script (every such block, in order);
- ``<!-- file: NAME -->``: the block is written to the file NAME before anything runs;
- ``<!-- run -->``, before a ```bash block: its commands run after the script, in the same folder;
- ``<!-- not run: REASON -->``: the block is shown only, and says why.
Any other block is an error, so no example escapes the tests.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "library.md"
_BLOCK = re.compile(
    r"(?:^<!--\s*(?P<marker>[^>]*?)\s*-->\n)?^```(?P<language>\w*)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL
)


@dataclass(frozen=True)
class Block:
    line: int
    language: str
    marker: str
    code: str


def blocks() -> list[Block]:
    text = PAGE.read_text(encoding="utf-8")
    return [
        Block(text.count("\n", 0, m.start()) + 1, m["language"], m["marker"] or "", m["code"])
        for m in _BLOCK.finditer(text)
    ]


def _kind(block: Block) -> str:
    if not block.marker and block.language == "python":
        return "script"
    if block.marker.startswith("file:") and block.language == "python":
        return "file"
    if block.marker == "run" and block.language == "bash":
        return "run"
    if block.marker.startswith("not run:") and block.marker[len("not run:") :].strip():
        return "shown"
    raise AssertionError(f"docs/library.md:{block.line}: a ```{block.language} block marked {block.marker!r}")


@pytest.fixture(scope="module")
def page_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh folder with the page's files and its script, run once for the module."""
    folder = tmp_path_factory.mktemp("library-page")
    script = []
    for block in blocks():
        kind = _kind(block)
        if kind == "script":
            script.append(block.code)
        elif kind == "file":
            (folder / block.marker[len("file:") :].strip()).write_text(block.code, encoding="utf-8")
    (folder / "page_script.py").write_text("\n".join(script), encoding="utf-8")
    return folder


def _run(command: list[str], folder: Path) -> subprocess.CompletedProcess[str]:
    """``command`` in ``folder``, with this interpreter's folder first on PATH (``torchrun`` is its own)."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTEST_ADDOPTS"}}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    # Temporary files in the test's folder: torchrun leaves its log folder (torchelastic_*) behind otherwise.
    (temporary := folder / "tmp").mkdir(exist_ok=True)
    env["TMPDIR"] = str(temporary)
    return subprocess.run(command, check=False, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def test_every_block_of_the_page_runs_or_says_why_not() -> None:
    kinds = [_kind(block) for block in blocks()]
    assert kinds.count("shown") == 1, kinds  # the install alone
    assert {"script", "file", "run"} <= set(kinds)


def test_the_pages_python_blocks_run_as_one_script(page_folder: Path) -> None:
    result = _run([sys.executable, "page_script.py"], page_folder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Qwen3Config has no attribute(s) ['hiden_size'] to set" in result.stdout
    assert "checkpoint shape [128, 64], model shape [128, 32]" in result.stdout
    assert "[[1, 4, 4]] [[1, 4, 4]]" in result.stdout
    assert "transformers.models.cohere2_vision.image_processing_cohere2_vision [1, 3, 512, 512]" in result.stdout


@pytest.mark.heavy
def test_the_pages_commands_run(page_folder: Path) -> None:
    for block in blocks():
        if _kind(block) != "run":
            continue
        result = _run(["bash", "-ec", block.code], page_folder)
        assert result.returncode == 0, f"docs/library.md:{block.line}\n{result.stdout}{result.stderr}"
        assert "step 2: loss" in result.stdout
