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


#: Whether children are forked from a server that imported torch and transformers once (smoke runs).
_forked_from_preloaded = False


def fork_children_from_a_preloaded_interpreter() -> None:
    """Make every later :func:`run_child` fork from one interpreter that has imported torch and transformers.

    For smoke runs, whose figures mean nothing: there a fresh interpreter costs more than the toy steps it
    runs. A forked child still measures its peak in a process of its own, but without ``MEASURE_ENV``'s
    malloc setting, which glibc reads only when an interpreter starts.
    """
    global _forked_from_preloaded
    _forked_from_preloaded = True


def run_child(module: str, args: Sequence[str], *, extra_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``python -m module args`` from the repo root and return the dict it emitted."""
    env = quiet_env(**dict(extra_env or {}))
    if _forked_from_preloaded:
        from modelgraft.models.testing.preloaded_python import run_module

        proc = run_module(module, *args, cwd=REPO_ROOT, env=env)
    else:
        proc = subprocess.run(
            [sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if proc.returncode != 0 or not lines:
        output = (proc.stdout + proc.stderr).strip()[-3000:]
        raise ChildError(f"`python -m {module} {' '.join(args)}` exited {proc.returncode}:\n{output}")
    return json.loads(lines[-1][len(RESULT_MARKER) :])
