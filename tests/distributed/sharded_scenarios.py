"""Models built on the meta device, sharded, materialized per rank and loaded from a hub checkpoint.

Every scenario is module-level (the spawn start method imports it by name). Each rank builds the whole
one-process model, loads the same checkpoint into it with ``load_checkpoint``, and compares: parameters
(bitwise), non-persistent buffers (bitwise), the loss, every gradient, the parameters after one AdamW step
and the next loss. ``recorded_reads`` (``safe_open`` wrapped) proves what each rank read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaConfig

from modelgraft.models.checkpoint import CheckpointError, load_checkpoint
from modelgraft.models.converters import ConversionError
from modelgraft.models.distributed import (
    ParallelState,
    apply_expert_parallel,
    apply_fsdp,
    full_state,
    parallel_ops,
)
from modelgraft.models.distributed.guard import PeerFailedError
from modelgraft.models.distributed.materialize import local_parameter_bytes, materialize, non_persistent_buffers
from modelgraft.models.distributed.sharded_load import Placement, load_sharded_checkpoint, placements_of
from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig, bind_ops, bound_ops, unbind_ops
from modelgraft.models.testing import causal_lm_batch, seed_everything, tiny_config
from modelgraft.models.testing.moe_suite import _write_sharded, per_expert_state_dict

from .checkpoint_scenarios import FUSED, PER_EXPERT, Reads, recorded_reads
from .scenarios import GROUPED, MODELS, assert_close, assert_same_grads, config_of, rows_of

#: llama with tied embeddings: the from_pretrained layout then has no lm_head.weight.
LLAMA_OVERRIDES: dict[str, Any] = {"tie_word_embeddings": True}


#: gpt_oss with 8 experts (its tiny config keeps upstream's 128).
GPT_OSS_OVERRIDES: dict[str, Any] = {"num_local_experts": 8, "num_experts_per_tok": 2}


def model_config(name: str) -> Any:
    return config_of(name, **{"llama": LLAMA_OVERRIDES, "gpt_oss": GPT_OSS_OVERRIDES}.get(name, {}))


def whole_model(name: str, seed: int) -> torch.nn.Module:
    seed_everything(seed)
    return build_model(model_config(name), architecture=MODELS[name][1])


def write_hub_checkpoints(folder: Path) -> dict[str, Path]:
    """llama through ``save_pretrained`` (sharded, with an index); qwen3_moe in the hub's per-expert layout."""
    names = ("llama", "llama_renamed", "qwen3_moe", "qwen3_moe_fused", "qwen3_moe_transposed", "gpt_oss")
    paths = {name: folder / name for name in names}
    llama = whole_model("llama", 0)
    llama.save_pretrained(paths["llama"], max_shard_size="40KB")
    renamed = {k.replace(MODEL_NAME, HUB_NAME): v for k, v in llama.state_dict().items() if k != "lm_head.weight"}
    _write_sharded(renamed, paths["llama_renamed"])
    moe = whole_model("qwen3_moe", 0)
    _write_sharded(per_expert_state_dict(moe.state_dict()), paths["qwen3_moe"])
    _write_sharded(moe.state_dict(), paths["qwen3_moe_fused"])  # the fused tensors as the modeling holds them
    transposed = {k: v.transpose(-2, -1) if FUSED.search(k) else v for k, v in moe.state_dict().items()}
    _write_sharded(transposed, paths["qwen3_moe_transposed"])  # [E, H, 2I]: the converter tells it from the config
    _write_sharded(whole_model("gpt_oss", 0).state_dict(), paths["gpt_oss"])  # its bf16 hub layout is the modeling's
    return paths


# -- what a rank read --------------------------------------------------------------------------------------
def _within(index: Any, placement: Placement, rows: tuple[int, int] | None = None) -> bool:
    dims = index if isinstance(index, tuple) else (index,)
    if rows is not None:  # a fused expert tensor: only its experts dim is cut, the converter does the rest
        return len(dims) == 1 and dims[0] == slice(*rows)
    return tuple(dims) == placement.index


