"""Gated delta rule benchmark: the ``chunked_delta`` kernel vs upstream's torch fallback, 512 to 8k tokens.

Both compute Qwen3.5's chunked gated delta rule (``chunk_gated_delta_rule`` slot), the same algorithm with the same
roundings: upstream's ``torch_chunk_gated_delta_rule`` (its undecorated torch body, what the generated model's eager
path runs) and the kernel both solve each chunk's unit-triangular system with ``torch.linalg.solve_triangular``
(upstream since transformers 5.25; before, it inverted it by a Python loop over the chunk's 64 rows). What differs
is the loop over chunks: upstream indexes each chunk's slices and writes its output into a zero tensor, and the
backward of each such index writes a whole-length zero tensor; the kernel unbinds the chunks and concatenates the
outputs. Each (side, length) runs in its own child process (``benchmarks.peak_memory``): forward + backward of one
layer's worth of heads (Qwen3.5-27B's linear attention: 48 value heads of 128 wide, keys 128 wide; here a batch of
one, fp32; ``--key-heads`` fewer query/key heads, repeated inside both as upstream's grouped value attention does),
the median of a few timed runs after a warm-up, and the peak RSS growth of one run with the inputs already in the
baseline.

``python -m benchmarks.delta_rule_bench [--smoke] [--heads N] [--key-heads N]`` prints the table (not part of
``run.py``).

Figures of 2026-12-06 against transformers 5.25.0 (``--heads 16``, one thread on the shared 2-core machine at a
load average of 4-6, so compare the ratios: the kernel of 2026-12-02, 2.9 s at 4k then, took 5-7 s under this
load), chunked_delta vs upstream, forward + backward: 462 ms vs 608 ms at 512 tokens (0.76x), 0.72 s vs 1.28 s at
1k (0.56x), 2.1 s vs 5.4 s at 2k (0.40x), 7.3 s vs 21.5 s at 4k (0.34x), 25 s vs 113 s at 8k (0.22x: upstream's
per-chunk indexing, quadratic in the length); peak memory 91 / 182 / 363 / 725 / 1450 MiB vs 101 / 202 / 403 /
805 / 1609 MiB (a tenth less).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.child import ChildError, emit_result, run_child
from benchmarks.peak_memory import MEASURE_ENV
from benchmarks.report import FAILED, Row, render_report
from benchmarks.stats import seconds_per_call

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

        from modelgraft.models.testing.hub_decorated import torch_body

        return torch_body(torch_chunk_gated_delta_rule)  # the torch body, not whatever the hub bound
    from modelgraft.models.ops.kernels.delta_rule import chunk_gated_delta_rule

    return chunk_gated_delta_rule


def _inputs(length: int, heads: int, key_heads: int, width: int) -> dict[str, Any]:
    import torch

    generator = torch.Generator().manual_seed(0)

    def leaf(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * scale).requires_grad_()

    return {
        "query": leaf(1, length, key_heads, width),
        "key": leaf(1, length, key_heads, width),
        "value": leaf(1, length, heads, width),
        "g": (-torch.rand(1, length, heads, generator=generator)).requires_grad_(),
        "beta": torch.rand(1, length, heads, generator=generator).requires_grad_(),
    }


def _step(kernel: Any, inputs: dict[str, Any]) -> None:
    out, _ = kernel(**inputs, use_qk_l2norm_in_kernel=True)
    out.sum().backward()
    for tensor in inputs.values():
        tensor.grad = None


def _child_run(side: str, length: int, heads: int, key_heads: int, width: int) -> dict[str, Any]:
    import torch

    from benchmarks.peak_memory import peak_memory

    torch.set_num_threads(1)
    kernel = _kernel(side)
    inputs = _inputs(length, heads, key_heads, width)
    _step(kernel, {name: tensor.detach()[:, :64].clone().requires_grad_() for name, tensor in inputs.items()})
    with peak_memory() as peak:
        _step(kernel, inputs)
    seconds = seconds_per_call(lambda: _step(kernel, inputs), REPEATS)
    return {"s": statistics.median(seconds), "peak_mib": peak.peak_delta_mib, "method": peak.method}


def child_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="delta rule benchmark child process")
    parser.add_argument("side", choices=SIDES)
    parser.add_argument("--length", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--key-heads", type=int, required=True)
    parser.add_argument("--width", type=int, required=True)
    args = parser.parse_args(argv)
    emit_result(_child_run(args.side, args.length, args.heads, args.key_heads, args.width))


# ---------------------------------------------------------------- parent side (torch-free)


def bench_delta_rule(lengths: Sequence[int], heads: int, key_heads: int, width: int) -> list[Row]:
    """One row per length: the time ratio, both times and both peaks."""
    rows = []
    for length in lengths:
        try:
            runs = {
                side: run_child(
                    MODULE,
                    [
                        side,
                        *("--length", str(length), "--heads", str(heads), "--key-heads", str(key_heads)),
                        *("--width", str(width)),
                    ],
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
    parser.add_argument(
        "--key-heads", type=int, default=None, help="query/key heads, a divisor of --heads (default: --heads)"
    )
    parser.add_argument("--width", type=int, default=128, help="key and value head width (Qwen3.5: 128)")
    args = parser.parse_args(argv)
    if args.smoke:
        lengths, heads, key_heads, width = SMOKE_LENGTHS, 2, 1, 16
    else:
        lengths, heads, width = LENGTHS, args.heads, args.width
        key_heads = heads if args.key_heads is None else args.key_heads
    if heads % key_heads:
        parser.error(f"--key-heads ({key_heads}) must divide --heads ({heads})")
    rows = bench_delta_rule(lengths, heads, key_heads, width)
    shape = f"batch 1, {heads} value and {key_heads} query/key heads of {width}, fp32, q/k L2-normalised, chunk 64"
    preamble = [shape]
    print(render_report("Gated delta rule: chunked_delta vs upstream's torch fallback", preamble, rows))
    return 1 if any(row.status == FAILED for row in rows) else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in SIDES:
        child_main()
    else:
        sys.exit(main())
