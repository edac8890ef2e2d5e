"""MoE benchmark on CPU: this repo's experts kernels against upstream transformers' experts implementations.

The kernels are ``grouped`` and ``grouped_compiled`` (``grouped``'s loops with its backward's gated-unit block
compiled by inductor: ``OURS``); ``--smoke`` runs ``grouped`` alone, since inductor's compile would cost more
than the toy steps.

Three kinds of figure, all forward + backward, fp32, each timed in a fresh child process of its own (one per
kernel layout, one per model, one per configuration and round in the last kind, so no measurement inherits
another's allocator state), with the variants interleaved and their order rotated every round (so drift of a
shared machine hits all alike):

- kernel: one routed-experts layer at several (experts, top-k, tokens) shapes, in each expert layout
  of ``KERNEL_LAYOUTS``: ``Qwen3MoeExperts``'s fused gate-first ``[E, 2I, H]`` weights (also DeepSeek-V3's
  and GLM-MoE-DSA's), ``GptOssExperts``'s transposed ``[E, H, 2I]`` weights with interleaved gate/up
  columns, biases and the clamped SwiGLU (limit 7.0, alpha 1.702), and ``DeepseekV4Experts``'s fused
  weights with the clamped SwiGLU (limit 10.0). ``grouped`` (this repo's kernel, given the slot options
  the generated code passes) against upstream's ``eager`` loop and ``grouped_mm``
  (``torch.nn.functional.grouped_mm``), the implementations upstream runs on CPU.
  ``batched_mm`` gathers one weight matrix per (token, expert) pair; at these shapes that is tens of
  GiB, so it is reported as skipped with its size;
- model: one training step of every sparse model registered in ``modelgraft.models.MODELING_REGISTRY`` (a new MoE
  model joins without an edit; its sizes: ``benchmarks.moe_sizes``): the generated class with the
  ``moe_experts`` slot bound to ``grouped``, the ``chunked`` loss (and a sparse-attention indexer, where the model
  has one, to ``shared_keys``: ``GENERATED_KERNELS``), and in the ``grouped_compiled`` rows that kernel with the
  ``compiled`` family's RMSNorm, rotary embedding and gated MLP (``COMPILED_STEP_KERNELS``: what a user with a C++
  compiler binds on a CPU), against the upstream class with its default experts
  implementation (``grouped_mm`` on CPU, what ``from_pretrained`` picks) and with each other CPU
  implementation; same config, seed and weights (``modelgraft.models.testing.build_pair``). Upstream runs the
  attention ``from_pretrained`` picks (``default_attention``); the generated side runs
  ``modelgraft.models.attention``'s ``fused_attention`` where upstream's attention misses torch's fused CPU kernel
  (MLA widths, sinks, DSA indices: ``generated_attention``).

- model, a process per configuration: qwen3_moe's step again (``PROCESS_PER_CONFIGURATION_MODELS``), each
  kernel and upstream's default in a fresh process of their own every round, the order rotated each round (the
  MoE budget's protocol; above, the variants share one process and so its allocator).

Each figure is a speed-up: the median over rounds of ``upstream time / kernel time`` (above 1: the kernel
is faster), judged against ``budgets.MOE_SPEEDUP_VS_DEFAULT`` for upstream's default and
``budgets.MOE_SPEEDUP_VS_FASTEST`` for the fastest upstream implementation of that run (by median
time); the notes give every round's ratio against the default, and the first call's time of each kernel
(``grouped_compiled``'s includes inductor's compile). Peak memory of a step is measured per variant in its
own child (``benchmarks.peak_memory``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from benchmarks import budgets
from benchmarks.child import ChildError, emit_result, run_child
from benchmarks.moe_sizes import EXPERT_KEYS, SMOKE_SIZES, MoeSizes
from benchmarks.peak_memory import MEASURE_ENV
from benchmarks.report import FAILED, INFO, SKIPPED, Row, judge_at_least
from benchmarks.runtime_bench import train_step
from benchmarks.stats import seconds_per_call, summarize

# The sizes live in benchmarks.moe_sizes; run.py picks them from here with the section.
__all__ = ["SMOKE_SIZES", "MoeSizes", "bench_moe", "child_main", "sparse_models"]

SECTION = "moe"
#: The one model of a ``--smoke`` run: the MoE category's reference model (docs/design.md).
SMOKE_MODEL = "qwen3_moe"
MODULE = "benchmarks.moe_bench"
GROUPED = "grouped"
#: ``grouped`` with its backward's gated-unit block compiled by inductor (``modelgraft.models.ops.kernels.compiled_experts``).
COMPILED = "grouped_compiled"
#: This repo's experts kernels, each judged against upstream's implementations.
OURS = (GROUPED, COMPILED)
#: Upstream's experts implementations that run on CPU; the first is its default there.
UPSTREAM = ("grouped_mm", "eager")
UPSTREAM_DEFAULT = UPSTREAM[0]
#: Models whose train step is also timed with each configuration in a process of its own
#: (:func:`_process_per_configuration_rows`): the step the MoE budget names, qwen3_moe's.
PROCESS_PER_CONFIGURATION_MODELS = ("qwen3_moe",)
#: Timed steps in each of those processes, after the warm-up; the process's figure is their median.
STEPS_PER_PROCESS = 3
#: The generated model's kernels in the train-step rows: ``grouped`` experts (or the kernel of ``OURS`` a row
#: times), the ``chunked`` causal-LM loss, and the ``shared_keys`` indexers of the models that have a
#: sparse-attention indexer (a slot a model never calls costs nothing). None of them needs a compiler.
GENERATED_KERNELS = {
    "moe_experts": GROUPED,
    "causal_lm_loss": "chunked",
    "dsa_indexer": "shared_keys",
    "lightning_indexer": "shared_keys",
}
#: What a ``grouped_compiled`` train-step row binds besides: the other family inductor compiles on a CPU, every slot of it
#: (``modelgraft.models.ops.kernels.compiled_references``), so that row is the step of a user with a C++ compiler and
#: the ``grouped`` row the step of one without.
COMPILED_STEP_KERNELS = dict.fromkeys(("rms_norm", "rope", "glu_activation", "gated_mlp"), "compiled")


def generated_kernels(kernel: str) -> dict[str, str]:
    """The kernels of a train-step row timing ``kernel`` (one of ``OURS``) on the experts slot: ``GENERATED_KERNELS``,
    and ``COMPILED_STEP_KERNELS`` with ``grouped_compiled``."""
    return {**GENERATED_KERNELS, **(COMPILED_STEP_KERNELS if kernel == COMPILED else {}), "moe_experts": kernel}


#: The children's environment for inductor: compile in the process, as the compile tests do. Its default on a 2-core
#: machine starts a pool of compile workers first, about 17 s of a kernel's first call (docs/compile.md).
COMPILE_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
#: Expert layouts of the kernel rows: the upstream experts class, and the label its rows carry.
KERNEL_LAYOUTS = {
    "qwen3_moe": "experts layer",
    "gpt_oss": "gpt_oss experts layer (interleaved, biases, clamped)",
    "deepseek_v4": "deepseek_v4 experts layer (clamped)",
}


# ---------------------------------------------------------------- child side (imports torch)


class Skip(Exception):
    """This model cannot be benchmarked here; the message says why."""


def _rotated(variants: Sequence[str], round_: int) -> list[str]:
    shift = round_ % len(variants)
    return list(variants[shift:]) + list(variants[:shift])


def _interleaved(step: Any, variants: Sequence[str], repeats: int, warmup: int = 1) -> dict[str, Any]:
    """Warm-up calls of every variant (the first one timed: a compiled kernel compiles there), then ``repeats``
    timed rounds with the variants' order rotated each round. Returns the first results, first-call and round times.
    """
    first: dict[str, Any] = {}
    first_s: dict[str, float] = {}
    for variant in variants:
        start = time.perf_counter()
        first[variant] = step(variant)
        first_s[variant] = time.perf_counter() - start
    for _ in range(warmup - 1):
        for variant in variants:
            step(variant)
    times: dict[str, list[float]] = {variant: [] for variant in variants}
    for round_ in range(repeats):
        for variant in _rotated(variants, round_):
            start = time.perf_counter()
            step(variant)
            times[variant].append(time.perf_counter() - start)
    return {"first": first, "first_s": first_s, "times": times}


def _experts_module(layout: str, num_experts: int, sizes: MoeSizes) -> tuple[Any, Any, dict[str, Any]]:
    """(upstream experts module, its config, the slot keywords the generated sparse block passes)."""
    if layout == "gpt_oss":
        from transformers import GptOssConfig
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

        config = GptOssConfig(
            hidden_size=sizes.hidden_size, intermediate_size=sizes.moe_intermediate_size, num_local_experts=num_experts
        )
        experts = GptOssExperts(config)
        options = {
            "layout": "transposed",
            "interleaved": True,
            "gate_up_bias": experts.gate_up_proj_bias,
            "down_bias": experts.down_proj_bias,
            "limit": experts.limit,
            "alpha": experts.alpha,
        }
        return experts, config, options
    if layout == "deepseek_v4":
        from transformers import DeepseekV4Config
        from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Experts

        config = DeepseekV4Config(
            hidden_size=sizes.hidden_size,
            moe_intermediate_size=sizes.moe_intermediate_size,
            n_routed_experts=num_experts,
        )
        experts = DeepseekV4Experts(config)
        return experts, config, {"limit": experts.limit}
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

    config = Qwen3MoeConfig(
        hidden_size=sizes.hidden_size, moe_intermediate_size=sizes.moe_intermediate_size, num_experts=num_experts
    )
    return Qwen3MoeExperts(config), config, {}


def _time_experts_layer(
    shape: tuple[int, int, int], sizes: MoeSizes, repeats: int, layout: str, kernels: Sequence[str]
) -> dict[str, Any]:
    import torch

    from modelgraft.models.ops.kernels import load_kernel

    ours = {kernel: load_kernel("moe_experts", kernel) for kernel in kernels}
    num_experts, top_k, tokens = shape
    experts, config, options = _experts_module(layout, num_experts, sizes)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in experts.parameters():
            param.normal_(0, 0.02, generator=generator)
    hidden = torch.randn(tokens, sizes.hidden_size, generator=generator).requires_grad_(True)
    probs = torch.randn(tokens, num_experts, generator=generator).softmax(-1)
    weights, index = torch.topk(probs, top_k, dim=-1)
    weights.requires_grad_(True)
    grad = torch.randn(tokens, sizes.hidden_size, generator=generator)

    def step(variant: str) -> torch.Tensor:
        experts.zero_grad(set_to_none=True)
        hidden.grad = weights.grad = None
        if variant in ours:
            out = ours[variant](
                hidden, index, weights, experts.gate_up_proj, experts.down_proj, config.hidden_act, **options
            )
        else:
            config._experts_implementation = variant
            out = experts(hidden, index, weights)
        out.backward(grad)
        return out.detach()

    variants = (*kernels, *UPSTREAM)
    run = _interleaved(step, variants, repeats)  # the warm-up's outputs are compared
    outputs = run["first"]
    reference = outputs[UPSTREAM_DEFAULT]
    max_rel = max(float((outputs[v] - reference).abs().max() / reference.abs().max()) for v in variants)
    return {
        "shape": list(shape),
        "layout": layout,
        "times": run["times"],
        "first_s": run["first_s"],
        "max_rel_diff": max_rel,
    }


def _kernel_timing(layout: str, sizes: MoeSizes, repeats: int, kernels: Sequence[str]) -> dict[str, Any]:
    import torch

    shapes = [_time_experts_layer(shape, sizes, repeats, layout, kernels) for shape in sizes.kernel_shapes]
    return {"shapes": shapes, "threads": torch.get_num_threads(), "torch": torch.__version__}


def _prepare(model_type: str, sizes: MoeSizes):
    """(config with upstream's attention, upstream class, generated class, the generated side's attention)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from modelgraft.models import MODEL_CONFIG_REGISTRY
    from modelgraft.models.loader import get_model_class
    from modelgraft.models.testing import tiny_config

    architecture = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if architecture is None:
        raise Skip(f"transformers has no causal-LM class for {model_type!r}")
    config_cls = MODEL_CONFIG_REGISTRY[model_type]
    defaults = config_cls().to_dict()
    if not any(key in defaults for key in EXPERT_KEYS):
        raise Skip("dense model")
    config = tiny_config(config_cls, **sizes.config_overrides(defaults, getattr(config_cls, "attribute_map", {})))
    upstream = get_model_class(model_type, architecture, use_hf=True)
    config._attn_implementation = default_attention(upstream, config)
    try:
        generated = get_model_class(model_type, architecture)
    except (ImportError, KeyError, TypeError) as exc:
        raise Skip(f"generated module not available: {exc}") from exc
    # set_attn_implementation("fused_attention") on the generated model registers the name (docs/design.md).
    return config, upstream, generated, generated_attention(upstream, config)


