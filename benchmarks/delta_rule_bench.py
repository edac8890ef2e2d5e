"""Gated delta rule benchmark: the ``chunked_delta`` kernel vs upstream's torch fallback, 512 to 8k tokens.

Both compute Qwen3.5's chunked gated delta rule (``chunk_gated_delta_rule`` slot): upstream's
``torch_chunk_gated_delta_rule`` (its undecorated torch body, what the generated model's eager path runs) inverts
each chunk's unit-triangular system by a Python loop over the chunk's 64 rows, each step cloning slices; the
kernel solves it with one ``torch.linalg.solve_triangular``. Each (side, length) runs in its own child process
(``benchmarks.peak_memory``): forward + backward of one layer's worth of heads (Qwen3.5-27B's linear attention:
48 value heads of 128 wide, keys 128 wide; here a batch of one, fp32), the median of a few timed runs after a
warm-up, and the peak RSS growth of one run with the inputs already in the baseline.

``python -m benchmarks.delta_rule_bench [--smoke] [--heads N]`` prints the table (not part of ``run.py``).

Figures of 2026-12-02 (``--heads 16``, one thread on a shared 2-core machine), chunked_delta vs upstream,
forward + backward: 310 ms vs 656 ms at 512 tokens (0.47x), 0.65 s vs 1.68 s at 1k, 1.24 s vs 4.11 s at 2k,
2.86 s vs 12.4 s at 4k, 4.8 s vs 35.4 s at 8k (0.14x: upstream's per-chunk indexing costs its backward a
whole-length zero tensor per chunk); peak memory 105 / 210 / 419 / 837 / 1673 MiB vs 132 / 266 / 538 / 1065 /
2134 MiB (about a fifth less).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.child import ChildError, emit_result, run_child
from benchmarks.peak_memory import MEASURE_ENV
from benchmarks.report import FAILED, Row, render_report

SECTION = "delta_rule"
MODULE = "benchmarks.delta_rule_bench"
SIDES = ("upstream", "chunked_delta")
LENGTHS = (512, 1024, 2048, 4096, 8192)
SMOKE_LENGTHS = (128,)
REPEATS = 3


# ---------------------------------------------------------------- child side (imports torch)


def _kernel(side: str) -> Any:
    if side == "upstream":
        from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

        return torch_chunk_gated_delta_rule.__wrapped__  # the torch body, not whatever the hub bound
    from modelgraft.models.ops.kernels.delta_rule import chunk_gated_delta_rule

    return chunk_gated_delta_rule


def _inputs(length: int, heads: int, width: int) -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(0)

    def leaf(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * scale).requires_grad_()

    return {
        "query": leaf(1, length, heads, width),
        "key": leaf(1, length, heads, width),
        "value": leaf(1, length, heads, width),
        "g": (-torch.rand(1, length, heads, generator=generator)).requires_grad_(),
        "beta": torch.rand(1, length, heads, generator=generator).requires_grad_(),
    }


def _step(kernel: Any, inputs: dict[str, Any]) -> None:
    out, _ = kernel(**inputs, use_qk_l2norm_in_kernel=True)
    out.sum().backward()
    for tensor in inputs.values():
        tensor.grad = None


def _child_run(side: str, length: int, heads: int, width: int) -> dict[str, Any]:
    import torch

    from benchmarks.peak_memory import peak_memory

    torch.set_num_threads(1)
    kernel = _kernel(side)
    inputs = _inputs(length, heads, width)
    _step(kernel, {name: tensor.detach()[:, :64].clone().requires_grad_() for name, tensor in inputs.items()})
    with peak_memory() as peak:
        _step(kernel, inputs)
    seconds = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        _step(kernel, inputs)
        seconds.append(time.perf_counter() - start)
    return {"s": statistics.median(seconds), "peak_mib": peak.peak_delta_mib, "method": peak.method}


def child_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="delta rule benchmark child process")
    parser.add_argument("side", choices=SIDES)
    parser.add_argument("--length", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--width", type=int, required=True)
    args = parser.parse_args(argv)
    emit_result(_child_run(args.side, args.length, args.heads, args.width))


# ---------------------------------------------------------------- parent side (torch-free)


def bench_delta_rule(lengths: Sequence[int], heads: int, width: int) -> list[Row]:
    """One row per length: the time ratio, both times and both peaks."""
    rows = []
    for length in lengths:
        try:
            runs = {
                side: run_child(
                    MODULE,
                    [side, "--length", str(length), "--heads", str(heads), "--width", str(width)],
                    extra_env=MEASURE_ENV,
                )
                for side in SIDES
            }
        except ChildError as exc:
            rows.append(Row(SECTION, f"T={length}", "error", status=FAILED, notes=str(exc)[-500:]))
            continue
        up, ours = runs["upstream"], runs["chunked_delta"]
        rows.append(
            Row(
                SECTION,
                f"T={length}: chunked_delta / upstream, forward + backward time",
                f"{ours['s'] / up['s']:.2f}x",
                notes=(
                    f"{ours['s'] * 1e3:.0f} ms vs {up['s'] * 1e3:.0f} ms (median of {REPEATS}, 1 thread); peak "
                    f"{ours['peak_mib']:.0f} MiB vs {up['peak_mib']:.0f} MiB ({ours['method']})"
                ),
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="toy sizes: proves the script works")
    parser.add_argument("--heads", type=int, default=48, help="value heads (Qwen3.5-27B: 48)")
    parser.add_argument("--width", type=int, default=128, help="key and value head width (Qwen3.5: 128)")
    args = parser.parse_args(argv)
    lengths, heads, width = (SMOKE_LENGTHS, 2, 16) if args.smoke else (LENGTHS, args.heads, args.width)
    rows = bench_delta_rule(lengths, heads, width)
    preamble = [f"batch 1, {heads} heads of {width} (keys and values), fp32, q/k L2-normalised, chunk 64"]
    print(render_report("Gated delta rule: chunked_delta vs upstream's torch fallback", preamble, rows))
    return 1 if any(row.status == FAILED for row in rows) else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in SIDES:
        child_main()
    else:
        sys.exit(main())
