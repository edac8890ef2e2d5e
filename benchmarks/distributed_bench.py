"""Scaling of distributed training on gloo CPU ranks: per-rank memory and step time against one process.

    python -m benchmarks.distributed_bench                      # 1, 2 and 4 ranks, ~250 MB qwen3_moe
    python -m benchmarks.distributed_bench --smoke              # toy sizes: proves the script runs
    python -m benchmarks.run --only distributed                 # the same figures as rows of the table

Every configuration is one fresh process group (``launch.spawn``) training the same qwen3_moe on the same
global batch (strong scaling), so each rank's share of the work is ``1/N``. Per rank it records:

* parameters, gradients and AdamW state: the bytes of the tensors the rank holds (``DTensor.to_local()``),
  counted exactly after the step: what FSDP2 / EP shard, and what the design predicts at ``1/N``;
* activations saved for backward: the bytes of the tensors autograd saves during the forward (counted once
  per storage through ``saved_tensors_hooks``, parameters excluded; a checkpointed layer's kept input
  counted by a pre-hook): what the design's ``1/N`` (rows or sequence split) and checkpointing act on;
* forward peak RSS: the process's peak resident memory during the forward pass above its resident memory just
  before it (``benchmarks/peak_memory.py``: ``VmHWM`` reset through ``/proc/self/clear_refs``, the ranks
  started with its ``MALLOC_MMAP_THRESHOLD_``), so everything the forward keeps for backward plus its
  transient buffers (FSDP's all-gathered layer included);
* step time: forward, backward, clip, optimizer step, after a warm-up step; the largest rank's median.

Each figure is the largest rank's, next to the one-process run of the same invocation as a ratio. The
ranks share the machine's cores (one torch thread each): with N ranks on fewer than N cores the step time
cannot fall below (cores used by one process) / (cores available), whatever the sharding.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.peak_memory import MEASURE_ENV, peak_memory
from benchmarks.report import Row

MIB = 1024 * 1024


@dataclass(frozen=True)
class DistSizes:
    """The model and batch of every configuration: a qwen3_moe of about 250 MB of fp32 parameters."""

    hidden: int = 512
    layers: int = 4
    experts: int = 16
    top_k: int = 2
    moe_intermediate: int = 512
    heads: int = 8
    kv_heads: int = 4
    vocab: int = 8192
    rows: int = 4  # global batch: rows x seq_len tokens, split over the ranks
    seq_len: int = 256
    steps: int = 2  # timed steps, after one warm-up step
    ranks: tuple[int, ...] = (1, 2, 4)


SMOKE_SIZES = DistSizes(
    hidden=32, layers=2, experts=4, moe_intermediate=16, heads=4, kv_heads=2, vocab=128, seq_len=16, steps=1,
    ranks=(1, 2),
)  # fmt: skip


@dataclass(frozen=True)
class Setup:
    """One configuration: its world, parallel sizes and whether layers are checkpointed."""

    label: str
    world: int
    ep: int = 1
    sp: int = 1
    fsdp: bool = True
    checkpointing: bool = False


@dataclass
class Measured:
    """The largest rank's figures of one configuration (bytes and seconds)."""

    params: int = 0
    grads: int = 0
    optimizer: int = 0
    activations: int = 0
    saved: int = 0
    step_s: float = 0.0
    loss: float = 0.0
    per_rank: list[dict[str, float]] = field(default_factory=list)


def setups(ranks: tuple[int, ...]) -> list[Setup]:
    """The baseline, AC in one process, then FSDP, FSDP x EP and FSDP x SP (with and without AC) per size."""
    out = [Setup("1 process", 1, fsdp=False), Setup("1 process + AC", 1, fsdp=False, checkpointing=True)]
    for n in ranks:
        if n == 1:
            continue
        out += [
            Setup(f"FSDP {n}", n),
            Setup(f"FSDP x EP {n} (ep={n})", n, ep=n),
            Setup(f"FSDP x SP {n} (sp={n})", n, sp=n),
            Setup(f"FSDP x SP {n} (sp={n}) + AC", n, sp=n, checkpointing=True),
        ]
    return out