def default_attention(upstream_cls: Any, config: Any) -> str:
    """The attention upstream's side runs: the one ``from_pretrained`` gives ``upstream_cls`` on CPU (sdpa where
    the class supports it, else eager). (A DSA model's sdpa path lost its causal and sparse masks before
    transformers 5.25, so earlier rows of docs/performance.md ran eager there.)

    The tiny configs ask for eager attention (exact parity tests); a train step against upstream's default
    should run upstream's default attention.
    """
    if not getattr(upstream_cls, "_supports_sdpa", False):
        return "eager"
    return "sdpa"


def generated_attention(upstream_cls: Any, config: Any) -> str:
    """The attention the generated side runs: upstream's side's own where that is sdpa's fused CPU kernel
    already (sdpa, no latent attention), else ``fused_attention`` (``modelgraft.models.attention``): the fused kernel for
    MLA's unequal head widths (``kv_lora_rank`` in the config), sinks and DSA indices, where upstream runs
    sdpa's math path or eager attention. (``fused_attention`` builds eager's additive masks, which cost a
    few % of a plain model's step against sdpa's causal flag.)"""
    from modelgraft.models.attention import FUSED_ATTENTION

    upstream = default_attention(upstream_cls, config)
    return upstream if upstream == "sdpa" and not hasattr(config, "kv_lora_rank") else FUSED_ATTENTION


