"""Whole-process wall time and peak RSS of one command, each run inside its own tiny wrapper process.

Why a wrapper: ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` is a high-water mark over every child a
process has ever waited for, so several runs measured from one parent would all report the largest
peak so far. A fresh wrapper per run waits for exactly one command, so its ``RUSAGE_CHILDREN`` is
that run's peak. The figure is the largest single process of the command's tree (the command itself,
a forked worker or a ``ruff`` subprocess), not a sum over processes that run at the same time.

Wall time is taken by the wrapper around spawn-to-exit of the command, so interpreter start-up,
imports and teardown are included, as a user at a prompt would experience them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Runs argv[1:], then reports its own wall clock and RUSAGE_CHILDREN as one JSON object on stdout.
_WRAPPER = r"""
import json, resource, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
tail = proc.stdout.decode("utf-8", "replace")[-2000:]
json.dump({"wall_s": wall, "maxrss": usage.ru_maxrss, "returncode": proc.returncode, "tail": tail}, sys.stdout)
"""

MIB = 1024 * 1024


@dataclass(frozen=True)
class ProcessSample:
    """One run of one command."""

    wall_s: float
    peak_rss_mib: float
    returncode: int
    output_tail: str


def _maxrss_to_mib(maxrss: int) -> float:
    # Linux reports KiB, macOS bytes.
    return maxrss / MIB if sys.platform == "darwin" else maxrss / 1024


def measure_process(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None) -> ProcessSample:
    """Run ``argv`` once in a fresh wrapper and return its wall time and peak RSS."""
    wrapper = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *argv],
        cwd=cwd,
        env=dict(env) if env is not None else None,
        capture_output=True,
        text=True,
        check=False,
    )
    if wrapper.returncode != 0:
        raise RuntimeError(f"measurement wrapper failed: {wrapper.stderr.strip()[-2000:]}")
    data = json.loads(wrapper.stdout)
    return ProcessSample(
        wall_s=data["wall_s"],
        peak_rss_mib=_maxrss_to_mib(data["maxrss"]),
        returncode=data["returncode"],
        output_tail=data["tail"],
    )


def quiet_env(**extra: str) -> dict[str, str]:
    """The caller's environment, made non-interactive (no progress spinners) plus ``extra``.

    ``PYTHONDONTWRITEBYTECODE`` is dropped: whether bytecode gets cached is part of what "cold" and
    "warm" mean, so a developer's shell setting must not decide it.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update({"CI": "1", "PYTHONUNBUFFERED": "1", **extra})
    return env