# -- on every rank ---------------------------------------------------------------------------------------
def _local_bytes(tensors: list[Any]) -> int:
    total = 0
    for tensor in tensors:
        if tensor is None:
            continue
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total += local.numel() * local.element_size()
    return total


class SavedBytes:
    """What one forward keeps for backward, in bytes: filled by :func:`saved_for_backward`."""

    def __init__(self) -> None:
        self.storages: dict[int, int] = {}

    def add(self, tensor: Any) -> None:
        storage = tensor.untyped_storage()
        self.storages[storage.data_ptr()] = storage.nbytes()

    @property
    def total(self) -> int:
        return sum(self.storages.values())


@contextmanager
def saved_for_backward(model: Any) -> Iterator[SavedBytes]:
    """Count the activations autograd saves during the block, once per storage, parameters excluded (leaves
    that require grad, and views of them: FSDP's all-gathered weights are counted by the RSS figure).

    Inside a checkpointed layer the wrapper's own saved-tensor hooks take over, and what it keeps is the
    layer's input, held by its closure: that input is counted by a pre-hook on every wrapper instead."""
    import torch
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    saved = SavedBytes()

    def is_parameter(tensor: torch.Tensor) -> bool:
        base = tensor._base if tensor._base is not None else tensor
        return base.is_leaf and base.requires_grad

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if not is_parameter(tensor) and tensor.device.type != "meta":
            saved.add(tensor)
        return tensor

    def layer_input(module: Any, args: Any, kwargs: Any) -> None:
        hidden = args[0] if args else kwargs.get("hidden_states")
        if hidden is not None:
            saved.add(hidden)

    handles = [
        m.register_forward_pre_hook(layer_input, with_kwargs=True)
        for m in model.modules()
        if isinstance(m, CheckpointWrapper)
    ]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield saved
    finally:
        for handle in handles:
            handle.remove()


def _rank_main(setup: Setup, sizes: DistSizes, out_dir: str) -> None:
    import torch
    from transformers import Qwen3MoeConfig

    from modelgraft.models.distributed import (
        ParallelState,
        apply_activation_checkpointing,
        apply_expert_parallel,
        apply_fsdp,
        clip_grad_norm,
        parallel_ops,
        register_ulysses,
        shard_sequence,
    )
    from modelgraft.models.loader import build_model
    from modelgraft.models.ops import OpsConfig, bind_ops

    state = ParallelState.build(ep=setup.ep, sp=setup.sp)
    config = Qwen3MoeConfig(
        vocab_size=sizes.vocab,
        hidden_size=sizes.hidden,
        intermediate_size=sizes.moe_intermediate,
        moe_intermediate_size=sizes.moe_intermediate,
        num_hidden_layers=sizes.layers,
        num_attention_heads=sizes.heads,
        num_key_value_heads=sizes.kv_heads,
        head_dim=sizes.hidden // sizes.heads,
        num_experts=sizes.experts,
        num_experts_per_tok=sizes.top_k,
        max_position_embeddings=max(sizes.seq_len, 128),
        use_cache=False,
        pad_token_id=0,
    )
    attention = "ulysses_sdpa" if setup.sp > 1 else "sdpa"
    if setup.sp > 1:
        register_ulysses(state)
    torch.manual_seed(0)
    model = build_model(config, architecture="Qwen3MoeForCausalLM", attn_implementation=attention)
    if setup.ep > 1:
        apply_expert_parallel(model, state)
    if setup.checkpointing:
        apply_activation_checkpointing(model)
    if setup.fsdp:
        apply_fsdp(model, state)
    bind_ops(parallel_ops(state, OpsConfig({"moe_experts": "grouped"})))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    data = torch.Generator().manual_seed(1)
    ids = torch.randint(1, sizes.vocab, (sizes.rows, sizes.seq_len), generator=data)
    per_dp = sizes.rows // state.dp
    rows = ids[state.dp_rank * per_dp : (state.dp_rank + 1) * per_dp]
    batch = {"input_ids": rows, "labels": rows.clone()}
    if setup.sp > 1:
        batch = shard_sequence(batch, state, pad_token_id=0)

    times, activations, saved_bytes, loss = [], [], [], 0.0
    for step in range(sizes.steps + 1):
        torch.distributed.barrier() if state.world_size > 1 else None
        started = time.perf_counter()
        with peak_memory() as forward, saved_for_backward(model) as saved:
            out = model(**batch)
        saved_bytes.append(saved.total)
        activations.append(int(forward.peak_delta_mib * MIB))
        method = forward.method
        out.loss.backward()
        clip_grad_norm(model, state, 1.0)
        if step == sizes.steps:  # the last step: count what the rank holds before it frees the gradients
            grads = _local_bytes([p.grad for p in model.parameters()])
        optimizer.step()
        optimizer.zero_grad()
        if step:
            times.append(time.perf_counter() - started)
        loss = float(out.loss.detach())
    record = {
        "params": _local_bytes(list(model.parameters())),
        "grads": grads,
        "optimizer": _local_bytes([t for s in optimizer.state.values() for t in s.values() if t.dim() > 0]),
        "activations": min(activations[1:]),
        "saved": saved_bytes[-1],
        "step_s": statistics.median(times),
        "loss": loss,
        "method": method,
    }
    Path(out_dir, f"rank{state.rank}.json").write_text(json.dumps(record))


