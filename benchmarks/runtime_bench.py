"""Runtime benchmark on CPU: one training step (forward + backward) of each dense model, generated vs upstream.
    from modelgraft import models

Both sides are built from the same config, seed and state dict (``modelgraft.models.testing.build_pair``), fp32,
eager attention, every op slot unbound (eager), so the generated class runs upstream numerics and any
time difference is the cost of the patched code itself (slot guards, patched forwards).

Time: by default on one torch thread. The ratio is a property of the code, not of the thread count,
and with torch's default (one thread per core) a 2-core machine shared with anything else makes
OpenMP threads wait for each other: per-round ratios then scatter over 0.2-4.7x (measured), while
one thread keeps them within a few percent. ``run.py --threads 0`` uses torch's default.

One child process builds both models, warms each up, then runs the steps interleaved, swapping
which side goes first every round (A B, B A, ...), so a machine that speeds up or slows down over the
run (frequency scaling, a neighbour) hits both sides alike. The figure is the median over rounds of
generated-time / upstream-time, with the spread of those per-round ratios.

Memory: each side in its own child process, the peak RSS growth over one training step after a
warm-up step (``benchmarks.peak_memory``): activations, gradients and temporaries of the step; the
weights and the batch are in the baseline. No optimizer, so no optimizer state.

Models are whatever ``modelgraft.models.MODELING_REGISTRY`` holds when the benchmark runs, so a new model joins
without an edit here; sparse (MoE) and composite (VLM) configs are reported as skipped, as is a
model whose generated module cannot be imported yet.

Hybrid linear-attention models (:data:`HYBRID`, Qwen3.5) are composite but run on their text causal LM, three
Gated DeltaNet layers then a full-attention one, and their row answers another question: what a user gets from
the generated model with its CPU kernels bound (:data:`HYBRID_KERNELS`: ``chunked_delta`` for the conv and the
chunked delta rule) against upstream's default (its torch fallbacks, where neither fla nor causal-conv1d is
installed). Their first-step losses differ only where the kernels' arithmetic does: ``chunked_delta``'s delta rule
is upstream's, bit for bit without packed documents (the report prints the difference).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks import budgets
from benchmarks.child import ChildError, emit_result, run_child
from benchmarks.peak_memory import MEASURE_ENV
from benchmarks.report import FAILED, INFO, SKIPPED, Row, judge_at_most
from benchmarks.stats import summarize

SECTION = "runtime"
MODULE = "benchmarks.runtime_bench"
VARIANTS = ("upstream", "generated")

#: Config keys whose non-zero value marks a sparse (MoE) model, benchmarked elsewhere if at all.
_SPARSE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")

#: Hybrid linear-attention models, benchmarked on this text causal LM and config class (transformers' names).
HYBRID = {"qwen3_5": ("Qwen3_5ForCausalLM", "Qwen3_5TextConfig")}
#: The CPU kernels a hybrid model's generated side runs (upstream never reads slots).
HYBRID_KERNELS = {"causal_conv1d": "chunked_delta", "chunk_gated_delta_rule": "chunked_delta"}


@dataclass(frozen=True)
class RuntimeSizes:
    """A small but real-shaped decoder: a 2-core machine runs all five dense models in a few minutes."""

    hidden_size: int = 512
    intermediate_size: int = 1408
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int = 64
    vocab_size: int = 32000
    seq_len: int = 256
    batch_size: int = 2
    warmup: int = 1
    #: Gated DeltaNet layers of hybrid models (Qwen3.5's shape: twice as many value heads as key heads).
    linear_num_key_heads: int = 4
    linear_num_value_heads: int = 8
    linear_head_dim: int = 64

    def config_overrides(self) -> dict[str, Any]:
        sizes = asdict(self)
        for key in ("seq_len", "batch_size", "warmup", *_LINEAR_FIELDS):
            sizes.pop(key)
        return {**sizes, "max_position_embeddings": max(self.seq_len, 64)}

    def hybrid_overrides(self) -> dict[str, Any]:
        """A hybrid model's text config: every fourth layer and the last full attention (Qwen3.5's pattern, with
        both kinds at any depth), the rest Gated DeltaNet layers."""
        depth = self.num_hidden_layers
        layers = ["full_attention" if (i + 1) % 4 == 0 or i == depth - 1 else "linear_attention" for i in range(depth)]
        return {
            **self.config_overrides(),
            "layer_types": layers,
            "linear_num_key_heads": self.linear_num_key_heads,
            "linear_num_value_heads": self.linear_num_value_heads,
            "linear_key_head_dim": self.linear_head_dim,
            "linear_value_head_dim": self.linear_head_dim,
            "use_cache": False,
        }

    def describe(self) -> str:
        return (
            f"hidden {self.hidden_size}, intermediate {self.intermediate_size}, {self.num_hidden_layers} layers, "
            f"heads {self.num_attention_heads}/kv {self.num_key_value_heads} x {self.head_dim}, "
            f"vocab {self.vocab_size}, batch {self.batch_size} x seq {self.seq_len}, fp32, eager attention; "
            f"hybrid models' linear layers: {self.linear_num_key_heads} key / {self.linear_num_value_heads} value "
            f"heads x {self.linear_head_dim}"
        )


_LINEAR_FIELDS = ("linear_num_key_heads", "linear_num_value_heads", "linear_head_dim")

SMOKE_SIZES = RuntimeSizes(
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=512,
    seq_len=32,
    batch_size=2,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_head_dim=16,
)


# ---------------------------------------------------------------- child side (imports torch)


class Skip(Exception):
    """This model cannot be benchmarked here; the message says why."""


def _prepare(model_type: str, sizes: RuntimeSizes):
    """Config, upstream class and generated class of ``model_type``'s causal LM, or Skip."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from modelgraft.models import MODEL_CONFIG_REGISTRY
    from modelgraft.models.loader import get_model_class
    from modelgraft.models.testing import tiny_config

    if model_type in HYBRID:
        import transformers

        architecture, config_class = HYBRID[model_type]
        config = tiny_config(getattr(transformers, config_class), **sizes.hybrid_overrides())
        return (
            config,
            get_model_class(model_type, architecture, use_hf=True),
            get_model_class(model_type, architecture),
        )
    architecture = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if architecture is None:
        raise Skip(f"transformers has no causal-LM class for {model_type!r}")
    config = tiny_config(MODEL_CONFIG_REGISTRY[model_type], **sizes.config_overrides())
    if any(getattr(config, key, 0) for key in _SPARSE_KEYS):
        raise Skip("sparse (MoE) model; this benchmark covers dense models")
    if getattr(config, "sub_configs", None):
        raise Skip("composite (multimodal) config; this benchmark covers dense text models")
    upstream = get_model_class(model_type, architecture, use_hf=True)
    try:
        generated = get_model_class(model_type, architecture)
    except (ImportError, KeyError, TypeError) as exc:
        raise Skip(f"generated module not available: {exc}") from exc
    return config, upstream, generated


