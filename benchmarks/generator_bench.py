"""Generator benchmarks: cold ``generate-all`` over the zoo, ``--check`` on an unchanged tree, and baselines.

What "cold" means here (docs/performance.md says the same):

- a fresh Python process, so nothing is cached in memory (imports, parsed upstream sources, ruff);
- a fresh scratch copy of the repository per run, without any ``generated/`` output, without the
  generator's cache dir (``[tool.patchgen] cache_dir``) and without ``__pycache__`` of the project's
  own code: every config is imported, planned, checked, normalized by ruff, and every file written;
- what stays warm is what a developer's machine has warm anyway: the installed packages' bytecode
  in site-packages and the OS page cache (it cannot be dropped without root).

The check runs in a scratch tree that the cold run just generated, after one unmeasured warm-up
run, so it measures the everyday pre-commit case: bytecode compiled, any generator cache filled.
Both run as ``python -m generator`` from the scratch root, which is what ``patchgen`` / ``generate-all``
run (they are console scripts for ``generator.cli``), but from the scratch copy's sources.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import budgets
from benchmarks.child import REPO_ROOT
from benchmarks.measure import ProcessSample, measure_process, quiet_env
from benchmarks.report import FAILED, INFO, Row, judge_at_most
from benchmarks.stats import Summary, summarize

SECTION = "generator"

GENERATE_ALL = ("-m", "generator", "--all", "--diff")
CHECK = ("-m", "generator", "--check")

#: Never copied into a scratch tree, at any depth: bytecode and tool caches.
_IGNORED_ANYWHERE = ("__pycache__", ".pytest_cache", ".ruff_cache", "*.egg-info")
#: Top-level entries generation does not read: VCS data, environments, build output, docs, benchmarks.
_IGNORED_AT_TOP = {".git", ".venv", "build", "dist", ".benchmarks", "benchmarks", "tests", "docs"}


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


def _settings():
    # Torch-free by design (design.md section 1), so the parent may import it.
    sys.path.insert(0, str(REPO_ROOT))
    from generator.discovery import find_settings

    return find_settings(REPO_ROOT)


def make_cold_tree(dest: Path) -> tuple[Path, int]:
    """Copy the repo to ``dest`` minus outputs and caches; return the root and the number of outputs removed."""
    settings = _settings()
    at_top = set(_IGNORED_AT_TOP)
    if settings.cache_dir is not None and settings.cache_dir.parent == REPO_ROOT:
        at_top.add(settings.cache_dir.name)
    anywhere = shutil.ignore_patterns(*_IGNORED_ANYWHERE)

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = set(anywhere(folder, names))
        return skipped | (at_top & set(names) if Path(folder) == REPO_ROOT else set())

    shutil.copytree(REPO_ROOT, dest, ignore=ignore, symlinks=True)
    removed = 0
    for root in settings.roots:
        scratch_root = dest / root.relative_to(REPO_ROOT)
        for generated in sorted(scratch_root.rglob(settings.output_subdir)):
            if generated.is_dir():
                removed += sum(1 for p in generated.rglob("*") if p.is_file())
                shutil.rmtree(generated)
    return dest, removed


def config_count() -> int:
    """How many configs the zoo has: what ``generate-all`` discovers."""
    from generator.discovery import discover

    return len(discover(_settings()))


def _outputs(tree: Path) -> dict[str, bytes]:
    settings = _settings()
    found: dict[str, bytes] = {}
    for root in settings.roots:
        for path in (tree / root.relative_to(REPO_ROOT)).rglob(f"{settings.output_subdir}/*"):
            if path.is_file() and path.suffix in (".py", ".diff"):
                found[path.relative_to(tree).as_posix()] = path.read_bytes()
    return found


def _repeat(repeats: int, run_once: Callable[[], ProcessSample]) -> Runs:
    return Runs(tuple(run_once() for _ in range(repeats)))


def _python(*args: str, cwd: Path) -> ProcessSample:
    return measure_process([sys.executable, *args], cwd=cwd, env=quiet_env())


def _cold_generation(repeats: int, workdir: Path) -> tuple[Runs, Path]:
    """Each run gets its own fresh scratch copy; the last one is kept for the check runs."""
    samples = []
    tree = workdir
    for i in range(repeats):
        tree, _ = make_cold_tree(workdir / f"cold-{i}")
        samples.append(_python(*GENERATE_ALL, cwd=tree))
    return Runs(tuple(samples)), tree


def _ratio(runs: Runs, baseline: Runs) -> str:
    return f"{runs.wall.median / baseline.wall.median:.0f}x python startup" if baseline.wall.median > 0 else ""


def _wall_row(name: str, runs: Runs, *, budget_s: float | None = None, notes: str = "") -> Row:
    if runs.failures:
        failed = runs.failures[0]
        return Row(SECTION, name, "error", status=FAILED, notes=f"exit {failed.returncode}: {failed.output_tail[-300:]}")
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
        differing = sorted(name for name in expected.keys() | produced.keys() if expected.get(name) != produced.get(name))
        agreement = (
            f"{len(produced)} files written, byte-identical to the repo's"
            if not differing
            else f"{len(produced)} files written; {len(differing)} differ from the repo's: {', '.join(differing[:3])}"
        )

        _python(*CHECK, cwd=tree)  # warm-up: compiles bytecode, fills any generator cache
        check = _repeat(repeats, lambda: _python(*CHECK, cwd=tree))
        regenerate = _repeat(repeats, lambda: _python(*GENERATE_ALL, cwd=tree))

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
            "patchgen --check, unchanged tree",
            check,
            budget_s=budgets.CHECK_UNCHANGED_S,
            notes=_ratio(check, startup),
        ),
        _rss_row("patchgen --check, unchanged tree", check, budget_mib=budgets.GENERATOR_PEAK_RSS_MIB),
        _wall_row("generate-all, unchanged tree", regenerate, notes=f"{_ratio(regenerate, startup)}; writes nothing"),
        _rss_row("generate-all, unchanged tree", regenerate, budget_mib=budgets.GENERATOR_PEAK_RSS_MIB),
    ]