def sparse_models() -> list[str]:
    """Every registered model type whose config routes to experts and that transformers builds as a causal LM
    (imports transformers: child side). A VLM's own text type (mistral_large4_text) has no causal LM of its
    own: its experts are measured through the text models that have one."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from modelgraft.models import MODEL_CONFIG_REGISTRY, MODELING_REGISTRY

    found = []
    for model_type in MODELING_REGISTRY:
        if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            continue
        keys = MODEL_CONFIG_REGISTRY[model_type]().to_dict()
        if any(key in keys for key in EXPERT_KEYS):
            found.append(model_type)
    return found


def _model_timing(model_type: str, sizes: MoeSizes, repeats: int, kernels: Sequence[str]) -> dict[str, Any]:
    from modelgraft.models.ops import OpsConfig, bound_ops
    from modelgraft.models.ops.binding import current_bindings, restore_bindings
    from modelgraft.models.testing import build_pair, causal_lm_batch

    config, upstream_cls, generated_cls, attention = _prepare(model_type, sizes)
    pair = build_pair(config, upstream_cls, generated_cls, seed=0)
    pair.generated.set_attn_implementation(attention)
    batch = causal_lm_batch(config, batch_size=sizes.batch_size, seq_len=sizes.seq_len, seed=0)
    # Each kernel's bindings resolved once; a step puts back its variant's (upstream's classes consult no slot).
    bindings = {}
    for kernel in kernels:
        with bound_ops(OpsConfig(generated_kernels(kernel))):
            bindings[kernel] = current_bindings()

    def step(variant: str) -> float:
        if variant in kernels:
            restore_bindings(bindings[variant])
            return train_step(pair.generated, batch)
        pair.upstream.set_experts_implementation(variant)
        return train_step(pair.upstream, batch)

    variants = (*kernels, *UPSTREAM)
    with bound_ops(OpsConfig()):  # restores the process's bindings afterwards
        run = _interleaved(step, variants, repeats, warmup=sizes.warmup)
    losses = run["first"]
    loss_diff = max(abs(losses[v] - losses[UPSTREAM_DEFAULT]) for v in variants)
    return {
        "times": run["times"],
        "first_s": run["first_s"],
        "loss_abs_diff": loss_diff,
        "attention": [config._attn_implementation, attention],
    }


def _step_timing(model_type: str, variant: str, sizes: MoeSizes, steps: int) -> dict[str, Any]:
    """One configuration's train steps alone in this process: the first (timed apart, a compiled kernel compiles
    there), the rest of the warm-up, then ``steps`` timed ones. The pair is built as in :func:`_model_timing` (same
    seed, same weights, so the first-step losses of separate processes compare) and the other side dropped, so the
    process's allocator serves this configuration alone."""
    from modelgraft.models.ops import OpsConfig, bound_ops
    from modelgraft.models.testing import build_pair, causal_lm_batch

    config, upstream_cls, generated_cls, attention = _prepare(model_type, sizes)
    pair = build_pair(config, upstream_cls, generated_cls, seed=0)
    if variant in OURS:
        model, ops = pair.generated, OpsConfig(generated_kernels(variant))
        model.set_attn_implementation(attention)
    else:
        model, ops = pair.upstream, OpsConfig()
        model.set_experts_implementation(variant)
    del pair
    batch = causal_lm_batch(config, batch_size=sizes.batch_size, seq_len=sizes.seq_len, seed=0)
    with bound_ops(ops):
        start = time.perf_counter()
        loss = train_step(model, batch)
        first_s = time.perf_counter() - start
        for _ in range(sizes.warmup - 1):
            train_step(model, batch)
        times = seconds_per_call(lambda: train_step(model, batch), steps)
    return {"times": times, "first_s": first_s, "loss": loss}