def train_step(model, batch, loss=None) -> float:
    """One training step from freed grads; returns the loss: the causal LM's own, or ``loss(model, batch)`` for a
    model that has none (a vision encoder).

    Reseeded first, so dropout (Seed-OSS keeps residual dropout on) draws the same masks on both sides
    and every round: both sides do the same work, and their losses must agree.
    """
    import torch

    torch.manual_seed(0)
    model.zero_grad(set_to_none=True)
    value = model(**batch, use_cache=False).loss if loss is None else loss(model, batch)
    value.backward()
    return float(value.detach())


def interleaved_steps(
    models: dict[str, Any], ops: dict[str, Any], batch: dict[str, Any], repeats: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per-variant step times over ``repeats`` rounds, swapping which variant goes first every round, each under
    its own ``ops``, after one warm-up step each; returns (times, the warm-up steps' losses)."""
    from modelgraft.models.ops import bound_ops

    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    first = {}
    for name in VARIANTS:  # warm-up, and the losses both sides must agree on
        with bound_ops(ops[name]):
            first[name] = train_step(models[name], batch)
    for round_ in range(repeats):
        for name in VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]:
            with bound_ops(ops[name]):
                start = time.perf_counter()
                train_step(models[name], batch)
                times[name].append(time.perf_counter() - start)
    return times, first


def _ops(model_type: str):
    """Every slot eager (the generated side runs upstream numerics), or a hybrid model's CPU kernels."""
    from modelgraft.models.ops import OpsConfig

    return OpsConfig(HYBRID_KERNELS if model_type in HYBRID else {})


def _time_model(model_type: str, sizes: RuntimeSizes, repeats: int) -> dict[str, Any]:
    from modelgraft.models.ops import bound_ops
    from modelgraft.models.testing import build_pair, causal_lm_batch

    config, upstream_cls, generated_cls = _prepare(model_type, sizes)
    pair = build_pair(config, upstream_cls, generated_cls, seed=0)
    models = {"upstream": pair.upstream, "generated": pair.generated}
    batch = causal_lm_batch(config, batch_size=sizes.batch_size, seq_len=sizes.seq_len, seed=0)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with bound_ops(_ops(model_type)):
        first = {name: train_step(model, batch) for name, model in models.items()}
        for _ in range(sizes.warmup - 1):
            for model in models.values():
                train_step(model, batch)
        for round_ in range(repeats):
            for name in VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]:
                start = time.perf_counter()
                train_step(models[name], batch)
                times[name].append(time.perf_counter() - start)
    return {"times": times, "loss_abs_diff": abs(first["generated"] - first["upstream"])}


