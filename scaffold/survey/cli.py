"""The ``scaffold-survey`` command: arguments, the run from clone to report, interrupts and exit statuses.

The command ends through the handler every console script shares (``modelgraft.generator.entrypoint``), with
its one table: 0 no model is wrong or broken; 1 some are (findings); 2 bad arguments, or a survey that could not
start (a :class:`SurveyError`, printed as one line); 3 a bug (a traceback). An interrupt ends it with 130, as a
shell reports any process Ctrl-C ends, once its processes and clones are gone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from modelgraft.scaffold.survey.categories import category_names, multimodal_categories, read_categories
from modelgraft.scaffold.survey.classify import PASS
from modelgraft.scaffold.survey.clones import CloneFactory, repository_root
from modelgraft.scaffold.survey.display import Display
from modelgraft.scaffold.survey.errors import SurveyError
from modelgraft.scaffold.survey.model_run import Settings
from modelgraft.scaffold.survey.population import (
    causal_lm_models,
    conditional_generation_models,
    select,
    transformers_models_dir,
    transformers_version,
    zoo_models,
)
from modelgraft.scaffold.survey.processes import Runner
from modelgraft.scaffold.survey.tables import (
    exit_code,
    markdown_tables,
    plain_tables,
    rich_summary,
    write_json,
)
from modelgraft.scaffold.survey.workers import run_survey

#: The status of an interrupted survey: a shell's for a process Ctrl-C ends (128 + SIGINT), outside the table.
EXIT_INTERRUPTED = 128 + signal.SIGINT


def build_parser() -> argparse.ArgumentParser:
    """The command's arguments (docs/cli.md lists each)."""
    parser = argparse.ArgumentParser(
        prog="scaffold-survey",
        description=(
            "Scaffold every decoder-only model of the installed transformers that is not in the zoo, in a "
            "temporary clone (copier copy, then the model's tests), and report pass / refused / broken / wrong."
        ),
    )
    parser.add_argument("models", nargs="*", metavar="MODEL", help="survey only these (default: the population)")
    parser.add_argument("--category", choices=category_names(), help="only models the reader puts in this category")
    parser.add_argument("--limit", type=int, metavar="N", help="at most N models (after the other filters)")
    parser.add_argument(
        "-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
        help="worker processes, each with its own clone (default: the number of cores)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S", help="seconds per model (default 600)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary clones (their path is printed)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every result as JSON to PATH")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown (docs/scaffolding.md)")
    parser.add_argument(
        "--from-worktree", action=argparse.BooleanOptionalAction, default=True,
        help="survey the working tree, uncommitted files included (default); --no-from-worktree: a git clone",
    )  # fmt: skip
    parser.add_argument("--vcs-ref", metavar="REF", help="passed to copier copy (default: what Copier picks)")
    parser.add_argument(
        "--pass-category", action="store_true",
        help="also answer -d category=<the reader's category> (default: the questionnaire decides)",
    )  # fmt: skip
    return parser


