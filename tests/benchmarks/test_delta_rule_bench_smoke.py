"""``python -m benchmarks.delta_rule_bench --smoke`` runs both sides at toy lengths and renders one row per length.

No timing is asserted (toy sizes on a shared machine): this proves the script works against the current kernel
and upstream's function.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_smoke_run_renders_a_row_per_length() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.delta_rule_bench", "--smoke"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for length in (128,):
        assert f"| delta_rule | T={length}: chunked_delta / upstream, forward + backward time |" in proc.stdout
