"""VLM train-step benchmark on CPU: qwen2_5_vl generated with its CPU kernels against upstream's default.

The model and batch are the zoo's qwen2_5_vl parity declaration (``models/qwen2_5_vl/tests``): its tiny config and
its processor's image, 2-frame video, text-only and mixed rows, so the step runs the vision tower, the merger and
the multimodal RoPE, not only the text decoder. Upstream runs as transformers ships it; the generated side has
its CPU kernel bound (``causal_lm_loss``: ``chunked``). Both sides are built from the same state dict
(``build_pair``) and timed in one child process, interleaved and swapping which goes first every round, as
``benchmarks.runtime_bench`` does; the figure is the median per-round ratio generated / upstream.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from benchmarks import budgets
from benchmarks.child import ChildError, emit_result, run_child
from benchmarks.report import FAILED, Row, judge_at_most
from benchmarks.runtime_bench import SECTION, interleaved_steps
from benchmarks.stats import summarize

MODULE = "benchmarks.vlm_bench"
MODEL = "qwen2_5_vl"
#: The generated side's CPU kernels.
KERNELS = {"causal_lm_loss": "chunked"}


def _child_timing(repeats: int) -> dict[str, Any]:
    import torch

    from modelgraft.models.loader import get_model_class
    from modelgraft.models.ops import OpsConfig
    from modelgraft.models.testing import build_pair
    from modelgraft.models.testing.declarations import parity_declaration

    spec = parity_declaration(MODEL)
    config = spec.config()
    pair = build_pair(
        config,
        get_model_class(MODEL, spec.causal_lm, use_hf=True),
        get_model_class(MODEL, spec.causal_lm),
        seed=0,
    )
    batch = spec.multimodal_batch()
    models = {"upstream": pair.upstream, "generated": pair.generated}
    ops = {"upstream": OpsConfig(), "generated": OpsConfig(KERNELS)}
    times, first = interleaved_steps(models, ops, batch, repeats)
    return {
        "times": times,
        "loss_abs_diff": abs(first["generated"] - first["upstream"]),
        "threads": torch.get_num_threads(),
        "tokens": int(batch["input_ids"].numel()),
    }


def child_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="VLM benchmark child process (run by benchmarks.run)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    emit_result(_child_timing(args.repeats))


def bench_vlm(repeats: int, *, threads: int = 1) -> list[Row]:
    """The train-step row of the VLM, judged against the same budget as the dense models' rows."""
    name = f"{MODEL}: train step, generated with its CPU kernels / upstream default"
    try:
        result = run_child(MODULE, ["--repeats", str(repeats), "--threads", str(threads)])
    except ChildError as exc:
        return [Row(SECTION, name, "error", status=FAILED, notes=str(exc)[-500:])]
    times = result["times"]
    ratio = summarize([g / u for g, u in zip(times["generated"], times["upstream"], strict=True)])
    upstream, generated = summarize(times["upstream"]), summarize(times["generated"])
    return [
        Row(
            SECTION,
            name,
            f"{ratio.median:.3f}x",
            ratio.spread(),
            f"<= {budgets.TRAIN_STEP_RATIO:g} (+{budgets.TRAIN_STEP_NOISE:g} noise)",
            judge_at_most(ratio.median, budgets.TRAIN_STEP_RATIO, noise=budgets.TRAIN_STEP_NOISE),
            f"kernels {KERNELS}; image, video and text rows ({result['tokens']} tokens); median step: upstream "
            f"{upstream.median:.3f} s, generated {generated.median:.3f} s; first-step loss |diff| "
            f"{result['loss_abs_diff']:.1e}",
        )
    ]


if __name__ == "__main__":
    child_main()