def _set_threads(threads: int | None) -> None:
    import torch

    if threads:
        torch.set_num_threads(threads)


def _child_timing(model_types: Sequence[str], sizes: RuntimeSizes, repeats: int) -> dict[str, Any]:
    import torch

    results: dict[str, Any] = {}
    for model_type in model_types:
        try:
            results[model_type] = _time_model(model_type, sizes, repeats)
        except Skip as exc:
            results[model_type] = {"skipped": str(exc)}
        except Exception as exc:  # noqa: BLE001 - one broken model must not hide the others' figures
            results[model_type] = {"error": f"{type(exc).__name__}: {exc}"}
    return {"models": results, "threads": torch.get_num_threads(), "torch": torch.__version__}


def _child_memory(model_type: str, variant: str, sizes: RuntimeSizes) -> dict[str, Any]:
    from benchmarks.peak_memory import peak_memory
    from modelgraft.models.ops import bound_ops
    from modelgraft.models.testing import causal_lm_batch, seed_everything

    config, upstream_cls, generated_cls = _prepare(model_type, sizes)
    seed_everything(0)
    model = (upstream_cls if variant == "upstream" else generated_cls)(config).float().train()
    batch = causal_lm_batch(config, batch_size=sizes.batch_size, seq_len=sizes.seq_len, seed=0)
    with bound_ops(_ops(model_type)):
        for _ in range(sizes.warmup):
            train_step(model, batch)
        model.zero_grad(set_to_none=True)
        with peak_memory() as peak:
            train_step(model, batch)
    return {"peak_mib": peak.peak_delta_mib, "baseline_mib": peak.baseline_mib, "method": peak.method}


def child_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="runtime benchmark child process (run by benchmarks.run)")
    parser.add_argument("mode", choices=("timing", "memory"))
    parser.add_argument("--models", required=True, help="comma-separated model types")
    parser.add_argument("--variant", choices=VARIANTS, action="append", help="memory mode (repeatable)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sizes", required=True, help="RuntimeSizes as JSON")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    sizes = RuntimeSizes(**json.loads(args.sizes))
    _set_threads(args.threads)
    if args.mode == "timing":
        emit_result(_child_timing(args.models.split(","), sizes, args.repeats))
    else:
        emit_result({variant: _child_memory(args.models, variant, sizes) for variant in args.variant})


# ---------------------------------------------------------------- parent side (torch-free)


def registered_models() -> list[str]:
    """Every model type the zoo registers (importing ``modelgraft.models`` is torch-free)."""
    from modelgraft.models import MODELING_REGISTRY

    return list(MODELING_REGISTRY)


def _sides(model_type: str) -> str:
    """What a row compares: the generated model's kernels, when it runs any, against upstream's default."""
    if model_type not in HYBRID:
        return "generated / upstream"
    return f"generated ({'/'.join(sorted(set(HYBRID_KERNELS.values())))} kernels) / upstream default"


