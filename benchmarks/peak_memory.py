"""Peak resident memory of one block of code inside the current process (Linux), for child processes.

torch has no peak-memory counter on CPU, so this uses the kernel's: writing ``5`` to
``/proc/self/clear_refs`` resets the high-water mark ``VmHWM`` to the current RSS, and after the
block ``VmHWM - VmRSS(before)`` is the most memory the block held at once, at page granularity.

Freed memory must go back to the OS for RSS to follow live tensors; glibc raises its mmap threshold
after large frees and then keeps such blocks in the heap. Processes that measure with this module
are therefore started with ``MALLOC_MMAP_THRESHOLD_`` fixed (see ``MEASURE_ENV``), which also turns
that dynamic raise off. Where ``clear_refs`` is unavailable the fallback is the growth of
``ru_maxrss``, which only sees a peak higher than any earlier one: the method is reported with it.
"""

from __future__ import annotations

import gc
import resource
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1024 * 1024

#: Environment for processes that measure peaks: every allocation >= 128 KiB is its own mmap.
MEASURE_ENV: dict[str, str] = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(key: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _maxrss_bytes() -> int:
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024


def _reset_high_water_mark() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


@dataclass
class PeakMemory:
    """Filled in when the ``peak_memory()`` block exits."""

    method: str = ""
    baseline_mib: float = 0.0
    peak_delta_mib: float = field(default=0.0)


@contextmanager
def peak_memory() -> Iterator[PeakMemory]:
    """Measure the peak RSS growth of the block over the RSS at its start."""
    result = PeakMemory()
    gc.collect()
    if _reset_high_water_mark():
        result.method = "VmHWM after clear_refs"
        before = _status_kib("VmRSS") * 1024
        yield result
        after = _status_kib("VmHWM") * 1024
    else:
        result.method = "ru_maxrss growth (lower bound)"
        before = _maxrss_bytes()
        yield result
        after = _maxrss_bytes()
    result.baseline_mib = before / MIB
    result.peak_delta_mib = max(0, after - before) / MIB
