"""Fail together: an error on one rank before a collective becomes an error on every rank, never a hang.

A rank that raises leaves the collectives it would have joined; its peers, already inside one, wait for it
until the process group's timeout (minutes; on NCCL a hang with no message at all). Work that can fail on
one rank only (it reads that rank's data: its rows of the batch, its slice of a sequence) therefore runs
inside :func:`fail_together`, which ends with one all-reduce of a failure flag over the group, so every
rank learns whether any failed before anyone enters the next collective:

* the rank that failed raises its own error, unchanged;
* every other rank raises :class:`PeerFailedError`, which names the failed ranks and their errors.

The guard costs one small all-reduce (and, on an accelerator, one host sync to read the flag), plus an
all-gather of the messages when something failed. Checks that read only what every rank shares (the
config, the shapes of the model) fail on every rank alike and need no guard.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

__all__ = ["PeerFailedError", "fail_together"]

#: The device a flag must live on for each backend's collectives.
_BACKEND_DEVICES = {"gloo": "cpu", "nccl": "cuda", "hccl": "npu"}


class PeerFailedError(RuntimeError):
    """Another rank of the group failed before a collective this rank was about to enter."""


def _flag_device(group: ProcessGroup | None) -> torch.device:
    device_type = _BACKEND_DEVICES.get(str(dist.get_backend(group)), "cpu")
    if device_type == "cpu":
        return torch.device("cpu")
    module = getattr(torch, device_type)
    return torch.device(device_type, module.current_device())


def _agree(group: ProcessGroup | None, failure: BaseException | None, what: str) -> None:
    """Every rank raises if any rank failed; the failed rank raises its own error."""
    size = dist.get_world_size(group)
    flags = torch.zeros(size, dtype=torch.int32, device=_flag_device(group))
    if failure is not None:
        flags[dist.get_rank(group)] = 1
    dist.all_reduce(flags, group=group)
    failed = [rank for rank, flag in enumerate(flags.tolist()) if flag]
    if not failed:
        return
    messages: list[str | None] = [None] * size
    mine = None if failure is None else f"{type(failure).__name__}: {failure}"
    dist.all_gather_object(messages, mine, group=group)
    if failure is not None:
        raise failure
    report = "; ".join(f"rank {rank}: {messages[rank]}" for rank in failed)
    ranks = [dist.get_global_rank(group, rank) if group is not None else rank for rank in failed]
    raise PeerFailedError(f"{what}: rank(s) {ranks} failed, so this rank stops too ({report})")


@contextmanager
def fail_together(group: ProcessGroup | None, what: str = "before a collective") -> Iterator[None]:
    """Run the block on every rank of ``group``; if it raises on any rank, raise on every rank.

    Collective: every rank of ``group`` must enter it, whatever its block does, and the block must not
    run collectives itself (a rank that failed early would not join them). Without a distributed run, or
    in a group of one, it only runs the block.
    """
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        yield
        return
    failure: BaseException | None = None
    try:
        yield
    except Exception as error:  # noqa: BLE001 - re-raised below, on this rank and (as PeerFailedError) on its peers
        failure = error
    _agree(group, failure, what)
