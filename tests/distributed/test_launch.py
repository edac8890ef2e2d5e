"""What a rank started by ``launch.spawn`` holds before it runs its function (gloo, 2 CPU ranks)."""

from __future__ import annotations

import gc

from modelgraft.models.distributed.launch import spawn


def inherited_heap_is_frozen() -> None:
    # torch and transformers, preloaded by the fork server, make several hundred thousand objects.
    assert gc.get_freeze_count() > 100_000, gc.get_freeze_count()


def test_a_rank_leaves_what_it_inherits_from_the_fork_server_out_of_garbage_collection() -> None:
    spawn(inherited_heap_is_frozen, 2)
