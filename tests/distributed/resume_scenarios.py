"""Saving a sharded run with ``save_train_state`` at step k and resuming it, on the same ranks or on fewer.

Module-level scenarios (spawned by name). The data loader of these runs is a function of the position:
the global batch of step ``s`` is ``causal_lm_batch(config, seed=s)``, and each rank takes its rows. Every
run steps an LR scheduler that halves the learning rate each step, so a scheduler restored wrongly
changes the parameters after the next step.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.distributed.tensor import Shard

from modelgraft.models.checkpoint import load_checkpoint
from modelgraft.models.distributed import ParallelState, apply_expert_parallel, apply_fsdp, full_state, parallel_ops
from modelgraft.models.distributed.materialize import materialize
from modelgraft.models.distributed.sharded_load import load_sharded_checkpoint
from modelgraft.models.distributed.train_state import load_train_state, save_train_state
from modelgraft.models.loader import build_model
from modelgraft.models.ops import bind_ops, unbind_ops
from modelgraft.models.testing import causal_lm_batch, seed_everything
from modelgraft.models.testing.moe_suite import _write_sharded, per_expert_state_dict

from .checkpoint_scenarios import PER_EXPERT, recorded_reads
from .scenarios import GROUPED, MODELS, assert_close, config_of, rows_of
from .sharded_scenarios import model_config, sharded_from_meta

NAME = "qwen3_moe"
#: Steps before the save, and steps compared after it.
SAVED_AT, AFTER = 2, 2


Trainer = tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]


def _trainer(model: torch.nn.Module) -> Trainer:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5**step)


def _train(model: torch.nn.Module, state: ParallelState, trainer: Trainer, steps: range) -> list[torch.Tensor]:
    """One AdamW step and one scheduler step per position: the global batch of that position, this rank's
    rows; the losses."""
    optimizer, scheduler = trainer
    losses = []
    for position in steps:
        batch = causal_lm_batch(model_config(NAME), batch_size=8, seed=position)
        out = model(**rows_of(batch, state.rank, state.world_size), output_router_logits=True)
        out.loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(out.loss.detach())
    return losses


def _from_hub(state: ParallelState, path: Path) -> tuple[torch.nn.Module, Trainer]:
    model = sharded_from_meta(NAME, state)
    materialize(model, weights=False)
    load_sharded_checkpoint(model, path)
    return model, _trainer(model)


def _fresh(state: ParallelState) -> tuple[torch.nn.Module, Trainer]:
    """Another model (random init), optimizer and scheduler: everything must come from the saved state."""
    model = sharded_from_meta(NAME, state)
    materialize(model, weights=True)
    return model, _trainer(model)


Run = tuple[list[torch.Tensor], torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]


def _uninterrupted(state: ParallelState, hub: Path, saved: Path) -> Run:
    """Train, save at SAVED_AT, draw from the RNG, train on: the losses after the save, the draw, and the whole
    parameters at the save and at the end (the end tells wrong optimizer moments apart, as the losses of this
    tiny model barely feel its experts)."""
    bind_ops(parallel_ops(state, GROUPED))
    model, trainer = _from_hub(state, hub)
    _train(model, state, trainer, range(SAVED_AT))
    optimizer, scheduler = trainer
    save_train_state(saved, model, optimizer, step=SAVED_AT, data_position=SAVED_AT, scheduler=scheduler)
    draw = torch.rand(3)
    at_save = full_state(model, state)
    losses = _train(model, state, trainer, range(SAVED_AT, SAVED_AT + AFTER))
    return losses, draw, at_save, full_state(model, state)


def _resumed(state: ParallelState, saved: Path, world: int) -> Run:
    bind_ops(parallel_ops(state, GROUPED))
    model, trainer = _fresh(state)
    optimizer, scheduler = trainer
    progress = load_train_state(saved, model, optimizer, scheduler=scheduler)
    assert (progress.step, progress.data_position, progress.world_size) == (SAVED_AT, SAVED_AT, world)
    assert scheduler.last_epoch == SAVED_AT and scheduler.get_last_lr() == [1e-2 * 0.5**SAVED_AT], (
        f"scheduler restored at step {scheduler.last_epoch}, lr {scheduler.get_last_lr()}"
    )
    assert all(group["lr"] == 1e-2 * 0.5**SAVED_AT for group in optimizer.param_groups), optimizer.param_groups
    draw = torch.rand(3)
    at_load = full_state(model, state)
    position = progress.data_position
    losses = _train(model, state, trainer, range(position, position + AFTER))
    return losses, draw, at_load, full_state(model, state)


def _same_params(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], what: str, exact: bool) -> None:
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        if exact:
            assert torch.equal(got[name], tensor), f"{what}: {name} differs"
        else:
            assert_close(got[name], tensor, f"{what}: {name}")


def _resumes_bitwise(state: ParallelState, uninterrupted: Run, saved: Path) -> None:
    """A fresh model on the same ranks, loaded from ``saved``: draws, parameters and losses bitwise."""
    expected, expected_draw, at_save, expected_end = uninterrupted
    got, draw, at_load, end = _resumed(state, saved, state.world_size)
    assert torch.equal(draw, expected_draw), "the RNG state was not restored"
    _same_params(at_load, at_save, "parameters loaded", exact=True)
    _same_params(end, expected_end, f"parameters after {AFTER} more steps", exact=True)
    for step, (loss, reference) in enumerate(zip(got, expected, strict=True), start=SAVED_AT):
        assert torch.equal(loss, reference), (
            f"loss of step {step}: resumed {loss.item()}, uninterrupted {reference.item()}"
        )


def resume_on_the_same_ranks(hub: Path, saved: Path) -> None:
    """EP=2 x FSDP on 2 ranks: the resumed run's next losses and RNG draws are the uninterrupted run's, bitwise."""
    state = ParallelState.build(ep=2)
    _resumes_bitwise(state, _uninterrupted(state, hub, saved), saved)
    unbind_ops()


def save_on_four_ranks(hub: Path, saved: Path, record: Path) -> None:
    """HSDP (2 replicas x 2 shards) with ep 2 x ep_replicate 2: trains, saves, trains on, and resumes bitwise
    on the same 4 ranks; rank 0 records the losses, every rank its draw, for the resume on 2 ranks."""
    state = ParallelState.build(ep=2, replicate=2)
    uninterrupted = _uninterrupted(state, hub, saved)
    losses, draw, at_save, end = uninterrupted
    _resumes_bitwise(state, uninterrupted, saved)
    draws = [None] * state.world_size
    torch.distributed.all_gather_object(draws, draw.tolist())
    if state.rank == 0:
        record.write_text(json.dumps({"losses": [loss.item() for loss in losses], "draws": draws}))
        torch.save({"at_save": at_save, "end": end}, record.with_suffix(".pt"))
    unbind_ops()


def resume_on_two_ranks(saved: Path, record: Path) -> None:
    """The 4-rank run resumed on 2 ranks (each holds twice the experts and rows): the same next losses."""
    state = ParallelState.build(ep=2)
    expected = json.loads(record.read_text())
    params = torch.load(record.with_suffix(".pt"))
    losses, draw, at_load, end = _resumed(state, saved, 4)
    assert draw.tolist() == expected["draws"][state.rank], "rank r continues saved rank r's random streams"
    _same_params(at_load, params["at_save"], "parameters loaded on 2 ranks", exact=True)
    _same_params(end, params["end"], f"parameters after {AFTER} more steps on 2 ranks", exact=False)
    for step, (loss, reference) in enumerate(zip(losses, expected["losses"], strict=True), start=SAVED_AT):
        assert_close(loss, torch.tensor(reference), f"loss of step {step} resumed on 2 of 4 ranks")
    unbind_ops()


# -- experts FSDP-sharded on their rows (dim 1) -----------------------------------------------------------------
#: 6 experts over ep 2: 3 local experts, which do not divide by ep_replicate 2, so FSDP shards their rows.
ROW_SHARDED = {"num_experts": 6}


def _row_sharded_model(state: ParallelState, weights: bool) -> torch.nn.Module:
    model = build_model(config_of(NAME, **ROW_SHARDED), architecture=MODELS[NAME][1], device="meta")
    apply_expert_parallel(model, state)
    apply_fsdp(model, state)
    return materialize(model, weights=weights)


def write_row_sharded_hub(folder: Path) -> Path:
    seed_everything(0)
    model = build_model(config_of(NAME, **ROW_SHARDED), architecture=MODELS[NAME][1])
    _write_sharded(per_expert_state_dict(model.state_dict()), folder)
    return folder


def experts_sharded_on_rows_load_and_resume(hub: Path, saved: Path) -> None:
    """4 ranks, ep 2 x ep_replicate 2, experts FSDP-sharded on dim 1: the hub checkpoint loads each rank's
    part (per-expert keys of its ep rank's experts only), and a save / resume gives the same parameters,
    next loss and parameters after it, bitwise."""
    state = ParallelState.build(ep=2)
    seed_everything(1)
    reference = build_model(config_of(NAME, **ROW_SHARDED), architecture=MODELS[NAME][1])
    load_checkpoint(reference, hub)

    model = _row_sharded_model(state, weights=False)
    gate_up = model.model.layers[0].mlp.experts.gate_up_proj
    assert gate_up.placements[-1] == Shard(1), f"experts not sharded on their rows: {gate_up.placements}"
    with recorded_reads() as reads:
        load_sharded_checkpoint(model, hub)
    mine = range(state.ep_rank * 3, state.ep_rank * 3 + 3)
    read = {int(m[1]) for key in reads.whole if (m := PER_EXPERT.search(key))}
    assert read == set(mine), f"read experts {sorted(read)}, ep rank {state.ep_rank} holds {mine}"
    loaded = full_state(model, state)
    for key, param in reference.named_parameters():
        assert torch.equal(loaded[key], param.detach()), f"{key} differs after loading"

    bind_ops(parallel_ops(state, GROUPED))
    trainer = _trainer(model)
    _train(model, state, trainer, range(1))
    save_train_state(saved, model, trainer[0], step=1, data_position=1, scheduler=trainer[1])
    at_save = full_state(model, state)
    (expected,) = _train(model, state, trainer, range(1, 2))
    expected_end = full_state(model, state)

    fresh = _row_sharded_model(state, weights=True)
    fresh_trainer = _trainer(fresh)
    progress = load_train_state(saved, fresh, fresh_trainer[0], scheduler=fresh_trainer[1])
    assert progress.step == 1
    _same_params(full_state(fresh, state), at_save, "parameters loaded", exact=True)
    (loss,) = _train(fresh, state, fresh_trainer, range(1, 2))
    assert torch.equal(loss, expected), f"resumed {loss.item()}, uninterrupted {expected.item()}"
    _same_params(full_state(fresh, state), expected_end, "parameters after the next step", exact=True)
    unbind_ops()