def _child_models(model_types: Sequence[str], sizes: MoeSizes, repeats: int, kernels: Sequence[str]) -> dict[str, Any]:
    import torch

    results: dict[str, Any] = {}
    for model_type in model_types or sparse_models():
        try:
            results[model_type] = _model_timing(model_type, sizes, repeats, kernels)
        except Skip as exc:
            results[model_type] = {"skipped": str(exc)}
        except Exception as exc:  # noqa: BLE001 - one broken model must not hide the others' figures
            results[model_type] = {"error": f"{type(exc).__name__}: {exc}"}
    return {"models": results, "threads": torch.get_num_threads()}


def _child_memory(model_type: str, variant: str, sizes: MoeSizes) -> dict[str, Any]:
    from benchmarks.peak_memory import peak_memory
    from modelgraft.models.ops import OpsConfig, bound_ops
    from modelgraft.models.testing import causal_lm_batch, seed_everything

    config, upstream_cls, generated_cls, attention = _prepare(model_type, sizes)
    seed_everything(0)
    if variant in OURS:
        model, ops = generated_cls(config), OpsConfig(generated_kernels(variant))
        model.set_attn_implementation(attention)
    else:
        model, ops = upstream_cls(config), OpsConfig()
        model.set_experts_implementation(variant)
    model = model.float().train()
    batch = causal_lm_batch(config, batch_size=sizes.batch_size, seq_len=sizes.seq_len, seed=0)
    with bound_ops(ops):
        for _ in range(sizes.warmup):
            train_step(model, batch)
        model.zero_grad(set_to_none=True)
        with peak_memory() as peak:
            train_step(model, batch)
    return {"peak_mib": peak.peak_delta_mib, "method": peak.method}