def assert_reads_only_own_slices(reads: Reads, placements: dict[str, Placement], rows: tuple[int, int] | None) -> None:
    """Whole reads: entries this rank holds whole, or per-expert keys of its own experts; slices: its own."""
    for key in reads.whole:
        match = PER_EXPERT.search(key)
        if match is not None:
            assert rows is not None and rows[0] <= int(match[1]) < rows[1], (
                f"read expert key {key}, own experts {rows}"
            )
        else:
            assert placements[key].whole, f"{key} was read whole; this rank holds {placements[key].index}"
    for key, index in reads.sliced:
        expert_rows = rows if ".experts." in key else None
        assert _within(index, placements[key], expert_rows), f"{key}: read {index}, own {placements[key].index}"
    fed = {int(m[1]) for key in reads.fed if (m := PER_EXPERT.search(key))}
    assert rows is None or fed <= set(range(*rows)), f"converter fed experts {sorted(fed)}, own {rows}"


def _expert_rows(placements: dict[str, Placement]) -> tuple[int, int] | None:
    rows = {(p.index[0].start, p.index[0].stop) for name, p in placements.items() if ".experts." in name}
    assert len(rows) <= 1, rows
    return rows.pop() if rows else None


# -- build on meta, shard, materialize, load ---------------------------------------------------------------------
def sharded_from_meta(name: str, state: ParallelState) -> torch.nn.Module:
    """The model built on meta, experts split (ep > 1), FSDP applied, then storage for this rank's shards only."""
    model = build_model(model_config(name), architecture=MODELS[name][1], device="meta")
    assert all(p.is_meta for p in model.parameters()) and all(b.is_meta for b in model.buffers())
    if state.ep > 1:
        apply_expert_parallel(model, state)
    apply_fsdp(model, state)
    return model


def loaded_sharded_matches_whole(name: str, paths: dict[str, Path], ep: int) -> None:
    """Parameters, buffers, loss, gradients, AdamW step and next loss of the meta-built sharded model,
    loaded rank by rank from the hub checkpoint, equal the whole model's loaded with load_checkpoint."""
    state = ParallelState.build(ep=ep)
    config = model_config(name)
    base = GROUPED if name == "qwen3_moe" else OpsConfig()
    kwargs = {"output_router_logits": True} if name == "qwen3_moe" else {}
    batch = causal_lm_batch(config, batch_size=2 * state.world_size)

    reference = whole_model(name, 1)
    load_checkpoint(reference, paths[name])
    loaded = {n: p.detach().clone() for n, p in reference.named_parameters()}
    with bound_ops(base):
        ref_out = reference(**batch, **kwargs)
        ref_out.loss.backward()
    ref_grads = {n: p.grad.detach().clone() for n, p in reference.named_parameters()}
    torch.optim.AdamW(reference.parameters(), lr=1e-2).step()
    with torch.no_grad(), bound_ops(base):
        ref_second = reference(**batch, **kwargs).loss
    whole_bytes = sum(p.numel() * p.element_size() for p in reference.parameters())  # tied: once

    model = sharded_from_meta(name, state)
    materialize(model, weights=False)
    for key, buffer in non_persistent_buffers(reference).items():
        assert torch.equal(non_persistent_buffers(model)[key], buffer), f"buffer {key} differs from a whole build"
    placements = placements_of(model)
    with recorded_reads() as reads:
        result = load_sharded_checkpoint(model, paths[name])
    assert not result.missing and not result.unexpected
    assert_reads_only_own_slices(reads, placements, _expert_rows(placements))
    if config.tie_word_embeddings:
        assert model.lm_head.weight is model.model.embed_tokens.weight, "materializing untied the embeddings"

    held = local_parameter_bytes(model)
    locals_ = {id(placements[key].local): placements[key].local for key, _ in model.named_parameters()}
    assert held == sum(t.numel() * t.element_size() for t in locals_.values())
    assert held < 0.6 * whole_bytes, f"rank {state.rank} holds {held} of {whole_bytes} parameter bytes"

    params = full_state(model, state)
    for key, param in loaded.items():
        assert torch.equal(params[key], param), f"{key} differs from the whole model's after loading"

    bind_ops(parallel_ops(state, base))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    local = rows_of(batch, state.rank, state.world_size)
    out = model(**local, **kwargs)
    assert_close(out.loss, ref_out.loss, "loss")
    out.loss.backward()
    assert_same_grads(full_state(model, state, grads=True), ref_grads)
    optimizer.step()
    with torch.no_grad():
        assert_close(model(**local, **kwargs).loss, ref_second, "loss after one AdamW step")
    unbind_ops()


