"""``python -m benchmarks.run``: run the benchmark sections, print one table, write it to a file.

Sections: ``generator`` (whole-process time and peak RSS of generate-all / patchgen --check),
``runtime`` (train step, generated vs upstream, per dense model), ``loss`` (chunked vs eager peak
memory), ``moe`` (the grouped experts kernel vs upstream's experts implementations, per layer and
per train step of each MoE model). Optional, only with ``--only distributed``: ``distributed`` (per-rank
memory and step time of FSDP2 / EP / SP / activation checkpointing on 1, 2 and 4 gloo ranks against one
process; minutes, so neither in the default run nor in the smoke test); only with ``--only compile``:
``compile`` (each text model compiled per decoder layer by inductor, generated vs upstream: the compiled step
and the cold compile time; a cold compile per side and model, so minutes too). Each budget row says met or MISSED; a missed budget is
reported, not fatal, unless ``--strict``. ``--smoke`` runs every section at toy sizes in well under a minute: it proves the
script works, its figures mean nothing. See docs/performance.md for how to read the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

from benchmarks import (
    compile_bench,
    composed_vlm_bench,
    distributed_bench,
    loss_bench,
    moe_bench,
    runtime_bench,
    vlm_bench,
)
from benchmarks.child import fork_children_from_a_preloaded_interpreter
from benchmarks.generator_bench import bench_generator
from benchmarks.report import BAD_STATUSES, FAILED, Row, render_report

SECTIONS = ("generator", "runtime", "loss", "moe")
#: Sections whose smoke run starts several children that import transformers: from there on, children fork
#: from one interpreter that imported it (one import instead of three or four; the figures mean nothing).
PRELOADED_IN_SMOKE_RUNS = ("runtime", "moe")
#: Sections run only when named with --only: too slow for the default run and the smoke test.
OPTIONAL_SECTIONS = ("distributed", "compile")
DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "latest.md"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        action="append",
        choices=SECTIONS + OPTIONAL_SECTIONS,
        help=f"run only this section (repeatable; default: all but {', '.join(OPTIONAL_SECTIONS)})",
    )
    parser.add_argument("--repeats", type=int, default=5, help="runs per timed measurement (default 5)")
    parser.add_argument(
        "--models", help="runtime, moe and compile sections: comma-separated model types (default: every registered)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help=(
            "runtime, moe and compile sections: torch threads "
            "(default 1: immune to oversubscription on a shared machine; 0: torch's default)"
        ),
    )
    parser.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="compile section: where the models train (default cpu; cuda: a CUDA device, inductor's Triton kernels)",
    )
    parser.add_argument("--smoke", action="store_true", help="toy sizes, one repeat, one model per section")
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help=f"where to write the table ({DEFAULT_OUTPUT.relative_to(REPO_ROOT)})",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a budget is missed, not only on failures")
    return parser


def _git_revision() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
        )
    except OSError:
        return "unknown"
    if head.returncode != 0:
        return "no commit yet" + (" (uncommitted changes)" if dirty.stdout.strip() else "")
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _load() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def machine_lines() -> list[str]:
    """What the figures were measured on: a reader comparing runs needs this first."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [
        f"machine: {cores} cores ({_cpu_model()}), {platform.system()} {platform.release()}",
        (
            f"python {platform.python_version()}, torch {_version('torch')}, "
            f"transformers {_version('transformers')}, ruff {_version('ruff')}"
        ),
        f"revision: {_git_revision()}",
    ]


def run_sections(args: argparse.Namespace) -> tuple[list[Row], list[str]]:
    """Rows of every selected section, and the lines describing their setup."""
    sections = args.only or list(SECTIONS)
    repeats = 1 if args.smoke else args.repeats
    rows: list[Row] = []
    setup: list[str] = []
    for section in sections:
        started = time.perf_counter()
        print(f"[benchmarks] {section} ...", file=sys.stderr, flush=True)
        if args.smoke and section in PRELOADED_IN_SMOKE_RUNS:
            fork_children_from_a_preloaded_interpreter()
        if section == "generator":
            rows += bench_generator(repeats)
        elif section == "runtime":
            sizes = runtime_bench.SMOKE_SIZES if args.smoke else runtime_bench.RuntimeSizes()
            models = args.models.split(",") if args.models else None
            if args.smoke and models is None:  # the hybrid model: the dense path, and its kernels on top
                models = list(runtime_bench.HYBRID)
            section_rows, line = runtime_bench.bench_runtime(
                repeats, sizes, models, threads=args.threads, child_per_figure=not args.smoke
            )
            rows += section_rows + vlm_bench.bench_vlm(repeats, threads=args.threads)
            rows += composed_vlm_bench.bench_composed_vlm(repeats, threads=args.threads)
            setup += [line] if line else []
        elif section == "moe":
            sizes = moe_bench.SMOKE_SIZES if args.smoke else moe_bench.MoeSizes()
            models = args.models.split(",") if args.models else None
            if args.smoke and models is None:
                models = [moe_bench.SMOKE_MODEL]
            section_rows, line = moe_bench.bench_moe(
                repeats, sizes, models, threads=args.threads, child_per_figure=not args.smoke
            )
            rows += section_rows
            setup += [line] if line else []
        elif section == "loss":
            section_rows, line = loss_bench.bench_loss(
                loss_bench.SMOKE_SIZES if args.smoke else loss_bench.LossSizes()
            )
            rows += section_rows
            setup += [line] if line else []
        elif section == "compile":
            models = args.models.split(",") if args.models else None
            if args.smoke and models is None:
                models = [compile_bench.SMOKE_MODEL]
            sizes = compile_bench.SMOKE_SIZES if args.smoke else compile_bench.CompileSizes()
            sizes = dataclasses.replace(sizes, steps=repeats, device=args.device)  # rounds: the interleaved steps
            section_rows, line = compile_bench.bench_compile(sizes, models, threads=args.threads)
            rows += section_rows
            setup += [line] if line else []
        elif section == "distributed":
            sizes = distributed_bench.SMOKE_SIZES if args.smoke else distributed_bench.DistSizes()
            section_rows, line = distributed_bench.bench_distributed(sizes)
            rows += section_rows
            setup += [line]
        print(f"[benchmarks] {section} done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return rows, setup


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    if args.device != "cpu" and set(args.only or SECTIONS) != {"compile"}:
        build_parser().error(f"--device {args.device} applies to the compile section alone: add --only compile")
    load_before = _load()
    started = datetime.datetime.now(datetime.UTC)
    rows, setup = run_sections(args)
    command = shlex.join(["python", "-m", "benchmarks.run", *(sys.argv[1:] if argv is None else argv)])
    preamble = [
        *machine_lines(),
        f"command: `{command}` at {started:%Y-%m-%d %H:%M} UTC",
        f"load average (1/5/15 min) before: {load_before}, after: {_load()}",
        *setup,
        "definitions (cold, peak memory, ratios): docs/performance.md",
    ]
    if args.smoke:
        preamble.insert(0, "SMOKE RUN: toy sizes and one repeat; the figures and verdicts mean nothing")
    report = render_report("modelgraft benchmarks", preamble, rows)
    print(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report, encoding="utf-8")
    print(f"written to {args.output}", file=sys.stderr)
    bad = {FAILED} if not args.strict else BAD_STATUSES
    return 1 if any(row.status in bad for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
