"""Compiled train steps on CPU: each zoo text model compiled per decoder layer, generated vs upstream.

What a user of ``docs/compile.md`` runs: every decoder layer compiled in place with ``nn.Module.compile()``
(inductor, torch's defaults otherwise), then training steps of forward, backward and an AdamW step. Both sides
are built from the same config and seed (so the same weights: the generated class initialises as upstream's
does), run upstream's default attention on CPU (sdpa where the class supports it, else eager;
``moe_bench.default_attention``) and every op slot unbound, so any difference is the generated code's own under
the compiler: its slot guards (dynamo guards on the bindings) and patched forwards.

Each side runs in a child process of its own, with an empty inductor cache (``TORCHINDUCTOR_CACHE_DIR``, a
fresh folder per child), so its first step compiles from cold, as a new machine or a new torch version does;
inductor compiles in the child itself (``compile_threads=1``: starting its pool of compile workers costs more on
two cores than it saves). The two sides of a model run at the same time, one torch thread each, so that on a
2-core machine each has a core and both meet the same machine: a neighbour that slows one slows the other.
Per child:

- eager: ``warmup`` steps then ``steps`` timed eager steps (context: what compiling buys);
- compile: the decoder layers compiled, then the first step, timed: the compile time is that step less the
  median compiled step;
- steady state: ``warmup`` more steps, then ``steps`` timed steps; the figure is their median.

Rows per model: the median compiled step, generated / upstream, judged against the train-step budget
(``budgets.TRAIN_STEP_RATIO``: generated trains no slower than upstream), and the compile time, generated /
upstream (no budget: context). The notes give both sides' seconds, the eager steps, the graphs dynamo
compiled and the graph breaks it took (the same on both sides, or the row says so), and the difference of the
first compiled step's losses (the same weights and batch on both sides: it must be round-off).

Models: every registered model with a causal-LM class and no multimodal config, dense and MoE (the MoE sizes
through ``benchmarks.moe_sizes``, so a new MoE model joins without an edit), and the hybrid Qwen3.5 on its text
causal LM (``runtime_bench.HYBRID``). A VLM's text path is not run here: its text decoder layers are the
classes the text models' rows compile, and its forward reads the multimodal positions on the host.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks import budgets
from benchmarks.child import ChildError, emit_result, run_child
from benchmarks.report import FAILED, INFO, SKIPPED, Row, judge_at_most
from benchmarks.stats import summarize

SECTION = "compile"
MODULE = "benchmarks.compile_bench"
SIDES = ("upstream", "generated")
#: The one model of a ``--smoke`` run: the dense category's minimal reference (docs/design.md).
SMOKE_MODEL = "llama"


@dataclass(frozen=True)
class CompileSizes:
    """Small enough that a cold inductor compile, not the step, is most of a child's time; large enough that a
    compiled step does real work (a step is about 0.1 s on one thread)."""

    hidden_size: int = 256
    intermediate_size: int = 704
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    vocab_size: int = 8192
    seq_len: int = 128
    batch_size: int = 2
    #: MoE models: routed experts, top-k and expert width.
    num_experts: int = 8
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 96
    #: Hybrid models' Gated DeltaNet layers.
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 4
    linear_head_dim: int = 64
    #: Steps before each timed series, and timed steps per series.
    warmup: int = 1
    steps: int = 5

    def runtime_sizes(self) -> Any:
        """The dense and hybrid models' sizes, as ``runtime_bench`` turns them into a config."""
        from benchmarks.runtime_bench import RuntimeSizes

        return RuntimeSizes(
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab_size,
            seq_len=self.seq_len,
            batch_size=self.batch_size,
            linear_num_key_heads=self.linear_num_key_heads,
            linear_num_value_heads=self.linear_num_value_heads,
            linear_head_dim=self.linear_head_dim,
        )

    def moe_sizes(self) -> Any:
        """The MoE models' sizes, as ``moe_sizes`` turns them into each model's config."""
        from benchmarks.moe_sizes import MoeSizes

        return MoeSizes(
            hidden_size=self.hidden_size,
            moe_intermediate_size=self.moe_intermediate_size,
            num_experts=self.num_experts,
            num_experts_per_tok=self.num_experts_per_tok,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab_size,
            seq_len=self.seq_len,
            batch_size=self.batch_size,
        )

    def describe(self) -> str:
        return (
            f"hidden {self.hidden_size}, intermediate {self.intermediate_size}, {self.num_hidden_layers} layers, "
            f"heads {self.num_attention_heads}/kv {self.num_key_value_heads} x {self.head_dim}, vocab "
            f"{self.vocab_size}, batch {self.batch_size} x seq {self.seq_len}; MoE: {self.num_experts} experts, "
            f"top-{self.num_experts_per_tok}, width {self.moe_intermediate_size}; fp32, upstream's default "
            f"attention, slots unbound, AdamW; every decoder layer nn.Module.compile() (inductor), cold cache per "
            f"side; {self.warmup} warm-up + {self.steps} timed steps eager, then the first compiled step, "
            f"{self.warmup} warm-up + {self.steps} timed compiled steps"
        )


