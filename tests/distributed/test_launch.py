"""What a rank started by ``launch.spawn`` holds before it runs its function (gloo, 2 CPU ranks)."""

from __future__ import annotations

import faulthandler
import gc
import os
import socket

import pytest
import torch.multiprocessing as mp

from modelgraft.models.distributed.launch import spawn


def inherited_heap_is_frozen() -> None:
    # torch and transformers, preloaded by the fork server, make several hundred thousand objects.
    assert gc.get_freeze_count() > 100_000, gc.get_freeze_count()


def test_a_rank_leaves_what_it_inherits_from_the_fork_server_out_of_garbage_collection() -> None:
    spawn(inherited_heap_is_frozen, 2)


def rendezvous_port_is_held_before_the_process_group_exists() -> None:
    # Before any rank hosts a store: the port must already be bound (by the caller), or another process could
    # take it, or another job's ranks reach this one's rendezvous.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(OSError, match="in use"):
        sock.bind(("127.0.0.1", int(os.environ["MASTER_PORT"])))


def test_the_rendezvous_port_is_bound_by_the_caller_before_any_rank_starts() -> None:
    spawn(rendezvous_port_is_held_before_the_process_group_exists, 2)


def rank_1_segfaults() -> None:
    if int(os.environ["RANK"]) == 1:
        faulthandler._sigsegv()


def test_a_rank_killed_by_a_signal_is_reported_with_its_python_stack() -> None:
    with pytest.raises(mp.ProcessExitedException, match=r"(?s)SIGSEGV.*rank_1_segfaults") as exited:
        spawn(rank_1_segfaults, 2)
    assert exited.value.error_index == 1
