"""Loss benchmark: the chunked fused linear-cross-entropy kernel vs the eager lm_head + HF loss.

At a large vocabulary the ``[tokens, vocab]`` fp32 logits, their log-softmax and their gradients
dominate a training step's peak memory; the ``chunked`` kernel of the ``causal_lm_loss`` slot never
materializes them. Each side runs in its own child process (``benchmarks.peak_memory``) and measures
the peak RSS growth over loss forward + backward, with the inputs (hidden states, lm_head weight,
labels) already in the baseline and the gradients they produce counted, since training needs them:

- eager: ``logits = F.linear(hidden, weight)`` (what ``lm_head`` does) then
  ``transformers.loss.loss_utils.ForCausalLMLoss``; ``logits`` stays alive through backward, as it
  does in a model whose output carries it;
- chunked: the kernel bound by ``OpsConfig({"causal_lm_loss": "chunked"})``, at its default chunk size.

The eager child saves its loss and gradients; the chunked child, once its own peak is measured,
compares its results with them, so the parent never imports torch and neither peak is disturbed.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import budgets
from benchmarks.child import ChildError, emit_result, run_child
from benchmarks.peak_memory import MEASURE_ENV
from benchmarks.report import FAILED, INFO, MET, Row, judge_at_most

SECTION = "loss"
MODULE = "benchmarks.loss_bench"
VARIANTS = ("eager", "chunked")
REFERENCE_FILE = "eager.pt"

#: ``allclose`` bounds of chunked vs eager. Gradients at a 150k vocabulary are ~1e-9..1e-5, so a fixed
#: atol would pass anything: atol is relative to the largest magnitude of the eager tensor.
RTOL = 1e-4
ATOL_SCALE = 1e-5


@dataclass(frozen=True)
class LossSizes:
    """Qwen2.5-0.5B's lm_head (vocab 151936 x hidden 896) over 2048 tokens, fp32."""

    vocab_size: int = 151936
    hidden_size: int = 896
    batch_size: int = 1
    seq_len: int = 2048
    ignored_prefix: int = 16  # prompt tokens labelled -100, so ignore_index handling is exercised

    def describe(self) -> str:
        return (
            f"vocab {self.vocab_size}, hidden {self.hidden_size}, {self.batch_size * self.seq_len} tokens "
            f"({self.batch_size} x {self.seq_len}), fp32"
        )


SMOKE_SIZES = LossSizes(vocab_size=4096, hidden_size=64, batch_size=1, seq_len=128)


# ---------------------------------------------------------------- child side (imports torch)


def _inputs(sizes: LossSizes):
    import torch

    generator = torch.Generator().manual_seed(0)
    shape = (sizes.batch_size, sizes.seq_len)
    hidden = torch.randn(*shape, sizes.hidden_size, generator=generator).requires_grad_()
    weight = (torch.randn(sizes.vocab_size, sizes.hidden_size, generator=generator) * 0.02).requires_grad_()
    labels = torch.randint(0, sizes.vocab_size, shape, generator=generator)
    labels[:, : sizes.ignored_prefix] = -100
    return hidden, weight, labels


def _loss_fn(variant: str, vocab_size: int):
    """A callable ``(hidden, weight, labels) -> loss`` for ``variant``, everything imported up front."""
    import torch.nn.functional as F

    if variant == "eager":
        from transformers.loss.loss_utils import ForCausalLMLoss

        def eager(hidden, weight, labels):
            logits = F.linear(hidden, weight)
            return ForCausalLMLoss(logits, labels, vocab_size=vocab_size), logits

        return eager

    from modelgraft.models.ops import OpsConfig, bound_ops, causal_lm_loss_slot

    def chunked(hidden, weight, labels):
        with bound_ops(OpsConfig({"causal_lm_loss": "chunked"})):
            loss, logits = causal_lm_loss_slot(hidden, weight, labels, vocab_size=vocab_size)
        return loss, logits

    return chunked