def _timing_row(model_type: str, result: dict[str, Any]) -> Row:
    times = result["times"]
    ratios = [g / u for g, u in zip(times["generated"], times["upstream"], strict=True)]
    ratio = summarize(ratios)
    upstream, generated = summarize(times["upstream"]), summarize(times["generated"])
    limit = budgets.TRAIN_STEP_RATIO
    return Row(
        SECTION,
        f"{model_type}: train step time, {_sides(model_type)}",
        f"{ratio.median:.3f}x",
        ratio.spread(),
        f"<= {limit:g} (+{budgets.TRAIN_STEP_NOISE:g} noise)",
        judge_at_most(ratio.median, limit, noise=budgets.TRAIN_STEP_NOISE),
        f"median step: upstream {upstream.median:.3f} s, generated {generated.median:.3f} s; "
        f"first-step loss |diff| {result['loss_abs_diff']:.1e}",
    )


def _memory_child(model_type: str, variants: Sequence[str], sizes: RuntimeSizes, threads: int) -> dict[str, Any]:
    args = [
        "memory",
        "--models",
        model_type,
        *(f"--variant={v}" for v in variants),
        "--sizes",
        json.dumps(asdict(sizes)),
    ]
    return run_child(MODULE, [*args, "--threads", str(threads)], extra_env=MEASURE_ENV)


def _memory_row(model_type: str, sizes: RuntimeSizes, threads: int, *, child_per_figure: bool = True) -> Row:
    """Each side's peak in a process of its own; with ``child_per_figure=False`` (a smoke run, whose figures mean
    nothing) both in one, since an interpreter with torch costs more than the toy steps."""
    name = f"{model_type}: train step peak memory, {_sides(model_type)}"
    groups = [[variant] for variant in VARIANTS] if child_per_figure else [list(VARIANTS)]
    # Peak RSS is per process, so the two sides may run side by side: CPU contention moves time, not memory.
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        futures = [pool.submit(_memory_child, model_type, group, sizes, threads) for group in groups]
    try:
        peaks = {variant: peak for future in futures for variant, peak in future.result().items()}
    except ChildError as exc:
        return Row(SECTION, name, "error", status=FAILED, notes=str(exc)[-500:])
    up, gen = peaks["upstream"]["peak_mib"], peaks["generated"]["peak_mib"]
    return Row(
        SECTION,
        name,
        f"{gen / up:.3f}x" if up else "n/a",
        status=INFO,
        notes=f"generated {gen:.0f} MiB, upstream {up:.0f} MiB over the weights ({peaks['upstream']['method']})",
    )


def bench_runtime(
    repeats: int,
    sizes: RuntimeSizes,
    model_types: Sequence[str] | None = None,
    *,
    threads: int = 1,
    child_per_figure: bool = True,
) -> tuple[list[Row], str]:
    """Rows for every selected model (default: every registered one), and a line on how the steps ran."""
    selected = list(model_types) if model_types else registered_models()
    args = ["timing", "--models", ",".join(selected), "--repeats", str(repeats), "--sizes", json.dumps(asdict(sizes))]
    try:
        timing = run_child(MODULE, [*args, "--threads", str(threads)])
    except ChildError as exc:
        return [Row(SECTION, "train step, all models", "error", status=FAILED, notes=str(exc)[-500:])], ""
    rows: list[Row] = []
    for model_type in selected:
        result = timing["models"][model_type]
        if "skipped" in result:
            rows.append(Row(SECTION, f"{model_type}: train step", "-", status=SKIPPED, notes=result["skipped"]))
            continue
        if "error" in result:
            rows.append(
                Row(SECTION, f"{model_type}: train step", "error", status=FAILED, notes=result["error"][-500:])
            )
            continue
        rows.append(_timing_row(model_type, result))
        rows.append(_memory_row(model_type, sizes, threads, child_per_figure=child_per_figure))
    setup = f"runtime: {sizes.describe()}; torch {timing['torch']}, {timing['threads']} torch thread(s)"
    return rows, setup


if __name__ == "__main__":
    child_main()
