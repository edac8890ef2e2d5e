"""Running a benchmark step in a child process and getting its result back as JSON.

Children keep the parent free of torch (the generator figures must not pay for it) and give every
peak-memory measurement a process of its own. A child prints exactly one ``RESULT_MARKER`` line;
anything else it prints (warnings, progress) is ignored unless the child fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.measure import quiet_env

RESULT_MARKER = "BENCHMARK-RESULT "
REPO_ROOT = Path(__file__).resolve().parent.parent


class ChildError(RuntimeError):
    """A child process failed; the message carries the tail of its output."""


def emit_result(result: Mapping[str, Any]) -> None:
    """Called by a child: hand ``result`` to the parent."""
    print(RESULT_MARKER + json.dumps(result), flush=True)


def run_child(module: str, args: Sequence[str], *, extra_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``python -m module args`` from the repo root and return the dict it emitted."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        env=quiet_env(**dict(extra_env or {})),
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if proc.returncode != 0 or not lines:
        output = (proc.stdout + proc.stderr).strip()[-3000:]
        raise ChildError(f"`python -m {module} {' '.join(args)}` exited {proc.returncode}:\n{output}")
    return json.loads(lines[-1][len(RESULT_MARKER) :])