def initialized_sharded_matches_whole_init(name: str) -> None:
    """Random init of the shards: deterministic entries equal a whole build's, random ones have its spread."""
    state = ParallelState.build()
    model = sharded_from_meta(name, state)
    materialize(model, weights=True)
    reference = whole_model(name, 0)
    params = full_state(model, state)
    std = reference.config.initializer_range
    for key, param in reference.named_parameters():
        got = params[key]
        assert torch.isfinite(got).all(), key
        if bool((param == param.flatten()[0]).all()):  # norms (ones) and zero biases: deterministic
            assert torch.equal(got, param.detach()), f"{key}: init differs from a whole build's"
        else:
            assert abs(got.std().item() - std) < 0.25 * std, f"{key}: std {got.std().item()}, init std {std}"
    for key, buffer in non_persistent_buffers(reference).items():
        assert torch.equal(non_persistent_buffers(model)[key], buffer), key


def two_rank_meta_fsdp(paths: dict[str, Path]) -> None:
    loaded_sharded_matches_whole("llama", paths, ep=1)
    loaded_sharded_matches_whole("qwen3_moe", paths, ep=1)
    loaded_sharded_matches_whole("qwen3_moe", paths, ep=2)
    initialized_sharded_matches_whole_init("llama")


def fused_layouts_load_only_own_rows(paths: dict[str, Path]) -> None:
    """Fused expert tensors, stored as the modeling holds them or transposed, are read on their experts dim
    only (FSDP's rows without EP, the ep rank's experts with it) and equal the whole model's slices."""
    for ep in (1, 2):
        state = ParallelState.build(ep=ep)
        for layout in ("qwen3_moe_fused", "qwen3_moe_transposed"):
            reference = whole_model("qwen3_moe", 1)
            load_checkpoint(reference, paths["qwen3_moe"])
            model = sharded_from_meta("qwen3_moe", state)
            materialize(model, weights=False)
            placements = placements_of(model)
            with recorded_reads() as reads:
                load_sharded_checkpoint(model, paths[layout])
            assert_reads_only_own_slices(reads, placements, _expert_rows(placements))
            assert [key for key, _ in reads.sliced if FUSED.search(key)], f"{layout}: no fused tensor was sliced"
            params = full_state(model, state)
            for key, param in reference.named_parameters():
                assert torch.equal(params[key], param.detach()), f"{layout}, ep={ep}: {key} differs"


def gpt_oss_reads_only_own_experts(paths: dict[str, Path]) -> None:
    """gpt_oss's converter has the expert hooks (``for_experts``; no key holds one expert alone): each rank
    reads only its rows of every expert tensor, biases included (FSDP's rows with ep=1, the ep rank's experts
    with ep=2), and every other key as its slice; every parameter equals the whole model's."""
    for ep in (1, 2):
        state = ParallelState.build(ep=ep)
        reference = whole_model("gpt_oss", 1)
        load_checkpoint(reference, paths["gpt_oss"])
        model = sharded_from_meta("gpt_oss", state)
        materialize(model, weights=False)
        placements = placements_of(model)
        with recorded_reads() as reads:
            result = load_sharded_checkpoint(model, paths["gpt_oss"])
        assert not result.missing and not result.unexpected
        rows = _expert_rows(placements)
        assert rows is not None and rows[1] - rows[0] == 4, rows  # 8 experts, half on each rank
        assert_reads_only_own_slices(reads, placements, rows)
        assert sum(".experts." in key for key, _ in reads.sliced) == 4 * model.config.num_hidden_layers
        params = full_state(model, state)
        for key, param in reference.named_parameters():
            assert torch.equal(params[key], param.detach()), f"gpt_oss, ep={ep}: {key} differs"


