"""The model folders are installed as ``modelgraft.models.*``: pytest must not import them by folder name.

pytest collects a folder that holds an ``__init__.py`` as a package and imports that file (to look for
``setup_module``) under the folder's own name, here ``models`` and ``models.<m>``: a second copy of the
package, which would register every model a second time. Collected as plain folders, they are only walked;
the tests under them import what they test through ``modelgraft``.
"""

from __future__ import annotations

import fcntl
import gc
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

INSTALLED_FOLDERS = tuple(Path(__file__).parent / name for name in ("generator", "models", "scaffold"))


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if any(path == folder or folder in path.parents for folder in INSTALLED_FOLDERS):
        return pytest.Dir.from_parent(parent, path=path)
    return None


#: Where the suite's temporary files go when the machine has it: a RAM-backed file system (tmpfs).
RAM_TEMP_ROOT = Path("/dev/shm")
#: Free space the RAM-backed root must have to be used; one run's folders took up to 750 MiB there.
RAM_TEMP_MIN_FREE = 4 * 2**30


def _is_tmpfs(path: Path) -> bool:
    """Whether ``path`` is the mount point of a tmpfs, as /proc/mounts says (Linux only; False elsewhere)."""
    try:
        mounts = Path("/proc/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    return any(fields[1:3] == [str(path), "tmpfs"] for fields in (line.split() for line in mounts))


def _ram_temp_root() -> Path | None:
    """The RAM-backed folder for temporary files, or None where there is none with room, or TMPDIR is set."""
    if os.environ.get("TMPDIR") or not _is_tmpfs(RAM_TEMP_ROOT) or not os.access(RAM_TEMP_ROOT, os.W_OK):
        return None
    stats = os.statvfs(RAM_TEMP_ROOT)
    return RAM_TEMP_ROOT if stats.f_bavail * stats.f_frsize >= RAM_TEMP_MIN_FREE else None


def _use_ram_for_temporary_files() -> None:
    """Temporary files of the suite and of every process it starts go to a tmpfs where the machine has one.

    The template, mutant and packaging tests create thousands of files: clones of this checkout, the
    template clones Copier makes for every copy and update, copies for generated code. On the 2-core
    machines measured, creating a file on the ext4 disk cost about 1 ms of system time, against
    microseconds in RAM: a checkout of this repository took 0.89 s there and 0.05 s on /dev/shm, and
    tests/template went from 189 s to 128 s (docs/performance.md, "Test time"). Set through TMPDIR before
    pytest picks its base temporary folder, so ``tmp_path``, ``tempfile`` in every xdist worker, Copier and
    git all follow. An explicit TMPDIR wins; ``--basetemp`` still decides where ``tmp_path`` goes.
    """
    root = _ram_temp_root()
    if root is None:
        return
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = None  # tempfile caches the folder it chose before this ran


def _cache_bytecode() -> None:
    """Python caches compiled modules (``__pycache__``) for the suite and every interpreter it starts.

    The suite starts a few hundred interpreters: ranks of the multi-process tests, the CLIs, Copier's tasks, the
    scaffolds' own test runs. Each imports this checkout's modules, and where ``PYTHONDONTWRITEBYTECODE`` is set
    (the machines measured set it) each compiled every one of them from source again, the large generated
    modeling files included: a clean clone's run took 6 min 07 s with it set and 5 min 49 s without
    (docs/performance.md, "Test time"). ``__pycache__`` folders are ignored by git, and what the tests compare
    file by file leaves them out.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


#: Allocations between two of Python's youngest garbage collections (Python's default: 700).
GC_YOUNGEST_THRESHOLD = 50_000


def _collect_garbage_less_often() -> None:
    """The suite's Python work (dynamo's tracing, the reader's ``ast`` walks, Copier) allocates objects by the
    million; at Python's default a young collection runs every 700 of them, and each older one walks what the
    young ones kept. Every 50,000, the same tests took 25% less time in tests/engine and tests/upstream and 10% less
    in dynamo-heavy model suites (docs/performance.md, "Test time"). Reference counting still frees what is not in
    a cycle at once; the other two generations keep Python's ratios.
    """
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNGEST_THRESHOLD, middle, oldest)


def pytest_configure(config: pytest.Config) -> None:
    """Temporary files in RAM where the machine has a tmpfs (above), bytecode cached (above), garbage collected
    less often (above), and each xdist worker's share of the cores.

    Under pytest-xdist, each worker (and every process it starts) gets its share of the cores as threads:
    torch's default is a thread per core in every process: two workers on two cores then run four OpenMP
    threads whose idle spinning competes with the other worker's work (measured on 2 cores: 42% less CPU time
    for the same tests at one thread each; docs/performance.md, "Test time"). Set before torch is imported,
    so its thread pool is made at that size; an explicit OMP_NUM_THREADS wins.
    """
    _use_ram_for_temporary_files()
    _cache_bytecode()
    _collect_garbage_less_often()
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        share = max(
            1,
            (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
            // int(workers),
        )
        os.environ.setdefault("OMP_NUM_THREADS", str(share))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules holding a test marked ``heavy`` go first, each module's tests still together and in order.

    pytest-xdist's worksteal hands each worker a contiguous share of the collection and lets an idle worker take
    tests from the end of a busy one's share, never part of a running test: one of the half-minute tests near the
    end of the collection (the template adoption run, the compiled distributed example) kept one core busy after
    the other had run out of tests. Run first, they overlap with the rest of the run.
    """
    heavy = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("heavy")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in heavy)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, transformers, the models, their suites) is left out of garbage collection.

    Those objects live as long as the test process, but each of Python's full collections walks all of them
    again: about 0.14 s a time in a worker, 13 times in a run of models/ alone. Frozen, a collection walks what
    the tests made since (docs/performance.md, "Test time").
    """
    gc.freeze()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Failed tests that assert facts of the pinned transformers (marked ``upstream_facts``) are listed apart.

    After the pin moves, those are expected to fail until their expectations follow upstream; every other
    failure is real breakage. The section says which is which at a glance (docs/following-upstream.md).
    """
    reports = terminalreporter.stats.get("failed", []) + terminalreporter.stats.get("error", [])
    facts = sorted({report.nodeid for report in reports if "upstream_facts" in getattr(report, "keywords", ())})
    if not facts:
        return
    terminalreporter.write_sep("=", f"{len(facts)} failed test(s) assert facts of the pinned transformers")
    for nodeid in facts:
        terminalreporter.write_line(nodeid)
    terminalreporter.write_line(
        f"{len(reports) - len(facts)} other failure(s) are behaviour. The ones above move with upstream: after a "
        "pin bump, update what they expect from the new version's source."
    )


@pytest.fixture(scope="session")
def built_once(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Callable[[Path], None]], Path]:
    """``built_once(name, build)``: the folder ``build`` fills, built once per test run and shared by its workers.

    For expensive, read-only things several modules or both xdist workers need (a wheel and its environment,
    a scaffold copy): worksteal splits a module's tests across workers, and each worker would otherwise build
    its own module-scoped copy, on a run that is CPU-bound (docs/performance.md, "Test time"). The first
    worker to ask builds under a lock while the other waits; a build that failed is started afresh.
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's base is a folder of the run's own base
        root = root.parent

    def build_once(name: str, build: Callable[[Path], None]) -> Path:
        target = root / name
        with open(root / f"{name}.lock", "w", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (target / ".complete").exists():
                shutil.rmtree(target, ignore_errors=True)
                target.mkdir()
                build(target)
                (target / ".complete").touch()
        return target

    return build_once
