"""Generator benchmarks: cold ``generate-all`` over the zoo, ``--check`` on an unchanged tree, and baselines.

What "cold" means here (docs/performance.md says the same):

- a fresh Python process, so nothing is cached in memory (imports, parsed upstream sources, ruff);
- a fresh scratch clone of the working tree per run (the files ``git ls-files`` lists, tracked or
  untracked but not ignored) without any ``generated/`` output; git-ignored files stay behind, so
  there is no generator cache (``[tool.patchgen] cache_dir``) and no bytecode of the project's own
  code: every config is imported, planned, checked, normalized by ruff, and every file written;
- what stays warm is what a developer's machine has warm anyway: the installed packages' bytecode
  in site-packages and the OS page cache (it cannot be dropped without root).

``--check`` on an unchanged tree is measured twice, in a scratch tree the cold run just generated:

- warm: after one unmeasured warm-up run, so bytecode is compiled and the check cache
  (``[tool.patchgen] cache_dir``) is filled: the everyday pre-commit case;
- fresh clone: each run in a new copy of that tree without the cache and without bytecode, as CI
  sees a checkout; the check then has to regenerate everything in memory to compare.
Every command runs as ``python -m modelgraft.generator`` from the scratch root, which is what ``patchgen`` /
``generate-all`` run (they are console scripts for ``modelgraft.generator.cli``), but from the scratch copy's
sources: the editable install maps ``modelgraft.*`` onto the repository's folders (and their bytecode), so
each scratch tree gets a ``modelgraft`` folder of its own, linked to its copies, first on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks import budgets
from benchmarks.child import REPO_ROOT
from benchmarks.measure import ProcessSample, measure_process, quiet_env
from benchmarks.report import FAILED, INFO, Row, judge_at_most
from benchmarks.stats import Summary, summarize

if TYPE_CHECKING:
    from modelgraft.generator.discovery import Settings

SECTION = "generator"

GENERATE_ALL = ("-m", "modelgraft.generator", "--all", "--diff")
CHECK = ("-m", "modelgraft.generator", "--check")

#: Never copied into a scratch tree, at any depth: bytecode and tool caches (all git-ignored).
_IGNORED_ANYWHERE = ("__pycache__", ".pytest_cache", ".ruff_cache", "*.egg-info", ".git", ".venv")
#: The folders the installed package maps into the ``modelgraft`` namespace (setup.py).
_NAMESPACE_FOLDERS = ("generator", "models", "scaffold")


@dataclass(frozen=True)
class Runs:
    """Repeated samples of one command."""

    samples: tuple[ProcessSample, ...]

    @property
    def wall(self) -> Summary:
        return summarize([s.wall_s for s in self.samples])

    @property
    def rss(self) -> Summary:
        return summarize([s.peak_rss_mib for s in self.samples])

    @property
    def failures(self) -> list[ProcessSample]:
        return [s for s in self.samples if s.returncode != 0]


@lru_cache(maxsize=1)
def _settings() -> Settings:
    # Torch-free by design (docs/design.md, "Two halves that never import each other"), so the parent may import it.
    from modelgraft.generator.discovery import find_settings

    return find_settings(REPO_ROOT)


def _checkout_files() -> list[Path] | None:
    """What a clone of the working tree holds: tracked and untracked files git does not ignore."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO_ROOT,
            capture_output=True,
            check=False,
        )
    except OSError:
        return None
    if listing.returncode != 0:
        return None
    return [REPO_ROOT / name for name in listing.stdout.decode().split("\0") if name]


def _copy_tree(source: Path, dest: Path, *, extra_ignored: tuple[str, ...] = ()) -> None:
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(*_IGNORED_ANYWHERE, *extra_ignored), symlinks=True)


