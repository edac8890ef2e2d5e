"""Composed (LLaVA-style) VLM train step on CPU: the generated model with its CPU kernels against upstream's default.

The model and batch are a zoo model's composed declaration (``models/<m>/tests``, default llava_onevision): its
tiny config, and its own processor's rows with one image each, so the step runs the generated vision tower, the
projector, the image scatter and the generated decoder (both towers built by ``build_sub_model``). Upstream runs
as transformers ships it; the generated side has its CPU kernel bound (``causal_lm_loss``: ``chunked``). Both
sides are built from the same state dict and timed in one child process, interleaved and swapping which goes
first every round, as ``benchmarks.vlm_bench`` does; the figure is the median per-round ratio generated /
upstream. A second row gives the peak memory of one step of each side, each measured in its own child
(``benchmarks.peak_memory``), as the ratio generated / upstream.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from benchmarks import budgets
from benchmarks.child import ChildError, emit_result, run_child
from benchmarks.peak_memory import MEASURE_ENV
from benchmarks.report import FAILED, INFO, Row, judge_at_most
from benchmarks.runtime_bench import SECTION, VARIANTS, interleaved_steps, train_step
from benchmarks.stats import summarize

MODULE = "benchmarks.composed_vlm_bench"
MODEL = "llava_onevision"
#: The generated side's CPU kernels.
KERNELS = {"causal_lm_loss": "chunked"}
#: Images per row of the 2-row batch.
LAYOUT = (1, 1)


def _prepared(model: str) -> tuple[Any, Any, dict[str, Any]]:
    """(the pair of models from one state dict, the ops of each side, the batch)."""
    from modelgraft.models.loader import get_model_class
    from modelgraft.models.ops import OpsConfig
    from modelgraft.models.testing import build_pair
    from modelgraft.models.testing.declarations import parity_declaration

    spec = parity_declaration(model)
    config = spec.config()
    pair = build_pair(
        config,
        get_model_class(spec.model_type, spec.causal_lm, use_hf=True),
        get_model_class(spec.model_type, spec.causal_lm),
        seed=0,
    )
    ops = {"upstream": OpsConfig(), "generated": OpsConfig(KERNELS)}
    return pair, ops, spec.batch(config, LAYOUT)


def _child_timing(model: str, repeats: int) -> dict[str, Any]:
    import torch

    pair, ops, batch = _prepared(model)
    models = {"upstream": pair.upstream, "generated": pair.generated}
    times, first = interleaved_steps(models, ops, batch, repeats)
    return {
        "times": times,
        "loss_abs_diff": abs(first["generated"] - first["upstream"]),
        "threads": torch.get_num_threads(),
        "tokens": int(batch["input_ids"].numel()),
    }


def _child_memory(model: str, variant: str) -> dict[str, Any]:
    from benchmarks.peak_memory import peak_memory
    from modelgraft.models.ops import bound_ops

    pair, ops, batch = _prepared(model)
    side = pair.upstream if variant == "upstream" else pair.generated
    del pair
    with bound_ops(ops[variant]):
        train_step(side, batch)  # warm-up: the allocator's pools, the gradients' buffers
        side.zero_grad(set_to_none=True)
        with peak_memory() as peak:
            train_step(side, batch)
    return {"peak_mib": peak.peak_delta_mib, "method": peak.method}


def child_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="composed-VLM benchmark child process (run by benchmarks.run)")
    parser.add_argument("mode", choices=("timing", "memory"))
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--variant", choices=VARIANTS, default="generated", help="memory mode: the side measured")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.mode == "timing":
        emit_result(_child_timing(args.model, args.repeats))
    else:
        emit_result(_child_memory(args.model, args.variant))


def bench_composed_vlm(repeats: int, *, threads: int = 1, model: str = MODEL) -> list[Row]:
    """The train-step row (judged against the dense models' budget) and the peak-memory row of a composed VLM."""
    name = f"{model}: train step, generated with its CPU kernels / upstream default"
    try:
        result = run_child(MODULE, ["timing", "--model", model, "--repeats", str(repeats), "--threads", str(threads)])
    except ChildError as exc:
        return [Row(SECTION, name, "error", status=FAILED, notes=str(exc)[-500:])]
    times = result["times"]
    ratio = summarize([g / u for g, u in zip(times["generated"], times["upstream"], strict=True)])
    upstream, generated = summarize(times["upstream"]), summarize(times["generated"])
    rows = [
        Row(
            SECTION,
            name,
            f"{ratio.median:.3f}x",
            ratio.spread(),
            f"<= {budgets.TRAIN_STEP_RATIO:g} (+{budgets.TRAIN_STEP_NOISE:g} noise)",
            judge_at_most(ratio.median, budgets.TRAIN_STEP_RATIO, noise=budgets.TRAIN_STEP_NOISE),
            f"kernels {KERNELS}; one image per row ({result['tokens']} tokens); median step: upstream "
            f"{upstream.median:.3f} s, generated {generated.median:.3f} s; first-step loss |diff| "
            f"{result['loss_abs_diff']:.1e}",
        )
    ]
    memory_name = f"{model}: train step peak memory, generated / upstream default"
    try:
        peaks = {
            variant: run_child(
                MODULE,
                ["memory", "--model", model, "--variant", variant, "--threads", str(threads)],
                extra_env=MEASURE_ENV,
            )
            for variant in VARIANTS
        }
    except ChildError as exc:
        return [*rows, Row(SECTION, memory_name, "error", status=FAILED, notes=str(exc)[-500:])]
    mib = {variant: peak["peak_mib"] for variant, peak in peaks.items()}
    rows.append(
        Row(
            SECTION,
            memory_name,
            f"{mib['generated'] / mib['upstream']:.3f}x" if mib["upstream"] else "n/a",
            status=INFO,
            notes=", ".join(f"{v} {m:.1f} MiB" for v, m in mib.items())
            + f" over the weights ({peaks['generated']['method']})",
        )
    )
    return rows


if __name__ == "__main__":
    child_main()