SMOKE_SIZES = CompileSizes(
    hidden_size=64,
    intermediate_size=176,
    num_attention_heads=4,
    head_dim=16,
    vocab_size=512,
    seq_len=32,
    moe_intermediate_size=32,
    linear_head_dim=16,
    steps=1,
)


# ---------------------------------------------------------------- child side (imports torch)


class Skip(Exception):
    """This model is not a text model this benchmark compiles; the message says why."""


def _prepare(model_type: str, sizes: CompileSizes) -> tuple[Any, Any, Any]:
    """(config with upstream's default attention, upstream class, generated class) of the model's causal LM."""
    from benchmarks import moe_bench, runtime_bench

    try:
        config, upstream, generated = runtime_bench._prepare(model_type, sizes.runtime_sizes())
    except runtime_bench.Skip as dense_refusal:
        try:
            config, upstream, generated, _ = moe_bench._prepare(model_type, sizes.moe_sizes())
        except moe_bench.Skip as moe_refusal:
            raise Skip(f"as a dense model: {dense_refusal}; as a MoE model: {moe_refusal}") from moe_refusal
    config._attn_implementation = moe_bench.default_attention(upstream, config)
    return config, upstream, generated


def refusals(model_types: Sequence[str], sizes: CompileSizes) -> dict[str, str]:
    """Why each model type of ``model_types`` that this benchmark does not compile is left out (composite,
    no causal-LM class, no generated module)."""
    found = {}
    for model_type in model_types:
        try:
            _prepare(model_type, sizes)
        except Skip as exc:
            found[model_type] = str(exc)
    return found


def decoder_layers(model: Any) -> Any:
    """The model's list of decoder layers (the unit ``docs/compile.md`` compiles)."""
    from torch import nn

    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) and type(module[0]).__name__.endswith("DecoderLayer"):
            return module
    raise LookupError(f"{type(model).__name__} has no list of decoder layers")


def _side(model_type: str, side: str, sizes: CompileSizes) -> dict[str, Any]:
    import torch
    import torch._inductor.config
    from torch._dynamo.utils import counters

    from benchmarks.moe_sizes import EXPERT_KEYS
    from benchmarks.runtime_bench import train_step
    from modelgraft.models.testing import causal_lm_batch, seed_everything

    torch._inductor.config.compile_threads = 1
    config, upstream_cls, generated_cls = _prepare(model_type, sizes)
    seed_everything(0)
    model = (upstream_cls if side == "upstream" else generated_cls)(config).float().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = causal_lm_batch(config, batch_size=sizes.batch_size, seq_len=sizes.seq_len, seed=0)

    def step() -> float:
        loss = train_step(model, batch)
        optimizer.step()
        return loss

    def timed(count: int) -> list[float]:
        times = []
        for _ in range(count):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        return times

    timed(sizes.warmup)
    eager = timed(sizes.steps)
    for layer in decoder_layers(model):
        layer.compile()
    start = time.perf_counter()
    first_loss = step()
    first = time.perf_counter() - start
    timed(sizes.warmup)
    compiled = timed(sizes.steps)
    return {
        "eager": eager,
        "first": first,
        "compiled": compiled,
        "first_loss": first_loss,
        "graphs": int(counters["stats"]["unique_graphs"]),
        "breaks": int(sum(counters["graph_break"].values())),
        "attention": config._attn_implementation,
        "experts": model.config._experts_implementation if any(getattr(config, k, 0) for k in EXPERT_KEYS) else None,
    }


def child_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="compile benchmark child process (run by benchmarks.run)")
    parser.add_argument("mode", choices=("list", "side"))
    parser.add_argument("--models", required=True, help="comma-separated model types (side mode: one)")
    parser.add_argument("--side", choices=SIDES)
    parser.add_argument("--sizes", required=True, help="CompileSizes as JSON")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    sizes = CompileSizes(**json.loads(args.sizes))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.mode == "list":
        emit_result({"skipped": refusals(args.models.split(","), sizes)})
        return
    try:
        emit_result(_side(args.models, args.side, sizes))
    except Exception as exc:  # noqa: BLE001 - the parent reports it as the row's failure
        emit_result({"error": f"{type(exc).__name__}: {exc}"[-1500:]})


