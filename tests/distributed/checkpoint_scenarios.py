"""Loading a checkpoint into an expert-parallel qwen3_moe, each rank reading only its own experts.

The helpers are shared by the one-process tests (``test_ep_checkpoint.py``, which play one ep rank with a
stand-in state) and by :func:`two_rank_checkpoint_loading`, which the spawn start method runs on each of
two gloo ranks (module-level, importable by name).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from modelgraft import models
from modelgraft.models.checkpoint import load_checkpoint
from modelgraft.models.distributed import (
    ParallelState,
    apply_expert_parallel,
    load_expert_parallel_checkpoint,
    parallel_ops,
)
from modelgraft.models.loader import build_model
from modelgraft.models.ops import bind_ops, bound_ops, unbind_ops
from modelgraft.models.testing import causal_lm_batch, seed_everything
from modelgraft.models.testing.moe_suite import _write_sharded, per_expert_state_dict

from .scenarios import GROUPED, MODELS, assert_close, config_of

#: ``...experts.<e>.<proj>.weight``: a per-expert hub key and its expert.
PER_EXPERT = re.compile(r"\.experts\.(\d+)\.\w+\.weight$")
FUSED = re.compile(r"\.experts\.(gate_up_proj|down_proj)$")


def build(seed: int) -> torch.nn.Module:
    """The tiny qwen3_moe of the distributed tests (8 experts) from ``seed``."""
    seed_everything(seed)
    return build_model(config_of("qwen3_moe"), architecture=MODELS["qwen3_moe"][1])


def write_checkpoints(folder: Path) -> dict[str, Path]:
    """The seed-0 model's weights, three ways: per-expert hub shards, fused shards, fused stored transposed."""
    source = build(0).state_dict()
    paths = {name: folder / name for name in ("per_expert", "fused", "transposed")}
    _write_sharded(per_expert_state_dict(source), paths["per_expert"])
    _write_sharded(source, paths["fused"])
    transposed = {k: v.transpose(-2, -1) if FUSED.search(k) else v for k, v in source.items()}
    paths["transposed"].mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in transposed.items()}, str(paths["transposed"] / "model.safetensors"))
    return paths


# -- what a rank reads -----------------------------------------------------------------------------------
class Reads:
    """Every read through ``safe_open``: whole tensors by key, slices by key with their index."""

    def __init__(self) -> None:
        self.whole: list[str] = []
        self.sliced: list[tuple[str, Any]] = []
        self.fed: list[str] = []  # keys handed to a converter's convert()

    def experts_read(self) -> set[int]:
        """The experts of every per-expert key read whole."""
        return {int(m[1]) for key in self.whole if (m := PER_EXPERT.search(key))}


class _Slice:
    def __init__(self, inner: Any, key: str, reads: Reads) -> None:
        self.inner, self.key, self.reads = inner, key, reads

    def get_shape(self) -> list[int]:
        return self.inner.get_shape()

    def get_dtype(self) -> str:
        return self.inner.get_dtype()

    def __getitem__(self, index: Any) -> torch.Tensor:
        self.reads.sliced.append((self.key, index))
        return self.inner[index]


class _Handle:
    def __init__(self, inner: Any, reads: Reads) -> None:
        self.inner, self.reads = inner, reads

    def __enter__(self) -> Any:  # the wrapper, as safe_open returns its handle
        self.inner.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.__exit__(*exc)

    def keys(self) -> list[str]:
        return self.inner.keys()

    def get_tensor(self, key: str) -> torch.Tensor:
        self.reads.whole.append(key)
        return self.inner.get_tensor(key)

    def get_slice(self, key: str) -> _Slice:
        return _Slice(self.inner.get_slice(key), key, self.reads)


@contextmanager
def recorded_reads() -> Iterator[Reads]:
    """Record what the checkpoint loader reads (``safe_open`` wrapped) and feeds its converters."""
    from modelgraft.models.converters.moe import FusedExpertsConverter

    reads = Reads()
    original_open, original_convert = models.checkpoint.safe_open, FusedExpertsConverter.convert

    def convert(self: FusedExpertsConverter, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        reads.fed.append(key)
        return original_convert(self, key, tensor)

    models.checkpoint.safe_open = lambda *args, **kwargs: _Handle(safe_open(*args, **kwargs), reads)
    FusedExpertsConverter.convert = convert
    try:
        yield reads
    finally:
        models.checkpoint.safe_open = original_open
        FusedExpertsConverter.convert = original_convert


def assert_only_local_experts_read(reads: Reads, layout: str, mine: range) -> None:
    """Nothing of another rank's experts was read whole, sliced, or fed to the converter."""
    assert reads.experts_read() <= set(mine), f"{layout}: read experts {sorted(reads.experts_read())}, own {mine}"
    fed = {int(m[1]) for key in reads.fed if (m := PER_EXPERT.search(key))}
    assert fed <= set(mine), f"{layout}: the converter was fed experts {sorted(fed)}, own {mine}"
    assert not [key for key in reads.whole if FUSED.search(key)], f"{layout}: a fused expert tensor was read whole"
    if layout == "per_expert":
        assert reads.experts_read() == set(mine) and not reads.sliced
    else:
        assert reads.sliced and all(FUSED.search(key) for key, _ in reads.sliced)
        for key, index in reads.sliced:
            dims = index if isinstance(index, tuple) else (index,)
            assert dims[0] == slice(mine.start, mine.stop), f"{key}: read {index}, own experts {mine}"


def assert_local_experts(model: torch.nn.Module, reference: torch.nn.Module, mine: range) -> None:
    """Every expert tensor is the reference's slice ``mine``; every other tensor equals the reference's."""
    local = model.state_dict()
    for name, tensor in reference.state_dict().items():
        expected = tensor[mine.start : mine.stop] if FUSED.search(name) else tensor
        assert torch.equal(local[name], expected), f"{name} differs from the one-process model's"


# -- two gloo ranks ------------------------------------------------------------------------------------------
def two_rank_checkpoint_loading(paths: dict[str, Path]) -> None:
    """Each layout loaded rank-locally into EP=2: own experts only, and the one-process logits."""
    state = ParallelState.build(ep=2)
    config = config_of("qwen3_moe")
    per_rank = config.num_experts // state.ep
    mine = range(state.ep_rank * per_rank, (state.ep_rank + 1) * per_rank)

    reference = build(1)
    load_checkpoint(reference, paths["per_expert"])  # the one-process model, from the whole checkpoint
    batch = causal_lm_batch(config, batch_size=4)
    del batch["labels"]
    with torch.no_grad(), bound_ops(GROUPED):
        ref_logits = reference(**batch).logits
    rows = slice(state.rank * 2, state.rank * 2 + 2)

    bind_ops(parallel_ops(state, GROUPED))
    for layout in ("per_expert", "fused", "transposed"):
        model = build(2)  # other initial weights: everything must come from the checkpoint
        apply_expert_parallel(model, state)
        with recorded_reads() as reads:
            result = load_expert_parallel_checkpoint(model, paths[layout])
        assert not result.missing and not result.unexpected
        assert_only_local_experts_read(reads, layout, mine)
        assert_local_experts(model, reference, mine)
        with torch.no_grad():
            logits = model(**{key: value[rows] for key, value in batch.items()}).logits
        assert_close(logits, ref_logits[rows], f"EP=2 logits after loading the {layout} checkpoint")
    unbind_ops()
