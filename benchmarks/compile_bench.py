"""Compiled train steps on CPU (or a CUDA device, ``--device cuda``): each zoo model compiled per decoder layer,
generated vs upstream.

What a user of ``docs/compile.md`` runs: every decoder layer compiled in place with ``nn.Module.compile()``
(inductor, torch's defaults otherwise; the figures of docs/performance.md were measured so; in steps that record
no outputs, on layers without hooks, ``compile_layers`` compiles the same forward), then training steps of forward, backward and an AdamW step. Both sides
are built from the same config and seed (so the same weights: the generated class initialises as upstream's
does), run upstream's default attention on CPU (sdpa where the class supports it, else eager;
``moe_bench.default_attention``) and every op slot unbound, so any difference is the generated code's own under
the compiler: its slot guards (dynamo guards on the bindings) and patched forwards.

Three child processes per model:

- each side alone (the two at once, one torch thread each: on a 2-core machine each has a core), with an empty
  inductor cache of its own (``TORCHINDUCTOR_CACHE_DIR``, a fresh folder per child), so that its first step
  compiles from cold, as on a new machine or after a torch upgrade: ``warmup`` eager steps, the decoder layers
  compiled, the first compiled step (timed), ``warmup`` more, ``steps`` timed. The compile time is the first
  compiled step less the median of the timed ones; the child also counts the graphs dynamo compiled and the
  breaks it took. Inductor compiles in the child itself (``compile_threads=1``: starting its pool of compile
  workers costs more on two cores than it saves);
- both sides in one process, from the same weights (``build_pair``) and the union of the two caches (so nothing
  is compiled twice), their steps interleaved and the first side swapped every round, as ``runtime_bench`` does:
  ``warmup`` then ``steps`` rounds eager, then compiled. Two processes cannot share a round, and a shared machine
  drifts by more than the difference between the sides, so the step figures come from this child: the median over
  rounds of generated / upstream, with the spread of the per-round ratios.

Rows per model: the compiled step, generated / upstream, judged against the train-step budget
(``budgets.TRAIN_STEP_RATIO``: generated trains no slower than upstream), and the compile time, generated /
upstream (no budget: context). The notes give both sides' seconds, the eager steps, the graphs and graph breaks
(the same on both sides, or the row says so), whether the two sides compiled the same graphs (the keys their
cold caches hold, AOTAutograd's and the FX graph cache's, are equal: same graphs, same settings), and the
difference of the first compiled step's losses (the same weights and batch on both sides: round-off at most).

Models: every registered model with a causal-LM class and no multimodal config, dense and MoE (the MoE sizes
through ``benchmarks.moe_sizes``, so a new MoE model joins without an edit), and the hybrid Qwen3.5 on its text
causal LM (``runtime_bench.HYBRID``). A VLM or Omni package (one whose tests declare a multimodal head:
``declarations.multimodal_run``) runs that head at its tests' tiny config, on the batch its tests make with the
model's processor (images, and video and audio where the model takes them), with the attention transformers
picks for it: its decoder layers compiled, its towers eager (docs/compile.md, "Tower blocks", says why a tower is
compiled as a whole or block by block, not with the text), so the step's vision and audio encoders and the
multimodal positions run eagerly on both sides. A vision encoder (no causal LM, no decoder layers) runs at its
tests' tiny config on their batch of images, each encoder layer compiled, trained on the loss its tests read every
output element with (``vision_encoder_suite.probed_loss``). A new VLM package or encoder joins without an edit.
The registry's sub-model types (a VLM's text or vision model alone) stay out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import budgets
from benchmarks.child import ChildError, emit_result, run_child
from benchmarks.report import FAILED, INFO, SKIPPED, Row, judge_at_most
from benchmarks.stats import seconds_per_call, summarize

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
    #: Steps before each timed series, and timed steps per series (``run.py --repeats`` sets ``steps``).
    warmup: int = 1
    steps: int = 5
    #: Where the models train (``run.py --device``): ``cpu``, or ``cuda``, where inductor writes Triton kernels and
    #: each timed step ends by waiting for the device.
    device: str = "cpu"

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
            f"{self.vocab_size}, batch {self.batch_size} x seq {self.seq_len} on {self.device}; MoE: "
            f"{self.num_experts} experts, "
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
    """This model is not one this benchmark compiles; the message says why."""


@dataclass(frozen=True)
class Subject:
    """What one model's rows compile and train: the config (upstream's default attention), the two classes, and the
    batch (made when asked: listing the models builds none)."""

    config: Any
    upstream: Any
    generated: Any
    batch: Callable[[], dict[str, Any]]
    #: What is trained, when not a causal LM at the benchmark's sizes: its tests' declaration gives sizes and batch.
    declared: str = ""
    #: The scalar a step backpropagates, from the model and the batch; None: the causal LM's own ``loss``.
    loss: Callable[[Any, dict[str, Any]], Any] | None = None


def prepare_subject(model_type: str, sizes: CompileSizes) -> Subject:
    """The model's causal LM at the benchmark's sizes; for a VLM or Omni package, its multimodal head as its tests
    declare it (``declarations.multimodal_run``); for a vision encoder, the encoder as its tests declare it."""
    from benchmarks import moe_bench, runtime_bench
    from modelgraft.models.testing import causal_lm_batch

    try:
        config, upstream, generated = runtime_bench._prepare(model_type, sizes.runtime_sizes())
    except runtime_bench.Skip as dense_refusal:
        try:
            config, upstream, generated, _ = moe_bench._prepare(model_type, sizes.moe_sizes())
        except moe_bench.Skip as moe_refusal:
            declared = _multimodal(model_type) or _vision_encoder(model_type)
            if declared is not None:
                return declared
            reasons = dict.fromkeys(str(r) for r in (dense_refusal, moe_refusal) if not _not_this_kind(str(r)))
            raise Skip("; ".join(reasons) or str(dense_refusal)) from moe_refusal
    config._attn_implementation = moe_bench.default_attention(upstream, config)
    return Subject(
        config,
        upstream,
        generated,
        lambda: causal_lm_batch(config, batch_size=sizes.batch_size, seq_len=sizes.seq_len, seed=0),
    )


def _multimodal(model_type: str) -> Subject | None:
    """The multimodal head of the zoo package named ``model_type``, at its tests' tiny sizes, with the attention
    transformers picks for it on both sides; None where there is no such package or it declares none."""
    from modelgraft.models.loader import get_model_class
    from modelgraft.models.testing.declarations import MODELS_ROOT, multimodal_run

    if not (MODELS_ROOT / model_type / "tests").is_dir():
        return None
    run = multimodal_run(model_type)
    if run is None:
        return None
    # The tiny configs ask for eager attention and experts (exact parity tests); unset, the model picks at init
    # what from_pretrained gives it on CPU (sdpa where it can, grouped_mm experts), in every sub-config.
    run.config._attn_implementation = None
    run.config._experts_implementation = None
    return Subject(
        run.config,
        get_model_class(run.model_type, run.architecture, use_hf=True),
        get_model_class(run.model_type, run.architecture),
        run.make_batch,
        declared="multimodal head on its tests' tiny config and processor batch",
    )


def _vision_encoder(model_type: str) -> Subject | None:
    """The vision encoder registered as ``model_type`` (``clip_vision_model``), at its package's tests' tiny
    config and batch of images, trained on the loss its tests read every output element with
    (``vision_encoder_suite.probed_loss``); None where no zoo package declares one."""
    from modelgraft.models import MODEL_PACKAGES
    from modelgraft.models.loader import get_model_class
    from modelgraft.models.testing.declarations import parity_declaration
    from modelgraft.models.testing.vision_encoder_suite import VisionEncoderModel, probed_loss

    for package in MODEL_PACKAGES:
        spec = parity_declaration(package)
        if isinstance(spec, VisionEncoderModel) and spec.model_type == model_type:
            config = spec.config()
            config._attn_implementation = None  # the tests' eager attention; unset: what from_pretrained picks
            return Subject(
                config,
                get_model_class(model_type, spec.architecture, use_hf=True),
                get_model_class(model_type, spec.architecture),
                partial(spec.inputs, config),
                declared="vision encoder on its tests' tiny config and images (no causal LM: a probed loss)",
                loss=lambda model, batch: probed_loss(model(**batch)),
            )
    return None


def _not_this_kind(refusal: str) -> bool:
    """A refusal that only says the model is of the other kind (dense to the MoE sizes, sparse to the dense)."""
    return refusal == "dense model" or refusal.startswith("sparse")


def refusals(model_types: Sequence[str], sizes: CompileSizes) -> dict[str, str]:
    """Why each model type of ``model_types`` that this benchmark does not compile is left out (composite,
    no causal-LM class, no generated module)."""
    found = {}
    for model_type in model_types:
        try:
            prepare_subject(model_type, sizes)
        except Skip as exc:
            found[model_type] = str(exc)
    return found


def decoder_layers(model: Any) -> Any:
    """The model's list of decoder layers (the unit ``docs/compile.md`` compiles); a vision encoder's, which has
    none, is its list of encoder layers (the tower block of ``docs/compile.md``)."""
    from torch import nn

    lists = [module for module in model.modules() if isinstance(module, nn.ModuleList) and len(module)]
    for suffix in ("DecoderLayer", "Layer"):
        for module in lists:
            if type(module[0]).__name__.endswith(suffix):
                return module
    raise LookupError(f"{type(model).__name__} has no list of decoder or encoder layers")


def _trainer(
    model: Any, batch: dict[str, Any], loss: Callable[[Any, dict[str, Any]], Any] | None
) -> Callable[[], float]:
    """One training step of ``model`` on ``batch``: forward, backward (``runtime_bench.train_step``: the causal LM's
    loss, or ``loss`` where given) and AdamW; on a CUDA device it returns when the device has done the step."""
    import torch

    from benchmarks.runtime_bench import train_step

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    on_cuda = next(model.parameters()).is_cuda

    def step() -> float:
        value = train_step(model, batch, loss)
        optimizer.step()
        if on_cuda:
            torch.cuda.synchronize()
        return value

    return step


def _batch_on(batch: dict[str, Any], device: str) -> dict[str, Any]:
    """``batch`` with every tensor in it moved to ``device``."""
    import torch
    from torch.utils import _pytree as pytree

    return pytree.tree_map_only(torch.Tensor, lambda tensor: tensor.to(device), batch)


def _compile_layers(model: Any, device: str) -> None:
    import torch._inductor.config

    if device == "cpu":  # on a CPU, inductor compiles its C++ in the child itself (the module docstring says why)
        torch._inductor.config.compile_threads = 1
    for layer in decoder_layers(model):
        layer.compile()


def device_missing(device: str) -> str | None:
    """Why the benchmark cannot train on ``device`` here, or None where it can."""
    import torch

    if device == "cpu":
        return None
    if device != "cuda":
        return f"unknown device {device!r} (cpu or cuda)"
    if not torch.cuda.is_available():
        return "no CUDA device: torch.cuda.is_available() is False"
    return None


def _side(model_type: str, side: str, sizes: CompileSizes) -> dict[str, Any]:
    """One side alone, from a cold cache: its first compiled step, its compiled steps, its graphs and breaks."""
    from torch._dynamo.utils import counters

    from modelgraft.models.testing import seed_everything

    subject = prepare_subject(model_type, sizes)
    seed_everything(0)
    model = (subject.upstream if side == "upstream" else subject.generated)(subject.config).float().train()
    model = model.to(sizes.device)
    step = _trainer(model, _batch_on(subject.batch(), sizes.device), subject.loss)
    seconds_per_call(step, sizes.warmup)  # eager: the optimizer's state and the allocator warmed up, as in a real run
    _compile_layers(model, sizes.device)
    first = seconds_per_call(step, 1)[0]
    seconds_per_call(step, sizes.warmup)
    return {
        "first": first,
        "compiled": seconds_per_call(step, sizes.steps),
        "graphs": int(counters["stats"]["unique_graphs"]),
        "breaks": int(sum(counters["graph_break"].values())),
    }


def _interleaved(steps: dict[str, Callable[[], float]], sizes: CompileSizes) -> dict[str, list[float]]:
    """``warmup`` steps of each side, then ``steps`` rounds of one step each, the first side alternating."""
    for step in steps.values():
        seconds_per_call(step, sizes.warmup)
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for round_ in range(sizes.steps):
        for side in SIDES if round_ % 2 == 0 else SIDES[::-1]:
            times[side] += seconds_per_call(steps[side], 1)
    return times


def _pair(model_type: str, sizes: CompileSizes) -> dict[str, Any]:
    """Both sides in this process from the same weights, eager then compiled, their steps interleaved."""
    from benchmarks.moe_sizes import EXPERT_KEYS
    from modelgraft.models.testing import build_pair

    subject = prepare_subject(model_type, sizes)
    pair = build_pair(subject.config, subject.upstream, subject.generated, seed=0)
    models = {"upstream": pair.upstream.to(sizes.device), "generated": pair.generated.to(sizes.device)}
    batch = _batch_on(subject.batch(), sizes.device)
    steps = {side: _trainer(models[side], batch, subject.loss) for side in SIDES}
    eager = _interleaved(steps, sizes)
    for model in models.values():
        _compile_layers(model, sizes.device)
    first = {side: steps[side]() for side in SIDES}
    text_config = pair.upstream.config.get_text_config()  # a composite config's decoder, or the config itself
    sparse = any(getattr(text_config, key, 0) for key in EXPERT_KEYS)
    return {
        "eager": eager,
        "compiled": _interleaved(steps, sizes),
        "loss_abs_diff": abs(first["generated"] - first["upstream"]),
        "attention": text_config._attn_implementation,
        "experts": text_config._experts_implementation if sparse else None,
        "declared": subject.declared,
    }


def child_main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="compile benchmark child process (run by benchmarks.run)")
    parser.add_argument("mode", choices=("list", "side", "pair"))
    parser.add_argument("--models", required=True, help="comma-separated model types (side and pair modes: one)")
    parser.add_argument("--side", choices=SIDES)
    parser.add_argument("--sizes", required=True, help="CompileSizes as JSON")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    sizes = CompileSizes(**json.loads(args.sizes))
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.mode == "list":
        missing = device_missing(sizes.device)
        if missing:
            emit_result({"device": missing})
        else:
            name = torch.cuda.get_device_name() if sizes.device == "cuda" else ""
            emit_result({"skipped": refusals(args.models.split(","), sizes), "device_name": name})
        return
    try:
        emit_result(_side(args.models, args.side, sizes) if args.mode == "side" else _pair(args.models, sizes))
    except Exception as exc:  # noqa: BLE001 - the parent reports it as the row's failure
        emit_result({"error": f"{type(exc).__name__}: {exc}"[-1500:]})


# ---------------------------------------------------------------- parent side (torch-free)


def _run(model_type: str, mode: str, sizes: CompileSizes, threads: int, cache: str, side: str = "") -> dict[str, Any]:
    args = [mode, "--models", model_type, *(["--side", side] if side else []), "--sizes", json.dumps(asdict(sizes))]
    try:
        return run_child(MODULE, [*args, "--threads", str(threads)], extra_env={"TORCHINDUCTOR_CACHE_DIR": cache})
    except ChildError as exc:
        return {"error": str(exc)[-1500:]}


def cache_keys(cache: str) -> set[str]:
    """The keys of the compiled graphs in an inductor cache folder (AOTAutograd's and the FX graph cache's): two
    processes that compiled the same graphs with the same settings wrote the same keys."""
    return {
        f"{kind}/{path.name}"
        for kind in ("aotautograd", "fxgraph")
        for path in Path(cache, kind).rglob("*")
        if path.is_dir() and not any(child.is_dir() for child in path.iterdir())
    }


def measure_model(model_type: str, sizes: CompileSizes, threads: int) -> dict[str, dict[str, Any]]:
    """Each side alone from a cold cache of its own (both at once), then both in one process, interleaved, from
    the union of the two caches (so the pair compiles what the sides compiled without compiling it again)."""
    caches = {side: tempfile.mkdtemp(prefix=f"compile-bench-{model_type}-{side}-") for side in (*SIDES, "pair")}
    try:
        with ThreadPoolExecutor(max_workers=len(SIDES)) as pool:
            futures = {
                side: pool.submit(_run, model_type, "side", sizes, threads, caches[side], side) for side in SIDES
            }
        results = {side: future.result() for side, future in futures.items()}
        keys = {side: cache_keys(caches[side]) for side in SIDES}
        results["cache"] = {
            **{side: len(keys[side]) for side in SIDES},
            "shared": len(set.intersection(*keys.values())),
        }
        for side in SIDES:
            shutil.copytree(caches[side], caches["pair"], dirs_exist_ok=True)
        results["pair"] = _run(model_type, "pair", sizes, threads, caches["pair"])
        return results
    finally:
        for cache in caches.values():
            shutil.rmtree(cache, ignore_errors=True)


def model_rows(model_type: str, results: dict[str, dict[str, Any]]) -> list[Row]:
    """The compiled-step row (judged) and the compile-time row (info) of one model, from its children's results:
    ``upstream`` and ``generated`` (each side alone) and ``pair`` (both, interleaved)."""
    name = f"{model_type}: compiled train step, generated / upstream"
    failed = {child: result["error"] for child, result in results.items() if "error" in result}
    if failed:
        notes = "; ".join(f"{child}: {error}" for child, error in failed.items())
        return [Row(SECTION, name, "error", status=FAILED, notes=notes[-700:])]
    up, gen, pair = results["upstream"], results["generated"], results["pair"]
    times, eager = pair["compiled"], pair["eager"]
    ratio = summarize([g / u for g, u in zip(times["generated"], times["upstream"], strict=True)])
    step = {side: summarize(times[side]).median for side in SIDES}
    eager_step = {side: summarize(eager[side]).median for side in SIDES}
    alone = {side: summarize(results[side]["compiled"]).median for side in SIDES}
    compile_s = {side: max(0.0, results[side]["first"] - alone[side]) for side in SIDES}
    graphs = (
        f"{up['graphs']} graphs, {up['breaks']} breaks on each side"
        if (up["graphs"], up["breaks"]) == (gen["graphs"], gen["breaks"])
        else f"graphs / breaks: upstream {up['graphs']} / {up['breaks']}, generated {gen['graphs']} / {gen['breaks']}"
    )
    cache = results["cache"]
    same = (
        "the same compiled graphs (inductor cache keys)"
        if cache["upstream"] == cache["generated"] == cache["shared"]
        else f"cache keys: {cache['shared']} shared, {cache['upstream']} upstream, {cache['generated']} generated"
    )
    limit = budgets.TRAIN_STEP_RATIO
    return [
        Row(
            SECTION,
            name,
            f"{ratio.median:.3f}x",
            ratio.spread(),
            f"<= {limit:g} (+{budgets.TRAIN_STEP_NOISE:g} noise)",
            judge_at_most(ratio.median, limit, noise=budgets.TRAIN_STEP_NOISE),
            f"median compiled step: upstream {step['upstream']:.3f} s, generated {step['generated']:.3f} s "
            f"(eager: {eager_step['upstream']:.3f} s, {eager_step['generated']:.3f} s); {graphs}, {same}; attention "
            f"{pair['attention']}" + (f", experts {pair['experts']}" if pair.get("experts") else "") + "; first "
            f"compiled step loss |diff| {pair['loss_abs_diff']:.1e}"
            + (f"; the {pair['declared']}" if pair.get("declared") else ""),
        ),
        Row(
            SECTION,
            f"{model_type}: first-step compile time, generated / upstream",
            f"{compile_s['generated'] / compile_s['upstream']:.3f}x" if compile_s["upstream"] else "n/a",
            status=INFO,
            notes=f"upstream {compile_s['upstream']:.1f} s, generated {compile_s['generated']:.1f} s (each alone, "
            "cold inductor cache: its first compiled step less its median compiled step)",
        ),
    ]


def bench_compile(
    sizes: CompileSizes, model_types: Sequence[str] | None = None, *, threads: int = 1
) -> tuple[list[Row], str]:
    """Rows for every selected model (default: every registered text model and VLM or Omni package), and a line
    on how they ran."""
    from benchmarks.runtime_bench import registered_models

    asked = list(model_types) if model_types else registered_models()
    try:
        listed = run_child(MODULE, ["list", "--models", ",".join(asked), "--sizes", json.dumps(asdict(sizes))])
    except ChildError as exc:
        return [Row(SECTION, "compiled train step, all models", "error", status=FAILED, notes=str(exc)[-500:])], ""
    if "device" in listed:
        return [
            Row(SECTION, f"compiled train step on {sizes.device}", "error", status=FAILED, notes=listed["device"])
        ], ""
    rows: list[Row] = []
    for model_type in (model for model in asked if model not in listed["skipped"]):
        started = time.perf_counter()
        rows += model_rows(model_type, measure_model(model_type, sizes, threads))
        seconds = time.perf_counter() - started
        print(f"[benchmarks] compile: {model_type} in {seconds:.0f} s", file=sys.stderr, flush=True)
    if listed["skipped"]:
        skipped = "; ".join(f"{model} ({reason})" for model, reason in listed["skipped"].items())
        rows.append(Row(SECTION, f"{len(listed['skipped'])} other models", "-", status=SKIPPED, notes=skipped))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    device_name = f" ({listed['device_name']})" if listed.get("device_name") else ""
    setup = (
        f"compile: {sizes.describe()}{device_name}; {threads} torch thread(s); each side alone (both at once on "
        f"{cores} cores) "
        "for the compile time, then both sides in one process, interleaved, for the steps"
    )
    return rows, setup


if __name__ == "__main__":
    child_main()
