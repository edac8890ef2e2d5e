"""Atomic writes: whole files only, with the permissions a plain write would give."""

from __future__ import annotations

import os
from pathlib import Path

from modelgraft.generator.output.write import write_atomic


def test_a_new_file_gets_the_mode_the_umask_allows(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        write_atomic(tmp_path / "new.py", "x = 1\n")
    finally:
        os.umask(previous)
    assert (tmp_path / "new.py").stat().st_mode & 0o777 == 0o644


def test_rewriting_a_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "kept.py"
    path.write_text("x = 1\n")
    path.chmod(0o640)
    write_atomic(path, "x = 2\n")
    assert path.stat().st_mode & 0o777 == 0o640
    assert path.read_text() == "x = 2\n"


def test_a_write_leaves_no_temporary_file_behind(tmp_path: Path) -> None:
    write_atomic(tmp_path / "only.py", "x = 1\n")
    assert [p.name for p in tmp_path.iterdir()] == ["only.py"]