# ---------------------------------------------------------------- parent side (torch-free)


def _run_side(model_type: str, side: str, sizes: CompileSizes, threads: int) -> dict[str, Any]:
    cache = tempfile.mkdtemp(prefix=f"compile-bench-{model_type}-{side}-")
    try:
        args = ["side", "--models", model_type, "--side", side, "--sizes", json.dumps(asdict(sizes))]
        return run_child(MODULE, [*args, "--threads", str(threads)], extra_env={"TORCHINDUCTOR_CACHE_DIR": cache})
    except ChildError as exc:
        return {"error": str(exc)[-1500:]}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def model_rows(model_type: str, results: dict[str, dict[str, Any]]) -> list[Row]:
    """The compiled-step row (judged) and the compile-time row (info) of one model, from both sides' results."""
    name = f"{model_type}: compiled train step, generated / upstream"
    failed = {side: result["error"] for side, result in results.items() if "error" in result}
    if failed:
        notes = "; ".join(f"{side}: {error}" for side, error in failed.items())
        return [Row(SECTION, name, "error", status=FAILED, notes=notes[-700:])]
    up, gen = results["upstream"], results["generated"]
    steps = {side: summarize(result["compiled"]) for side, result in results.items()}
    eager = {side: summarize(result["eager"]).median for side, result in results.items()}
    compile_s = {side: max(0.0, result["first"] - steps[side].median) for side, result in results.items()}
    ratio = steps["generated"].median / steps["upstream"].median
    graphs = (
        f"{up['graphs']} graphs, {up['breaks']} breaks on both sides"
        if (up["graphs"], up["breaks"]) == (gen["graphs"], gen["breaks"])
        else f"graphs / breaks: upstream {up['graphs']} / {up['breaks']}, generated {gen['graphs']} / {gen['breaks']}"
    )
    limit = budgets.TRAIN_STEP_RATIO
    return [
        Row(
            SECTION,
            name,
            f"{ratio:.3f}x",
            f"upstream {steps['upstream'].spread()}, generated {steps['generated'].spread()} s",
            f"<= {limit:g} (+{budgets.TRAIN_STEP_NOISE:g} noise)",
            judge_at_most(ratio, limit, noise=budgets.TRAIN_STEP_NOISE),
            f"median compiled step: upstream {steps['upstream'].median:.3f} s, generated "
            f"{steps['generated'].median:.3f} s; eager: upstream {eager['upstream']:.3f} s, generated "
            f"{eager['generated']:.3f} s; {graphs}; attention {up['attention']}"
            + (f", experts {up['experts']}" if up.get("experts") else "")
            + f"; first compiled step loss |diff| {abs(gen['first_loss'] - up['first_loss']):.1e}",
        ),
        Row(
            SECTION,
            f"{model_type}: first-step compile time, generated / upstream",
            f"{compile_s['generated'] / compile_s['upstream']:.3f}x" if compile_s["upstream"] else "n/a",
            status=INFO,
            notes=f"upstream {compile_s['upstream']:.1f} s, generated {compile_s['generated']:.1f} s "
            "(first compiled step less the median compiled step; cold inductor cache)",
        ),
    ]


def bench_compile(
    sizes: CompileSizes, model_types: Sequence[str] | None = None, *, threads: int = 1
) -> tuple[list[Row], str]:
    """Rows for every selected model (default: every registered text model), and a line on how they ran."""
    from benchmarks.runtime_bench import registered_models

    asked = list(model_types) if model_types else registered_models()
    try:
        listed = run_child(MODULE, ["list", "--models", ",".join(asked), "--sizes", json.dumps(asdict(sizes))])
    except ChildError as exc:
        return [Row(SECTION, "compiled train step, all models", "error", status=FAILED, notes=str(exc)[-500:])], ""
    rows: list[Row] = []
    for model_type in asked:
        if model_type in listed["skipped"]:
            rows.append(
                Row(
                    SECTION,
                    f"{model_type}: compiled train step",
                    "-",
                    status=SKIPPED,
                    notes=listed["skipped"][model_type],
                )
            )
            continue
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(SIDES)) as pool:
            futures = {side: pool.submit(_run_side, model_type, side, sizes, threads) for side in SIDES}
        rows += model_rows(model_type, {side: future.result() for side, future in futures.items()})
        print(
            f"[benchmarks] compile: {model_type} in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True
        )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    setup = f"compile: {sizes.describe()}; {threads} torch thread(s) per side, both sides at once on {cores} cores"
    return rows, setup


if __name__ == "__main__":
    child_main()
