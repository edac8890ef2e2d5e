"""The model folders are installed as ``modelgraft.models.*``: pytest must not import them by folder name.

pytest collects a folder that holds an ``__init__.py`` as a package and imports that file (to look for
``setup_module``) under the folder's own name, here ``models`` and ``models.<m>``: a second copy of the
package, which would register every model a second time. Collected as plain folders, they are only walked;
the tests under them import what they test through ``modelgraft``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

INSTALLED_FOLDERS = tuple(Path(__file__).parent / name for name in ("generator", "models", "scaffold"))


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if any(path == folder or folder in path.parents for folder in INSTALLED_FOLDERS):
        return pytest.Dir.from_parent(parent, path=path)
    return None


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker (and every process it starts) gets its share of the cores as threads.

    torch's default is a thread per core in every process: two workers on two cores then run four OpenMP
    threads whose idle spinning competes with the other worker's work (measured on 2 cores: 42% less CPU time
    for the same tests at one thread each; docs/performance.md, "Test time"). Set before torch is imported,
    so its thread pool is made at that size; an explicit OMP_NUM_THREADS wins.
    """
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        share = max(
            1,
            (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
            // int(workers),
        )
        os.environ.setdefault("OMP_NUM_THREADS", str(share))