def measure(setup: Setup, sizes: DistSizes, timeout: float = 900.0) -> Measured:
    """Run ``setup`` on its ranks; the largest rank's figure of each quantity."""
    from modelgraft.models.distributed.launch import spawn

    saved = {key: os.environ.get(key) for key in MEASURE_ENV}
    os.environ.update(MEASURE_ENV)  # the ranks inherit it: RSS follows live tensors (benchmarks/peak_memory.py)
    try:
        with tempfile.TemporaryDirectory() as out_dir:
            spawn(_rank_main, setup.world, setup, sizes, out_dir, timeout=timeout)
            ranks = [json.loads(Path(out_dir, f"rank{r}.json").read_text()) for r in range(setup.world)]
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    out = Measured(per_rank=ranks)
    for key in ("params", "grads", "optimizer", "activations", "saved", "step_s"):
        setattr(out, key, max(r[key] for r in ranks))
    out.loss = ranks[0]["loss"]
    return out


# -- the table ---------------------------------------------------------------------------------------------
def predicted(setup: Setup, quantity: str) -> str:
    """What the design predicts per rank against one process, for ``quantity``."""
    n = setup.world
    if n == 1:
        return "1" if not setup.checkpointing or quantity != "activations" else "< 1"
    if quantity == "step_s":
        return f"1/{n} ideal, >= 1/2 on 2 cores"
    if quantity == "activations" and setup.checkpointing:
        return f"< 1/{n}"
    return f"1/{n} = {1 / n:.2f}"


def results(sizes: DistSizes) -> list[tuple[Setup, Measured]]:
    measured = []
    for setup in setups(sizes.ranks):
        print(f"[distributed] {setup.label} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        measured.append((setup, measure(setup, sizes)))
        print(
            f"[distributed] {setup.label} done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True
        )
    return measured


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}" if base else "-"


