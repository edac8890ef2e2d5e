"""An error on one rank before a collective reaches every rank as an error, never as a hang (gloo, 2 CPU ranks).

The process group waits minutes for a missing peer; the spawn timeout here is far shorter, so a rank left
waiting fails the test with ``TimeoutError`` instead of passing late.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from transformers import Qwen3Config

from modelgraft.models.distributed import ParallelState, shard_sequence
from modelgraft.models.distributed import ulysses as ulysses_module
from modelgraft.models.distributed.guard import PeerFailedError, fail_together
from modelgraft.models.distributed.launch import spawn
from modelgraft.models.distributed.scope import attach_parallel
from modelgraft.models.loader import build_model
from modelgraft.models.testing import causal_lm_batch, seed_everything, tiny_config

#: Well under the process group's own timeout (minutes): a rank left waiting in a collective fails the test.
TIMEOUT = 90.0


def _group_still_in_step(state: ParallelState) -> None:
    """After a failure every rank can run the next collective together (none is left inside an old one)."""
    value = torch.ones(1)
    dist.all_reduce(value)
    assert value.item() == state.world_size


def error_on_one_rank_is_raised_on_every_rank() -> None:
    state = ParallelState.build(sp=1)  # dp=2: each rank holds its own rows

    # The guard alone: the failing rank raises its own error, its peer a PeerFailedError that names it.
    expected = RuntimeError if state.rank == 1 else PeerFailedError
    message = (
        r"rank 1's rows are bad"
        if state.rank == 1
        else r"a test step: rank\(s\) \[1\] failed, .*rank 1: RuntimeError: rank 1's rows"
    )
    with pytest.raises(expected, match=message), fail_together(dist.group.WORLD, "a test step"):
        if state.rank == 1:
            raise RuntimeError("rank 1's rows are bad")
    _group_still_in_step(state)

    # shard_sequence on rows of one dp rank that it cannot shard (a 4-D mask of the wrong size).
    config = tiny_config(Qwen3Config, use_cache=False)
    batch = causal_lm_batch(config, batch_size=2, seq_len=11)
    if state.rank == 1:
        batch["attention_mask"] = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    expected = ValueError if state.rank == 1 else PeerFailedError
    with pytest.raises(expected, match=r"a 4-D mask must cover the whole sequence"):
        shard_sequence(batch, state)
    _group_still_in_step(state)


def mask_builder_failing_on_one_rank_stops_every_rank() -> None:
    """What a packed document restarting inside one rank's slice used to do (an IndexError on that rank while
    its peer entered attention's all-to-all), played by a mask builder that fails on rank 1 only."""
    state = ParallelState.build(sp=2)
    if state.rank == 1:

        def failing_mask(**kwargs: object) -> None:
            raise IndexError("index 11 is out of bounds for dimension 1 with size 6")

        ulysses_module.sdpa_mask = failing_mask  # captured by the builder this rank registers below
    config = tiny_config(Qwen3Config, use_cache=False, attn_implementation="sdpa")
    seed_everything(0)
    model = attach_parallel(build_model(config, architecture="Qwen3ForCausalLM"), state)
    local = shard_sequence(causal_lm_batch(config, seq_len=11), state)
    expected = IndexError if state.rank == 1 else PeerFailedError
    with pytest.raises(expected, match="index 11 is out of bounds"):
        model(**local)
    _group_still_in_step(state)


def test_an_error_on_one_rank_in_a_guard_or_in_shard_sequence_is_raised_on_every_rank() -> None:
    spawn(error_on_one_rank_is_raised_on_every_rank, 2, timeout=TIMEOUT)


def test_a_ulysses_mask_builder_failing_on_one_rank_stops_every_rank_before_attention() -> None:
    spawn(mask_builder_failing_on_one_rank_stops_every_rank, 2, timeout=TIMEOUT)


def test_the_guard_without_a_process_group_just_runs_the_block() -> None:
    with pytest.raises(KeyError), fail_together(None):
        raise KeyError("alone")
    ran = []
    with fail_together(None):
        ran.append(True)
    assert ran == [True]