#: A checkpoint that names the query projections otherwise (as checkpoints of older modeling code do).
MODEL_NAME, HUB_NAME = ".self_attn.q_proj.", ".attention.wq."


class Renamer:
    """The converter of such a checkpoint: ``convert`` renames; with ``announce``, ``rename`` says so up front."""

    def __init__(self, announce: bool) -> None:
        if announce:
            self.rename = lambda key: key.replace(HUB_NAME, MODEL_NAME)

    def can_handle(self, key: str) -> bool:
        return HUB_NAME in key

    def convert(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        return [(key.replace(HUB_NAME, MODEL_NAME), tensor)]

    def finalize(self) -> list[tuple[str, torch.Tensor]]:
        return []


def renamed_keys_load_into_their_slices(paths: dict[str, Path]) -> None:
    """A renaming converter: with ``rename`` each rank reads only its slice of the renamed keys; with
    ``convert`` alone they are read whole and cut after conversion. Both give the whole model's weights."""
    state = ParallelState.build()
    reference = whole_model("llama", 1)
    load_checkpoint(reference, paths["llama"])
    for announce in (True, False):
        model = sharded_from_meta("llama", state)
        materialize(model, weights=False)
        placements = placements_of(model)
        with recorded_reads() as reads:
            result = load_sharded_checkpoint(model, paths["llama_renamed"], converter=Renamer(announce))
        assert not result.missing and not result.unexpected
        whole = [key for key in reads.whole if HUB_NAME in key]
        sliced = {key: index for key, index in reads.sliced if HUB_NAME in key}
        if announce:
            assert not whole and sliced, (whole, sliced)
            for key, index in sliced.items():
                assert index == placements[key.replace(HUB_NAME, MODEL_NAME)].index, (key, index)
        else:
            assert whole and not sliced, (whole, sliced)
        params = full_state(model, state)
        for key, param in reference.named_parameters():
            assert torch.equal(params[key], param.detach()), f"rename announced={announce}: {key} differs"


def hsdp_loads_each_ranks_slices(paths: dict[str, Path]) -> None:
    """HSDP 2 x 2 (replicate 2), llama and qwen3_moe with EP=2: each rank reads its shard's slices (the
    replicas read the same ones) and every parameter equals the whole model's."""
    state = ParallelState.build(replicate=2, ep=2)
    for name in ("llama", "qwen3_moe"):
        reference = whole_model(name, 1)
        load_checkpoint(reference, paths[name])
        model = sharded_from_meta(name, state)
        materialize(model, weights=False)
        placements = placements_of(model)
        assert model.model.norm.weight.device_mesh.ndim == 2, "not HSDP's 2-D mesh"
        with recorded_reads() as reads:
            load_sharded_checkpoint(model, paths[name])
        assert_reads_only_own_slices(reads, placements, _expert_rows(placements))
        params = full_state(model, state)
        for key, param in reference.named_parameters():
            assert torch.equal(params[key], param.detach()), f"HSDP {name}: {key} differs"


def four_rank_meta_fsdp_x_ep(paths: dict[str, Path]) -> None:
    """ep 2, ep_replicate 2: each rank reads 2 of the 8 experts (FSDP's rows of its ep rank's 4)."""
    loaded_sharded_matches_whole("qwen3_moe", paths, ep=2)


# -- errors: named, and raised on every rank ------------------------------------------------------------------------
def write_broken_checkpoints(folder: Path) -> dict[str, Path]:
    """qwen3_moe's per-expert layout with one of ep rank 1's experts missing; llama with an extra key, with a
    mis-shaped key, and with a key missing."""
    tensors = per_expert_state_dict(whole_model("qwen3_moe", 0).state_dict())
    del tensors["model.layers.0.mlp.experts.6.up_proj.weight"]
    paths = {name: folder / name for name in ("missing_expert", "unexpected", "misshaped", "missing")}
    _write_sharded(tensors, paths["missing_expert"])
    llama = dict(whole_model("llama", 0).state_dict())
    del llama["lm_head.weight"]  # tied
    _write_sharded({**llama, "model.layers.9.mlp.up_proj.weight": torch.zeros(2, 2)}, paths["unexpected"])
    _write_sharded({**llama, "model.norm.weight": torch.ones(7)}, paths["misshaped"])
    _write_sharded({k: v for k, v in llama.items() if k != "model.layers.1.self_attn.q_proj.weight"}, paths["missing"])
    return paths


def errors_raise_on_every_rank(paths: dict[str, Path]) -> None:
    state = ParallelState.build(ep=2)
    model = sharded_from_meta("qwen3_moe", state)
    materialize(model, weights=False)
    # Only ep rank 1 lacks one of its own experts: it raises its error, rank 0 learns it and raises too.
    expected = ConversionError if state.ep_rank == 1 else PeerFailedError
    with pytest.raises(expected) as error:
        load_sharded_checkpoint(model, paths["missing_expert"])
    assert "model.layers.0.mlp.experts.<i>.up_proj.weight is missing expert(s) 6" in str(error.value)

    llama = sharded_from_meta("llama", state)
    materialize(llama, weights=False)
    for case, message in (
        ("unexpected", r"not in the model: model\.layers\.9\.mlp\.up_proj\.weight"),
        ("misshaped", r"model\.norm\.weight: checkpoint shape \[7\], the model's whole shape \[48\]"),
        ("missing", r"missing from the checkpoint: model\.layers\.1\.self_attn\.q_proj\.weight"),
    ):
        with recorded_reads() as reads, pytest.raises(CheckpointError, match=message):
            load_sharded_checkpoint(llama, paths[case])
        if case != "missing":  # refused from the headers: no tensor was read
            assert not reads.whole and not reads.sliced, f"{case}: read {reads.whole} {reads.sliced}"
    # The group still works after the failures: the next collective runs on both ranks.
    value = torch.ones(1)
    torch.distributed.all_reduce(value)
    assert value.item() == state.world_size


# -- memory ---------------------------------------------------------------------------------------------------
MEMORY_SIZES: dict[str, Any] = {
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "vocab_size": 4096,
    "use_cache": False,
}


def memory_config() -> LlamaConfig:
    return tiny_config(LlamaConfig, **MEMORY_SIZES)


def write_memory_checkpoint(folder: Path) -> tuple[Path, int]:
    """A ~100 MB llama in from_pretrained layout, and its parameter bytes."""
    model = build_model(memory_config(), architecture="LlamaForCausalLM")
    model.save_pretrained(folder, max_shard_size="10MB")
    return folder, sum(p.numel() * p.element_size() for p in model.parameters())


def _reset_peak_rss() -> None:
    """Linux: writing 5 to clear_refs resets the process's resident-set high-water mark (VmHWM)."""
    Path("/proc/self/clear_refs").write_text("5")


def _peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024  # kB
    raise AssertionError("no VmHWM in /proc/self/status")


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def each_rank_allocates_its_share(path: Path, whole_bytes: int) -> None:
    """Building on meta, sharding, materializing and loading never brings the whole model into a rank."""
    state = ParallelState.build()
    _reset_peak_rss()
    before = _rss_bytes()
    model = build_model(memory_config(), architecture="LlamaForCausalLM", device="meta")
    apply_fsdp(model, state)
    materialize(model, weights=False)
    load_sharded_checkpoint(model, path)
    grown = _peak_rss_bytes() - before
    held = local_parameter_bytes(model)
    share = whole_bytes / state.world_size
    assert abs(held - share) < 0.01 * whole_bytes, f"rank {state.rank} holds {held} bytes, its share is {share:.0f}"
    # The shards are written, so they are resident: the peak is at least what the rank holds, and far from all.
    assert 0.9 * held < grown < 0.75 * whole_bytes, (
        f"rank {state.rank}: peak RSS grew {grown / 2**20:.0f} MiB, whole model {whole_bytes / 2**20:.0f} MiB"
    )
    print(
        f"rank {state.rank}: holds {held / 2**20:.1f} MiB, peak RSS +{grown / 2**20:.1f} MiB, whole {whole_bytes / 2**20:.1f} MiB"
    )