def _child_run(variant: str, sizes: LossSizes, out: Path) -> dict[str, Any]:
    """Measure one variant; the eager one saves its results, the chunked one compares with them."""
    import torch

    from benchmarks.peak_memory import peak_memory

    loss_fn = _loss_fn(variant, sizes.vocab_size)
    hidden, weight, labels = _inputs(sizes)
    # Warm-up on a few rows: one-time costs (autograd engine threads, lazy inits) stay out of the peak.
    warm, _ = loss_fn(hidden[:, :8], weight, labels[:, :8])
    warm.backward()
    hidden.grad = weight.grad = None
    del warm
    with peak_memory() as peak:
        start = time.perf_counter()
        loss, logits = loss_fn(hidden, weight, labels)
        loss.backward()
        seconds = time.perf_counter() - start
        del logits
    results = {"loss": loss.detach(), "grad_hidden": hidden.grad, "grad_weight": weight.grad}
    measured = {
        "peak_mib": peak.peak_delta_mib,
        "baseline_mib": peak.baseline_mib,
        "method": peak.method,
        "s": seconds,
    }
    if variant == "eager":
        torch.save(results, out / REFERENCE_FILE)
        return measured
    return {**measured, "comparison": _compare(torch.load(out / REFERENCE_FILE), results)}


def _compare(reference: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    import torch

    report = {}
    for name, expected in reference.items():
        actual = candidate[name]
        scale = expected.abs().max().item()
        report[name] = {
            "max_abs_diff": (actual - expected).abs().max().item(),
            "max_abs_ref": scale,
            "allclose": bool(torch.allclose(actual, expected, rtol=RTOL, atol=ATOL_SCALE * scale)),
        }
    return report


def child_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="loss benchmark child process (run by benchmarks.run)")
    parser.add_argument("variant", choices=VARIANTS, help="eager first: chunked compares with its saved results")
    parser.add_argument("--sizes", required=True, help="LossSizes as JSON")
    parser.add_argument("--out", type=Path, required=True, help="where the eager results are saved")
    args = parser.parse_args(argv)
    emit_result(_child_run(args.variant, LossSizes(**json.loads(args.sizes)), args.out))


# ---------------------------------------------------------------- parent side (torch-free)


def _comparison_row(report: dict[str, Any]) -> Row:
    ok = all(item["allclose"] for item in report.values())
    details = "; ".join(
        f"{name} max|diff| {item['max_abs_diff']:.1e} (max|ref| {item['max_abs_ref']:.1e})"
        for name, item in report.items()
    )
    return Row(
        SECTION,
        "chunked vs eager: loss and gradients",
        "allclose" if ok else "MISMATCH",
        budget=f"rtol {RTOL:g}, atol {ATOL_SCALE:g} x max|ref|",
        status=MET if ok else FAILED,
        notes=details,
    )


def bench_loss(sizes: LossSizes) -> tuple[list[Row], str]:
    """Peak-memory ratio, the two peaks, and the numerical comparison; one run each (memory is not noisy)."""
    with tempfile.TemporaryDirectory(prefix="modelgraft-loss-") as tmp:
        out = ["--out", tmp]
        try:
            # One after the other, eager first: at full size the eager side alone needs several GiB,
            # and the chunked side compares with what it saved.
            runs = {
                variant: run_child(
                    MODULE, [variant, "--sizes", json.dumps(asdict(sizes)), *out], extra_env=MEASURE_ENV
                )
                for variant in VARIANTS
            }
        except ChildError as exc:
            return [Row(SECTION, "chunked vs eager", "error", status=FAILED, notes=str(exc)[-500:])], ""
    eager, chunked = runs["eager"]["peak_mib"], runs["chunked"]["peak_mib"]
    ratio = chunked / eager if eager else float("inf")
    rows = [
        Row(
            SECTION,
            "chunked / eager: peak memory of loss forward + backward",
            f"{ratio:.3f}x",
            budget=f"<= {budgets.CHUNKED_LOSS_MEMORY_RATIO:g}",
            status=judge_at_most(ratio, budgets.CHUNKED_LOSS_MEMORY_RATIO),
            notes=f"chunked {chunked:.0f} MiB, eager {eager:.0f} MiB over the inputs ({runs['eager']['method']})",
        ),
        *(
            Row(
                SECTION,
                f"{variant}: loss forward + backward",
                f"{runs[variant]['peak_mib']:.0f} MiB",
                status=INFO,
                notes=f"{runs[variant]['s']:.2f} s (one run)",
            )
            for variant in VARIANTS
        ),
        _comparison_row(runs["chunked"]["comparison"]),
    ]
    return rows, f"loss: {sizes.describe()}"


if __name__ == "__main__":
    child_main()
