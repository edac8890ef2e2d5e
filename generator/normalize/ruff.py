"""Run the installed ruff (never one from PATH) over a whole batch in two processes.

Files are written under their real target names in a scratch directory, so
generation, dry runs and ``--check`` see exactly the same path-dependent
behaviour and settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from modelgraft.generator.errors import NormalizationError
from modelgraft.generator.installed import installed_version

if TYPE_CHECKING:
    import subprocess

SETTINGS = Path(__file__).resolve().parent.parent / "ruff.toml"


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    row: int
    line: str

    def describe(self) -> str:
        return f"{self.code} line {self.row}: {self.message}: {self.line.strip()}"


@dataclass(frozen=True)
class Normalized:
    text: str
    diagnostics: tuple[Diagnostic, ...]
    # The text after fixing, before formatting: the one diagnostic rows refer to.
    fixed: str = ""


# Facts of the installed ruff package, memoised per process; no run state.
@lru_cache(maxsize=1)
def ruff_binary() -> str:
    try:
        from ruff.__main__ import find_ruff_bin

        return str(find_ruff_bin())
    except (ImportError, FileNotFoundError) as exc:
        raise NormalizationError(f"the ruff package is not usable ({exc}); reinstall the project") from exc


@lru_cache(maxsize=1)
def ruff_version() -> str:
    version = installed_version("ruff")
    if version is None:
        raise NormalizationError("the ruff package is not installed; reinstall the project")
    return version


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    import subprocess  # here, not at the top: the check cache asks this module for ruff_version only

    proc = subprocess.run([ruff_binary(), *args], capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise NormalizationError(f"ruff {' '.join(args[:1])} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def normalize(batch: dict[str, tuple[str, str]]) -> dict[str, Normalized]:
    """``batch``: key -> (file name, text).  Returns key -> fixed + formatted text and leftover diagnostics."""
    import tempfile  # as subprocess in _run

    if not batch:
        return {}
    with tempfile.TemporaryDirectory(prefix="patchgen-") as tmp:
        paths: dict[str, Path] = {}
        for i, (key, (name, text)) in enumerate(sorted(batch.items())):
            path = Path(tmp) / str(i) / name
            path.parent.mkdir()
            path.write_text(text, encoding="utf-8")
            paths[key] = path
        files = [str(p) for p in paths.values()]
        check = _run(
            [
                "check",
                "--config",
                str(SETTINGS),
                "--fix",
                "--exit-zero",
                "--output-format",
                "json",
                "--no-cache",
                *files,
            ]
        )
        try:
            reported = json.loads(check.stdout or "[]")
        except json.JSONDecodeError as exc:
            raise NormalizationError(f"unreadable ruff output: {check.stdout[:200]!r}") from exc
        fixed = {key: path.read_text(encoding="utf-8") for key, path in paths.items()}
        fmt = _run(["format", "--config", str(SETTINGS), "--no-cache", *files])
        if fmt.returncode != 0:
            raise NormalizationError(f"ruff format failed: {fmt.stderr.strip()}")
        by_path: dict[str, list[dict]] = {}
        for item in reported:
            by_path.setdefault(str(Path(item["filename"]).resolve()), []).append(item)
        results = {}
        for key, path in paths.items():
            items = by_path.get(str(path.resolve()), [])
            lines = fixed[key].splitlines()
            diagnostics = tuple(_diagnostic(item, lines) for item in items)
            results[key] = Normalized(path.read_text(encoding="utf-8"), diagnostics, fixed[key])
        return results


def _diagnostic(item: dict, lines: list[str]) -> Diagnostic:
    row = item["location"]["row"]
    line = lines[row - 1] if 0 < row <= len(lines) else ""
    return Diagnostic(item.get("code") or "", item.get("message", ""), row, line)