def child_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="MoE benchmark child process (run by benchmarks.run)")
    parser.add_argument("mode", choices=("kernel", "models", "step", "memory", "list"))
    parser.add_argument("--models", default="", help="comma-separated model types (default: every sparse one)")
    parser.add_argument(
        "--layout", choices=tuple(KERNEL_LAYOUTS), action="append", help="kernel mode: an expert layout (repeatable)"
    )
    parser.add_argument(
        "--variant", choices=(*OURS, *UPSTREAM), action="append", help="memory mode (repeatable); step mode (once)"
    )
    parser.add_argument(
        "--kernels",
        default=",".join(OURS),
        help=f"kernel and models modes: this repo's kernels to time ({', '.join(OURS)})",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds; step mode: timed steps")
    parser.add_argument("--sizes", required=True, help="MoeSizes as JSON")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    raw = json.loads(args.sizes)
    raw["kernel_shapes"] = tuple(tuple(shape) for shape in raw["kernel_shapes"])
    sizes = MoeSizes(**raw)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    models = [m for m in args.models.split(",") if m]
    kernels = [kernel for kernel in args.kernels.split(",") if kernel]
    if args.mode == "list":
        emit_result({"models": sparse_models()})
    elif args.mode == "kernel":
        emit_result({layout: _kernel_timing(layout, sizes, args.repeats, kernels) for layout in args.layout})
    elif args.mode == "models":
        emit_result(_child_models(models, sizes, args.repeats, kernels))
    elif args.mode == "step":
        (variant,) = args.variant
        emit_result(_step_timing(models[0], variant, sizes, args.repeats))
    else:
        emit_result({variant: _child_memory(models[0], variant, sizes) for variant in args.variant})


# ---------------------------------------------------------------- parent side (torch-free)


def _speedup_rows(label: str, result: dict[str, Any], unit: str, scale: float, *, last_notes: str = "") -> list[Row]:
    """Two judged rows per kernel of ``OURS`` in ``result``: against upstream's default, and against the fastest
    upstream variant of the run. ``last_notes`` goes on each kernel's second row."""
    times = result["times"]
    kernels = [kernel for kernel in OURS if kernel in times]
    medians = {variant: summarize(values).median for variant, values in times.items()}
    fastest = min(UPSTREAM, key=lambda variant: medians[variant])
    timings = ", ".join(f"{v} {medians[v] * scale:.0f} {unit}" for v in (*kernels, *UPSTREAM))
    first = result.get("first_s", {})
    rows = []
    for kernel in kernels:
        for what, baseline, floor in (
            ("upstream default", UPSTREAM_DEFAULT, budgets.MOE_SPEEDUP_VS_DEFAULT),
            ("fastest upstream", fastest, budgets.MOE_SPEEDUP_VS_FASTEST),
        ):
            per_round = [b / g for b, g in zip(times[baseline], times[kernel], strict=True)]
            ratios = summarize(per_round)
            notes = f"median: {timings}"
            if what == "upstream default":
                every = "yes" if ratios.low >= floor else "no"
                notes += f"; rounds: {', '.join(f'{r:.2f}' for r in per_round)} (every round >= {floor:g}x: {every})"
                if kernel in first:
                    notes += (
                        f"; first call {first[kernel]:.2f} s ({kernel}), {first[UPSTREAM_DEFAULT]:.2f} s (upstream)"
                    )
            else:
                notes += last_notes
            rows.append(
                Row(
                    SECTION,
                    f"{label}: {kernel} vs {what} ({baseline})",
                    f"{ratios.median:.2f}x faster",
                    ratios.spread("{:.2f}"),
                    f">= {floor:g}x (-{budgets.MOE_SPEEDUP_NOISE:g} noise)",
                    judge_at_least(ratios.median, floor, noise=budgets.MOE_SPEEDUP_NOISE),
                    notes,
                )
            )
    return rows


def _batched_mm_gib(sizes: MoeSizes, num_experts: int, top_k: int, tokens: int) -> float:
    # batched_mm indexes gate_up_proj and down_proj by every pair's expert: 3 x H x I floats per pair.
    return tokens * top_k * 3 * sizes.hidden_size * sizes.moe_intermediate_size * 4 / 2**30


def _memory_row(
    model_type: str, sizes: MoeSizes, threads: int, kernels: Sequence[str], *, child_per_figure: bool = True
) -> Row:
    name = f"{model_type}: train step peak memory, grouped / upstream default"
    variants = (*kernels, UPSTREAM_DEFAULT, "eager")
    peaks = {}
    try:
        for group in [[variant] for variant in variants] if child_per_figure else [list(variants)]:
            args = [
                "memory",
                "--models",
                model_type,
                *(f"--variant={v}" for v in group),
                "--sizes",
                json.dumps(asdict(sizes)),
            ]
            peaks.update(
                run_child(MODULE, [*args, "--threads", str(threads)], extra_env={**MEASURE_ENV, **COMPILE_ENV})
            )
    except ChildError as exc:
        return Row(SECTION, name, "error", status=FAILED, notes=str(exc)[-500:])
    mib = {variant: peak["peak_mib"] for variant, peak in peaks.items()}
    default = mib[UPSTREAM_DEFAULT]
    return Row(
        SECTION,
        name,
        f"{mib[GROUPED] / default:.3f}x" if default else "n/a",
        status=INFO,
        notes=", ".join(f"{v} {m:.0f} MiB" for v, m in mib.items())
        + f" over the weights ({peaks[GROUPED]['method']})",
    )


def bench_moe(
    repeats: int,
    sizes: MoeSizes,
    model_types: Sequence[str] | None = None,
    *,
    threads: int = 1,
    child_per_figure: bool = True,
    kernels: Sequence[str] | None = None,
) -> tuple[list[Row], str]:
    """Kernel rows, then per sparse model its step-time and peak-memory rows; and a line on the setup.

    ``child_per_figure=False`` times every layout in one child, and measures every variant's peak in one:
    a smoke run's figures mean nothing, and an interpreter with torch costs more than its toy steps.
    ``kernels``: which of ``OURS`` to time; by default all of them, but a smoke run (``child_per_figure=False``)
    times ``grouped`` alone, since inductor's compile of ``grouped_compiled`` would cost more than its toy steps.
    """
    if kernels is None:
        kernels = OURS if child_per_figure else (GROUPED,)
    rows: list[Row] = []
    common = [
        "--repeats",
        str(repeats),
        "--sizes",
        json.dumps(asdict(sizes)),
        "--threads",
        str(threads),
        "--kernels",
        ",".join(kernels),
    ]
    threads_used = "?"
    groups = [[layout] for layout in KERNEL_LAYOUTS] if child_per_figure else [list(KERNEL_LAYOUTS)]
    for layouts in groups:
        try:
            measured = run_child(
                MODULE, ["kernel", *(f"--layout={layout}" for layout in layouts), *common], extra_env=COMPILE_ENV
            )
        except ChildError as exc:
            rows += [
                Row(SECTION, KERNEL_LAYOUTS[layout], "error", status=FAILED, notes=str(exc)[-500:])
                for layout in layouts
            ]
            continue
        for layout in layouts:
            threads_used = measured[layout]["threads"]
            rows += _kernel_rows(KERNEL_LAYOUTS[layout], measured[layout]["shapes"])
    rows.append(_batched_mm_row(sizes))
    try:
        listed = model_types or run_child(MODULE, ["list", *common])["models"]
    except ChildError as exc:
        rows.append(Row(SECTION, "train step, MoE models", "error", status=FAILED, notes=str(exc)[-500:]))
        listed = []
    for model_type in listed:
        rows += _model_rows(model_type, sizes, common, threads, kernels, child_per_figure=child_per_figure)
        if model_type in PROCESS_PER_CONFIGURATION_MODELS:
            rows += _process_per_configuration_rows(model_type, sizes, repeats, threads, kernels)
    setup = f"moe: {sizes.describe()}; kernels {', '.join(kernels)}; {threads_used} torch thread(s); " + (
        "each layout, each model and each peak-memory variant in a process of its own"
        if child_per_figure
        else "the kernel layouts in one process, each model's step times in one, its peaks in one"
    )
    return rows, setup


def _process_per_configuration_rows(
    model_type: str, sizes: MoeSizes, rounds: int, threads: int, kernels: Sequence[str]
) -> list[Row]:
    """The budget's protocol for a model's step: each configuration (each kernel of ``kernels``, and upstream's
    default) in a fresh process of its own, ``rounds`` rounds with the order rotated each round; a round's ratio is
    upstream's figure over the kernel's, each the median of :data:`STEPS_PER_PROCESS` timed steps of its process.

    The in-process rows (:func:`_model_rows`) run every variant in one process, where each side's allocations also
    shape the other's (glibc's ``mmap`` threshold adapts to what the process freed before); here neither side
    inherits the other's heap.
    """
    variants = (*kernels, UPSTREAM_DEFAULT)
    figures: dict[str, list[float]] = {variant: [] for variant in variants}
    losses: dict[str, float] = {}
    try:
        for round_ in range(rounds):
            for variant in _rotated(variants, round_):
                args = ["step", "--models", model_type, "--variant", variant, "--repeats", str(STEPS_PER_PROCESS)]
                args += ["--sizes", json.dumps(asdict(sizes)), "--threads", str(threads)]
                result = run_child(MODULE, args, extra_env=COMPILE_ENV)
                figures[variant].append(summarize(result["times"]).median)
                losses.setdefault(variant, result["loss"])
    except ChildError as exc:
        return [Row(SECTION, _process_per_configuration_name(model_type, kernels[0]), "error", status=FAILED,
                    notes=str(exc)[-500:])]  # fmt: skip
    return [process_per_configuration_row(model_type, kernel, figures, losses) for kernel in kernels]


def _process_per_configuration_name(model_type: str, kernel: str) -> str:
    return f"{model_type}: train step, a process per configuration: {kernel} vs upstream default ({UPSTREAM_DEFAULT})"


def process_per_configuration_row(
    model_type: str, kernel: str, figures: dict[str, list[float]], losses: dict[str, float]
) -> Row:
    """The judged row of ``kernel`` from each configuration's per-round step times (s) and first-step losses."""
    per_round = [b / g for b, g in zip(figures[UPSTREAM_DEFAULT], figures[kernel], strict=True)]
    ratios = summarize(per_round)
    floor = budgets.MOE_SPEEDUP_VS_DEFAULT
    every = "yes" if ratios.low >= floor else "no"
    medians = {
        variant: summarize(times).median for variant, times in figures.items() if variant in (kernel, UPSTREAM_DEFAULT)
    }
    notes = (
        f"median: {', '.join(f'{v} {t:.3f} s' for v, t in medians.items())}; "
        f"rounds: {', '.join(f'{r:.2f}' for r in per_round)} (every round >= {floor:g}x: {every}); "
        f"first-step loss |diff| {abs(losses[kernel] - losses[UPSTREAM_DEFAULT]):.1e}; "
        f"{STEPS_PER_PROCESS} timed steps per process after its warm-up"
    )
    return Row(
        SECTION,
        _process_per_configuration_name(model_type, kernel),
        f"{ratios.median:.2f}x faster",
        ratios.spread("{:.2f}"),
        f">= {floor:g}x (-{budgets.MOE_SPEEDUP_NOISE:g} noise)",
        judge_at_least(ratios.median, floor, noise=budgets.MOE_SPEEDUP_NOISE),
        notes,
    )


def _kernel_rows(name: str, shapes: list[dict[str, Any]]) -> list[Row]:
    rows: list[Row] = []
    for result in shapes:
        num_experts, top_k, tokens = result["shape"]
        rows += _speedup_rows(
            f"{name} E={num_experts} k={top_k} {tokens} tokens, fwd+bwd",
            result,
            "ms",
            1000.0,
            last_notes=f"; max rel diff {result['max_rel_diff']:.0e}",
        )
    return rows


def _batched_mm_row(sizes: MoeSizes) -> Row:
    num_experts, top_k, tokens = sizes.kernel_shapes[-1]
    gib = _batched_mm_gib(sizes, num_experts, top_k, tokens)
    return Row(
        SECTION,
        "experts layer: upstream batched_mm",
        "-",
        status=SKIPPED,
        notes=f"gathers a weight matrix per (token, expert) pair: {gib:.1f} GiB at E={num_experts} k={top_k} "
        f"{tokens} tokens, before autograd keeps it",
    )


def _model_rows(
    model_type: str,
    sizes: MoeSizes,
    common: list[str],
    threads: int,
    kernels: Sequence[str],
    *,
    child_per_figure: bool = True,
) -> list[Row]:
    """Step-time rows of one model, timed in a child of its own, and its peak-memory row."""
    name = f"{model_type}: train step"
    try:
        result = run_child(MODULE, ["models", "--models", model_type, *common], extra_env=COMPILE_ENV)
        result = result["models"][model_type]
    except ChildError as exc:
        return [Row(SECTION, name, "error", status=FAILED, notes=str(exc)[-500:])]
    if "skipped" in result:
        return [Row(SECTION, name, "-", status=SKIPPED, notes=result["skipped"])]
    if "error" in result:
        return [Row(SECTION, name, "error", status=FAILED, notes=result["error"][-500:])]
    upstream_attention, attention = result["attention"]
    notes = f"; first-step loss |diff| {result['loss_abs_diff']:.1e}; attention: {attention} (upstream: {upstream_attention})"
    rows = _speedup_rows(name, result, "ms", 1000.0, last_notes=notes)
    return [*rows, _memory_row(model_type, sizes, threads, kernels, child_per_figure=child_per_figure)]


if __name__ == "__main__":
    child_main()