def _validate(args: argparse.Namespace) -> None:
    if args.jobs < 1:
        raise SurveyError("-j/--jobs must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise SurveyError("--limit must be at least 1")
    if args.timeout <= 0:
        raise SurveyError("--timeout must be positive")
    if args.json is not None and not args.json.resolve().parent.is_dir():
        raise SurveyError(f"--json {args.json}: {args.json.resolve().parent} does not exist")


def _interrupt_on_sigterm():  # -> the previous handler, or None when not in the main thread
    """A SIGTERM ends the survey as Ctrl-C does: its processes killed, its clones removed."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, interrupt)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``scaffold-survey`` console script under the shared exit-status handler: bad input exits 2 with one
    line (``scaffold-survey: error: <cause>``), a bug 3, never 1."""
    # Imported here: importing this module (as the survey's workers do) must not load the generator.
    from modelgraft.generator.entrypoint import run_script
    from modelgraft.generator.errors import UserError

    def survey() -> int:
        try:
            return _survey(argv)
        except SurveyError as error:  # bad input, which the shared handler prints and ends with 2
            raise UserError(str(error)) from error

    return run_script("scaffold-survey", survey)


def _survey(argv: Sequence[str] | None) -> int:
    from modelgraft.generator.entrypoint import ExitStatus

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return ExitStatus.BAD_INPUT if exit_.code not in (0, None) else ExitStatus.OK
    tty = sys.stderr.isatty()
    base: Path | None = None
    runner = Runner()
    started = time.monotonic()
    previous_sigterm = _interrupt_on_sigterm()
    try:
        _validate(args)
        root = repository_root(Path.cwd())
        models_dir = transformers_models_dir()
        upstream = causal_lm_models(models_dir)
        multimodal = conditional_generation_models(models_dir)
        upstream.update(multimodal)
        base = Path(tempfile.mkdtemp(prefix="scaffold-survey-"))
        factory = CloneFactory(root, base, from_worktree=args.from_worktree)
        print(f"scaffold-survey: cloning {root} into {base} ...", file=sys.stderr, flush=True)
        first = factory(0)
        names = select(upstream, zoo_models(first), args.models)
        categorized = read_categories(first, names, models_dir)
        if categorized.warning:
            print(f"scaffold-survey: warning: {categorized.warning}", file=sys.stderr)
        # A package with a conditional-generation head and no causal LM is surveyed as a VLM or Omni model only:
        # the others are encoder-decoders, out of the population (population.py).
        names = [
            n
            for n in names
            if n not in multimodal or n in args.models or categorized.by_model[n][0] in multimodal_categories()
        ]
        if args.category:
            names = [n for n in names if categorized.by_model[n][0] == args.category]
        if args.limit is not None:
            names = names[: args.limit]
        if not names:
            raise SurveyError("no model to survey (check the model names, --category and --limit)")
        jobs = min(args.jobs, len(names))
        threads = max(1, (os.cpu_count() or 1) // jobs)
        settings = Settings(args.timeout, args.vcs_ref, args.pass_category, threads)
        print(
            f"scaffold-survey: {len(names)} model(s) of transformers {transformers_version()}, "
            f"{jobs} worker(s), {args.timeout:g} s each at most",
            file=sys.stderr,
            flush=True,
        )
        with Display(len(names), tty=tty) as display:
            results = run_survey(factory, jobs, names, categorized.by_model, settings, display, runner)
    except KeyboardInterrupt:
        print("scaffold-survey: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        runner.close()
        if base is not None:
            if args.keep:
                print(f"scaffold-survey: clones kept in {base}", file=sys.stderr)
            else:
                shutil.rmtree(base, ignore_errors=True)
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)

    elapsed = time.monotonic() - started
    if args.markdown:
        caption = (
            f"`scaffold-survey` on transformers {transformers_version()}, {time.strftime('%Y-%m-%d')}: "
            f"{len(results)} model(s)" + (f" ({categorized.warning})" if categorized.warning else "")
        )
        sys.stdout.write(markdown_tables(results, caption=caption))
    elif sys.stdout.isatty():
        from rich.console import Console

        Console().print(rich_summary(results))
        failures = [r for r in results if r.outcome != PASS]
        if failures:
            sys.stdout.write("\n" + plain_tables(results).split("\n\n", 1)[1])
    else:
        sys.stdout.write(plain_tables(results))
    if categorized.warning:
        print(f"scaffold-survey: warning: {categorized.warning}", file=sys.stderr)
    print(f"{len(results)} model(s) in {elapsed:.0f} s", file=sys.stderr)
    if args.json is not None:
        meta = {
            "transformers": transformers_version(),
            "source": str(root),
            "from_worktree": args.from_worktree,
            "reader": categorized.reader,
            "categories_warning": categorized.warning,
            "jobs": jobs,
            "timeout": args.timeout,
            "seconds": round(elapsed, 1),
        }
        write_json(args.json, results, meta)
    return exit_code(results)