def render(measured: list[tuple[Setup, Measured]]) -> list[str]:
    """The side-by-side table: each configuration's per-rank figures and their ratio to one process."""
    base = measured[0][1]
    lines = [
        (
            "| configuration | params MiB (ratio, predicted) | grads MiB (ratio) | AdamW state MiB (ratio) "
            "| saved for backward MiB (ratio, predicted) | forward peak RSS MiB (ratio) "
            "| step s (ratio, predicted) | loss |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for setup, m in measured:
        lines.append(
            f"| {setup.label} "
            f"| {m.params / MIB:.1f} ({_ratio(m.params, base.params)}, {predicted(setup, 'params')}) "
            f"| {m.grads / MIB:.1f} ({_ratio(m.grads, base.grads)}) "
            f"| {m.optimizer / MIB:.1f} ({_ratio(m.optimizer, base.optimizer)}) "
            f"| {m.saved / MIB:.1f} ({_ratio(m.saved, base.saved)}, {predicted(setup, 'activations')}) "
            f"| {m.activations / MIB:.1f} ({_ratio(m.activations, base.activations)}) "
            f"| {m.step_s:.2f} ({_ratio(m.step_s, base.step_s)}, {predicted(setup, 'step_s')}) "
            f"| {m.loss:.4f} |"
        )
    return lines


def setup_line(sizes: DistSizes) -> str:
    return (
        f"distributed: qwen3_moe hidden {sizes.hidden}, {sizes.layers} layers, {sizes.experts} experts (top {sizes.top_k}, "
        f"{sizes.moe_intermediate} wide), vocab {sizes.vocab}; global batch {sizes.rows} x {sizes.seq_len} tokens; "
        f"gloo CPU ranks, 1 thread each; {sizes.steps} timed steps after 1 warm-up"
    )


def bench_distributed(sizes: DistSizes) -> tuple[list[Row], str]:
    """``benchmarks/run.py``'s ``distributed`` section: one info row per configuration and quantity."""
    measured = results(sizes)
    base = measured[0][1]
    rows = []
    for setup, m in measured:
        state_bytes = m.params + m.grads + m.optimizer
        base_state = base.params + base.grads + base.optimizer
        rows += [
            Row("distributed", f"{setup.label}: params+grads+AdamW per rank / 1 process",
                f"{_ratio(state_bytes, base_state)} ({state_bytes / MIB:.0f} MiB)", notes=f"predicted {predicted(setup, 'params')}"),
            Row("distributed", f"{setup.label}: activations saved for backward per rank / 1 process",
                f"{_ratio(m.saved, base.saved)} ({m.saved / MIB:.0f} MiB)",
                notes=f"predicted {predicted(setup, 'activations')}"),
            Row("distributed", f"{setup.label}: forward peak RSS per rank / 1 process",
                f"{_ratio(m.activations, base.activations)} ({m.activations / MIB:.0f} MiB)",
                notes="activations + FSDP's all-gathered unit + transients"),
            Row("distributed", f"{setup.label}: step time / 1 process", f"{_ratio(m.step_s, base.step_s)} ({m.step_s:.2f} s)",
                notes=f"predicted {predicted(setup, 'step_s')}"),
        ]  # fmt: skip
    return rows, setup_line(sizes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="toy sizes, 1 and 2 ranks: the figures mean nothing")
    parser.add_argument("--ranks", default=None, help="comma-separated world sizes (default 1,2,4)")
    parser.add_argument("--json", type=Path, help="also write every rank's figures here")
    args = parser.parse_args(argv)
    sizes = SMOKE_SIZES if args.smoke else DistSizes()
    if args.ranks:
        sizes = DistSizes(**{**asdict(sizes), "ranks": tuple(int(r) for r in args.ranks.split(","))})
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    measured = results(sizes)
    command = "python -m benchmarks.distributed_bench" + (" " + " ".join(sys.argv[1:]) if argv is None else "")
    print(f"command: `{command}` at {started}; load average before: {load}, after: "
          + " / ".join(f"{x:.2f}" for x in os.getloadavg()))  # fmt: skip
    print(setup_line(sizes))
    print("\n".join(render(measured)))
    if args.json:
        args.json.write_text(json.dumps([[asdict(s), asdict(m)] for s, m in measured], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