def make_cold_tree(dest: Path) -> tuple[Path, int]:
    """A clone of the working tree at ``dest`` without generated outputs; returns it and how many were left out.

    Files come from ``git ls-files`` (so caches, bytecode and other ignored files stay behind); without
    git, the whole tree is copied minus bytecode, tool caches and the generator's cache dir.
    """
    settings = _settings()
    outputs = {path.resolve() for path in _output_paths(REPO_ROOT)}
    files = _checkout_files()
    if files is None:
        cache = (settings.cache_dir.name,) if settings.cache_dir is not None else ()
        _copy_tree(REPO_ROOT, dest, extra_ignored=cache)
        for path in _output_paths(dest):
            path.unlink()
        return dest, len(outputs)
    for path in files:
        if not path.is_file() or path.resolve() in outputs:
            continue
        target = dest / path.relative_to(REPO_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return dest, len(outputs)


def _output_paths(tree: Path) -> list[Path]:
    """Every generated file under the discovery roots of ``tree``."""
    settings = _settings()
    found = []
    for root in settings.roots:
        found += [p for p in (tree / root.relative_to(REPO_ROOT)).rglob(f"{settings.output_subdir}/*") if p.is_file()]
    return sorted(found)


def config_count() -> int:
    """How many configs the zoo has: what ``generate-all`` discovers."""
    from modelgraft.generator.discovery import discover

    return len(discover(_settings()))


def _outputs(tree: Path) -> dict[str, bytes]:
    return {
        p.relative_to(tree).as_posix(): p.read_bytes() for p in _output_paths(tree) if p.suffix in (".py", ".diff")
    }


def _repeat(repeats: int, run_once: Callable[[], ProcessSample]) -> Runs:
    return Runs(tuple(run_once() for _ in range(repeats)))


def _python(*args: str, cwd: Path) -> ProcessSample:
    return measure_process([sys.executable, *args], cwd=cwd, env=quiet_env())


def _in_tree(*args: str, tree: Path) -> ProcessSample:
    """``python args`` in ``tree``, importing ``modelgraft`` from the tree's own copies."""
    namespace_root = tree.parent / f"{tree.name}-import"
    if not namespace_root.is_dir():
        (namespace_root / "modelgraft").mkdir(parents=True)
        for folder in _NAMESPACE_FOLDERS:
            (namespace_root / "modelgraft" / folder).symlink_to(tree / folder, target_is_directory=True)
    path = os.pathsep.join(p for p in (str(namespace_root), os.environ.get("PYTHONPATH", "")) if p)
    return measure_process([sys.executable, *args], cwd=tree, env=quiet_env(PYTHONPATH=path))


def _fresh_clone(tree: Path, dest: Path) -> Path:
    """``tree`` as a checkout would have it: outputs present, no generator cache, no bytecode."""
    settings = _settings()
    _copy_tree(tree, dest, extra_ignored=(settings.cache_dir.name,) if settings.cache_dir is not None else ())
    return dest


def _cold_generation(repeats: int, workdir: Path) -> tuple[Runs, Path]:
    """Each run gets its own fresh scratch copy; the last one is kept for the check runs."""
    samples = []
    tree = workdir
    for i in range(repeats):
        tree, _ = make_cold_tree(workdir / f"cold-{i}")
        samples.append(_in_tree(*GENERATE_ALL, tree=tree))
    return Runs(tuple(samples)), tree


def _ratio(runs: Runs, baseline: Runs) -> str:
    return f"{runs.wall.median / baseline.wall.median:.0f}x python startup" if baseline.wall.median > 0 else ""


def _wall_row(name: str, runs: Runs, *, budget_s: float | None = None, notes: str = "") -> Row:
    if runs.failures:
        failed = runs.failures[0]
        return Row(
            SECTION, name, "error", status=FAILED, notes=f"exit {failed.returncode}: {failed.output_tail[-300:]}"
        )
    wall = runs.wall
    status = judge_at_most(wall.median, budget_s) if budget_s is not None else INFO
    budget = f"< {budget_s:g} s" if budget_s is not None else ""
    return Row(SECTION, f"{name}: wall", f"{wall.median:.3f} s", wall.spread(), budget, status, notes)


def _rss_row(name: str, runs: Runs, *, budget_mib: float | None = None) -> Row:
    rss = runs.rss
    # A memory budget must hold on every run, so the worst run is judged.
    status = judge_at_most(rss.high, budget_mib) if budget_mib is not None else INFO
    budget = f"< {budget_mib:g} MiB (worst run)" if budget_mib is not None else ""
    return Row(SECTION, f"{name}: peak RSS", f"{rss.median:.0f} MiB", rss.spread("{:.0f}"), budget, status)


def bench_generator(repeats: int) -> list[Row]:
    """Every generator row of the table; each figure is the median of ``repeats`` fresh processes."""
    with tempfile.TemporaryDirectory(prefix="modelgraft-bench-") as tmp:
        workdir = Path(tmp)
        startup = _repeat(repeats, lambda: _python("-c", "pass", cwd=workdir))
        heavy = _repeat(repeats, lambda: _python("-c", "import torch, transformers", cwd=workdir))
        cold, tree = _cold_generation(repeats, workdir)

        expected = _outputs(REPO_ROOT)
        produced = _outputs(tree)
        differing = sorted(
            name for name in expected.keys() | produced.keys() if expected.get(name) != produced.get(name)
        )
        agreement = (
            f"{len(produced)} files written, byte-identical to the repo's"
            if not differing
            else f"{len(produced)} files written; {len(differing)} differ from the repo's: {', '.join(differing[:3])}"
        )

        clones = iter(range(repeats))
        check_clone = _repeat(
            repeats, lambda: _in_tree(*CHECK, tree=_fresh_clone(tree, workdir / f"clone-{next(clones)}"))
        )
        _in_tree(*CHECK, tree=tree)  # warm-up: compiles bytecode, fills the check cache
        check = _repeat(repeats, lambda: _in_tree(*CHECK, tree=tree))
        regenerate = _repeat(repeats, lambda: _in_tree(*GENERATE_ALL, tree=tree))

    configs = config_count()
    return [
        _wall_row("python -c pass (baseline)", startup),
        _rss_row("python -c pass (baseline)", startup),
        _wall_row("import torch, transformers (context)", heavy, notes=_ratio(heavy, startup)),
        _rss_row("import torch, transformers (context)", heavy),
        _wall_row(
            "generate-all, cold",
            cold,
            budget_s=budgets.COLD_GENERATION_S,
            notes=f"{_ratio(cold, startup)}; {configs} configs; {agreement}",
        ),
        _rss_row("generate-all, cold", cold, budget_mib=budgets.GENERATOR_PEAK_RSS_MIB),
        _wall_row(
            "patchgen --check, unchanged tree, warm",
            check,
            budget_s=budgets.CHECK_UNCHANGED_S,
            notes=f"{_ratio(check, startup)}; check cache and bytecode present",
        ),
        _rss_row("patchgen --check, unchanged tree, warm", check, budget_mib=budgets.GENERATOR_PEAK_RSS_MIB),
        _wall_row(
            "patchgen --check, unchanged tree, fresh clone",
            check_clone,
            # Without a check cache every config is generated in memory: a cold generation's work.
            budget_s=budgets.COLD_GENERATION_S,
            notes=f"{_ratio(check_clone, startup)}; no check cache, no bytecode (CI checkout)",
        ),
        _rss_row(
            "patchgen --check, unchanged tree, fresh clone", check_clone, budget_mib=budgets.GENERATOR_PEAK_RSS_MIB
        ),
        _wall_row("generate-all, unchanged tree", regenerate, notes=f"{_ratio(regenerate, startup)}; writes nothing"),
        _rss_row("generate-all, unchanged tree", regenerate, budget_mib=budgets.GENERATOR_PEAK_RSS_MIB),
    ]
