"""The cyclic garbage collector, paused while a batch is generated.

Generation allocates a few hundred thousand small objects that stay alive until the end of the run
(the syntax trees of upstream modules, patch sources and their verified edits), so the collector keeps
walking a growing heap and finds almost nothing: it cost a fifth of a run's CPU time. Nearly all
garbage of a run is freed by reference counting anyway; the peak RSS of a zoo-wide run is the same
with the collector paused. Forked workers inherit the paused state.

Turning the collector back on is not enough by itself: every object allocated in the pause is still
in the youngest generation, so the first young collection after it walks the whole run's heap (a
tenth of a one-process run's CPU for the 18-model zoo). What survives the pause is moved to the
oldest generation instead, as if it had survived the collections it skipped: cyclic garbage among it
is still collected, by the next full collection. That move goes through the permanent generation, and
``gc.unfreeze()`` empties all of it, so it is made only when nothing was frozen before: a caller's freeze
(a test process's, a fork server's) outlasts the pause, and the pause's survivors then age as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Collector off inside the block; on again after it, if it was on before, with what the block left
    alive in the oldest generation where nothing was frozen before it."""
    was_enabled = gc.isenabled()
    frozen_before = gc.get_freeze_count()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if not frozen_before:
                # freeze() moves every tracked object out of the generations, unfreeze() into the oldest.
                gc.freeze()
                gc.unfreeze()
            gc.enable()
