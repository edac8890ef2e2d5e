"""``patchgen`` and ``generate-all``: read the command line, run one mode (list, check, write), return its status.

Exit statuses are those of every console script (``modelgraft.generator.entrypoint``): 0 ok, 1 drift (``--check``),
2 bad input or a failed check, 3 a bug in patchgen.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from modelgraft.generator import drift
from modelgraft.generator.cache import CheckCache
from modelgraft.generator.checks.distinct_outputs import check_distinct_outputs
from modelgraft.generator.discovery import (
    LoadedConfig,
    Settings,
    config_module_from_arg,
    config_path_for,
    discover,
    find_settings,
    load_config,
)
from modelgraft.generator.entrypoint import ExitStatus, run_script
from modelgraft.generator.errors import DuplicateOutputError, OrphanedOutputError, PatchgenError, collected
from modelgraft.generator.output.write import write_all
from modelgraft.generator.progress import Progress

#: The statuses ``patchgen`` returns, under the names its callers and tests know them by.
EXIT_OK, EXIT_DRIFT, EXIT_ERROR, EXIT_INTERNAL = (
    ExitStatus.OK,
    ExitStatus.FINDINGS,
    ExitStatus.BAD_INPUT,
    ExitStatus.INTERNAL,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="patchgen",
        description="Generate patched transformers modeling files from patch configs.",
    )
    parser.add_argument("configs", nargs="*", metavar="config.module", help="config module(s), dotted or as a path")
    parser.add_argument("-o", "--output-dir", type=Path, help="write here instead of <config dir>/generated")
    parser.add_argument(
        "-c",
        "--config-name",
        metavar="NAME",
        help="the PatchConfig variable to use (default: the one the module defines)",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the patches of the selected configs; generate nothing"
    )
    parser.add_argument("--all", action="store_true", help="select every config found via [tool.patchgen]")
    parser.add_argument("--dry-run", action="store_true", help="run every check, write nothing")
    parser.add_argument("--diff", action="store_true", help="also write the .diff against upstream next to each file")
    parser.add_argument("-v", "--verbose", action="store_true", help="say what happens to every file")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bar and no closing summary (generate-all)"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if generated files differ from what generation would write"
    )
    parser.add_argument("--fix", action="store_true", help="with --check: rewrite drifted files, remove orphans")
    parser.add_argument(
        "--no-cache", action="store_true", help="with --check: ignore the content-hash cache, regenerate everything"
    )
    parser.add_argument(
        "-j", "--jobs", type=int, help="worker processes (default: one per core, at most one per config)"
    )
    return parser


class Reporter:
    """Plain lines on stdout; progress (``modelgraft.generator.progress``) is drawn on stderr, on a terminal only."""

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose

    def info(self, message: str) -> None:
        print(message)

    def detail(self, message: str) -> None:
        if self.verbose:
            print(message)


@dataclass
class Invocation:
    """One ``patchgen`` run after its command line was read: what every mode function works from."""

    args: argparse.Namespace
    settings: Settings
    reporter: Reporter
    progress: Progress
    loaded_configs: list[LoadedConfig]
    #: ``generate-all``: end a generation with one summary line.
    summary: bool
    #: Configs that failed to load: reported with the generation's errors.
    load_errors: list[PatchgenError]

    @property
    def with_diff(self) -> bool:
        """Whether ``.diff`` files are generated: asked for, or compared by ``--check``."""
        return self.args.diff or (self.args.check and self.settings.write_diff)

    @property
    def zoo_wide(self) -> bool:
        """Every config selected by discovery into the usual folders: only then can a file be an orphan."""
        return not self.args.configs and not self.args.output_dir

    def outputs_of(self, loaded: LoadedConfig) -> list[Path]:
        return [loaded.output_path] + ([loaded.diff_path] if self.with_diff else [])

    def rel(self, path: Path) -> str:
        return _rel(path, self.settings)


def run(argv: Sequence[str] | None = None, *, summary: bool = False) -> int:
    """``patchgen argv``; with ``summary`` (``generate-all``), end a generation with one summary line."""
    args = build_parser().parse_args(argv)
    _validate(args)
    settings = find_settings()
    module_names = _select(args, settings)
    reporter = Reporter(args.verbose)
    if args.list:
        loaded_configs, errors = _load(module_names, args, settings)
        if errors:
            raise collected(errors)
        return _list(loaded_configs, reporter)
    if args.check and _vouched_by_cache(args, settings, module_names, reporter):
        return EXIT_OK
    with Progress(quiet=args.quiet) as progress:
        loaded_configs, errors = _load(module_names, args, settings, progress)
        invocation = Invocation(args, settings, reporter, progress, loaded_configs, summary, errors)
        return _check(invocation) if args.check else _write(invocation)


def _validate(args: argparse.Namespace) -> None:
    """Flag combinations argparse cannot express; raised before anything is read."""
    if args.fix and not args.check:
        raise PatchgenError("--fix only works with --check")


def _select(args: argparse.Namespace, settings: Settings) -> list[str]:
    """Module names of the configs to run: those named, or every discovered one."""
    if args.configs:
        return [config_module_from_arg(arg, settings) for arg in args.configs]
    if args.all or args.check or args.list:
        return discover(settings)
    raise PatchgenError("name a config module, or pass --all (see patchgen --help)")


def _load(
    module_names: list[str], args: argparse.Namespace, settings: Settings, progress: Progress | None = None
) -> tuple[list[LoadedConfig], list[PatchgenError]]:
    """Import each config module and pick its PatchConfig (``-c``: the one bound to that name).

    A config that fails to load is reported with the others' errors, after they were generated.
    """
    if args.config_name and len(module_names) > 1:
        raise PatchgenError("-c NAME selects a variable in one config module; name exactly one")
    loaded_configs, errors = [], []
    if progress is not None:
        progress.phase("loading configs", len(module_names))
    for module_name in module_names:
        try:
            loaded_configs.append(
                load_config(module_name, settings, variable=args.config_name, output_dir=args.output_dir)
            )
        except PatchgenError as error:
            errors.append(error.with_context(config=module_name))
        if progress is not None:
            progress.advance()
    return loaded_configs, errors


def _list(loaded_configs: list[LoadedConfig], reporter: Reporter) -> int:
    """``--list``: each config's patches, exclusions and dropped imports; reads no upstream file."""
    for loaded in loaded_configs:
        config = loaded.config
        reporter.info(f"{loaded.name}: {config.source_module} -> {config.target_file}")
        for patch in config.patches:
            reporter.info(
                f"  {patch.kind:<17} {patch.target}" + (f"  ({patch.description})" if patch.description else "")
            )
        for name in config.exclusions:
            reporter.info(f"  {'exclude':<17} {name}")
        for name in config.dropped_imports:
            reporter.info(f"  {'drop_import':<17} {name}")
    return EXIT_OK


def _check_cache(invocation: Invocation) -> CheckCache | None:
    """The content-hash cache, where settings name one and the run writes into the usual folders."""
    settings, args = invocation.settings, invocation.args
    if not settings.cache_dir or args.output_dir or args.no_cache:
        return None
    return CheckCache(settings.cache_dir)


def _generate_files(invocation: Invocation, loaded_configs: list[LoadedConfig]) -> tuple[list, dict[Path, str]]:
    """Generate ``loaded_configs`` in memory: the generated files and the text each output path should hold."""
    started = time.perf_counter()
    invocation.progress.phase(f"generating {len(loaded_configs)} config(s)", len(loaded_configs))
    files, errors = (
        _generate(loaded_configs, invocation.settings, invocation.args.jobs) if loaded_configs else ([], [])
    )
    if invocation.load_errors or errors:
        raise collected(invocation.load_errors + errors)
    # Across configs, so here, where every config of the run is known (those the check cache skipped too).
    check_distinct_outputs(drift.run_outputs(invocation.loaded_configs, files))
    invocation.progress.advance(len(loaded_configs))
    invocation.reporter.detail(f"generated {len(files)} file(s) in {time.perf_counter() - started:.2f}s")
    return files, drift.expected_files(files, with_diff=invocation.with_diff)


def _orphans(invocation: Invocation) -> list[drift.Drift]:
    """Generated files no selected config produces; looked for only in a zoo-wide run."""
    if not invocation.zoo_wide:
        return []
    owned = {p.resolve() for loaded in invocation.loaded_configs for p in (loaded.output_path, loaded.diff_path)}
    return drift.orphans(invocation.settings, owned)


def _remember(cache: CheckCache | None, files: list, expected: dict[Path, str]) -> None:
    """Record each config's inputs and outputs so a later ``--check`` can skip it while they hold."""
    if cache is None:
        return
    for generated in files:
        outputs = {p: t for p, t in expected.items() if p in (generated.path, generated.diff_path)}
        cache.record(generated.config_name, generated.inputs, outputs, dict(generated.versions), output=generated.path)
    cache.save()


def _vouched_by_cache(
    args: argparse.Namespace, settings: Settings, module_names: list[str], reporter: Reporter
) -> bool:
    """Whether the check cache answers ``--check`` for every selected config without loading one.

    It does when each config's entry names its generated module in the config's output folder and holds
    (inputs, versions and outputs on disk as recorded: ``CheckCache.vouched_output``), the outputs are
    distinct and, zoo-wide, no generated file is an orphan: the one outcome, exit 0, that the full check
    would reach by loading every config and skipping each. Anything else returns False and the full
    check runs, so every drift, orphan or refusal is reported by the same code as without this shortcut.
    A warm check of the zoo spent half its time importing and running configs (docs/performance.md,
    "Generator").
    """
    if args.config_name or args.output_dir or args.no_cache or not settings.cache_dir:
        return False
    cache = CheckCache(settings.cache_dir)
    with_diff = args.diff or settings.write_diff
    modules: dict[str, Path] = {}
    for name in module_names:
        folder = (config_path_for(name, settings).resolve().parent / settings.output_subdir).resolve()
        output = cache.vouched_output(name, folder, with_diff=with_diff)
        if output is None:
            return False
        modules[name] = output
    texts = {name: drift.read_text(path) for name, path in modules.items()}
    try:
        check_distinct_outputs({name: (modules[name].name, text) for name, text in texts.items() if text is not None})
    except DuplicateOutputError:
        return False
    zoo_wide = not args.configs
    if zoo_wide and drift.orphans(settings, {p for m in modules.values() for p in (m, m.with_suffix(".diff"))}):
        return False
    reporter.detail(f"check cache: {len(modules)} of {len(modules)} config(s) unchanged since generated")
    reporter.detail(f"{len(modules)} config(s) up to date")
    return True


def _check(invocation: Invocation) -> int:
    """``--check``: exit 1 on any difference from what generation would write; ``--fix`` repairs it."""
    cache = _check_cache(invocation)
    todo = invocation.loaded_configs
    if cache is not None:
        todo = [loaded for loaded in todo if not cache.is_clean(loaded.name, invocation.outputs_of(loaded))]
        invocation.reporter.detail(
            f"check cache: {len(invocation.loaded_configs) - len(todo)} of {len(invocation.loaded_configs)} config(s) "
            "unchanged since generated"
        )
    # Files from another upstream version are out of date as they are: reported, not regenerated (--fix does).
    stale = {} if invocation.args.fix else drift.from_other_versions(todo)
    files, expected = _generate_files(invocation, [loaded for loaded in todo if loaded.name not in stale])
    drifts = list(stale.values()) + drift.compare(expected) + _orphans(invocation)
    if invocation.args.fix:
        return _fix(invocation, drifts, cache, files, expected)
    for item in drifts:
        invocation.reporter.info(f"drift: {invocation.rel(item.path)} ({item.reason})")
    if drifts:
        invocation.reporter.info(
            f"{len(drifts)} generated file(s) out of date; run `patchgen --check --fix` or `generate-all`"
        )
        return EXIT_DRIFT
    _remember(cache, files, expected)
    invocation.reporter.detail(f"{len(invocation.loaded_configs)} config(s) up to date")
    return EXIT_OK


def _fix(
    invocation: Invocation,
    drifts: list[drift.Drift],
    cache: CheckCache | None,
    files: list,
    expected: dict[Path, str],
) -> int:
    """``--check --fix``: write what generation would write, delete orphans."""
    for item in drifts:
        invocation.reporter.info(f"fixed: {invocation.rel(item.path)} ({item.reason})")
    write_all({d.path: d.expected for d in drifts if d.expected is not None})
    for item in drifts:
        if item.expected is None:
            item.path.unlink()
    _remember(cache, files, expected)
    return EXIT_OK


def _write(invocation: Invocation) -> int:
    """Generation (``--dry-run``: without writing): write the files whose bytes change."""
    args, progress = invocation.args, invocation.progress
    files, expected = _generate_files(invocation, invocation.loaded_configs)
    stale = _orphans(invocation)
    if stale:
        raise OrphanedOutputError(
            f"generated file {invocation.rel(stale[0].path)} has no config (delete it, or restore its config)"
        )
    changed = {p: t for p, t in expected.items() if not p.is_file() or p.read_text(encoding="utf-8") != t}
    if not args.dry_run:
        progress.phase(f"writing {len(changed)} file(s)", len(invocation.loaded_configs))
        write_all(changed)
        _remember(_check_cache(invocation), files, expected)
        progress.advance(len(invocation.loaded_configs))
    verb = "would write" if args.dry_run else "wrote"
    for path in sorted(expected):
        if path in changed:
            invocation.reporter.info(f"{verb} {invocation.rel(path)}")
        else:
            invocation.reporter.detail(f"unchanged {invocation.rel(path)}")
    if invocation.summary:
        written = "to write" if args.dry_run else "written"
        progress.summary(
            f"generate-all: {len(invocation.loaded_configs)} config(s), {len(changed)} file(s) {written}, "
            f"{len(expected) - len(changed)} unchanged, {progress.elapsed():.1f}s"
        )
    return EXIT_OK


def _generate(
    loaded_configs: list[LoadedConfig], settings: Settings, jobs: int | None
) -> tuple[list, list[PatchgenError]]:
    # Imported here: a --check that the cache answers never loads the pipeline, ruff or jinja.
    from modelgraft.generator.context import RunContext
    from modelgraft.generator.pipeline import generate_each

    return generate_each(loaded_configs, RunContext(settings, jobs=jobs))


def _rel(path: Path, settings: Settings) -> str:
    try:
        return path.resolve().relative_to(settings.root).as_posix()
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None, *, summary: bool = False) -> int:
    """The ``patchgen`` console script: :func:`run` under the shared exit-status handler."""
    return run_script("patchgen", lambda: run(argv, summary=summary))


def generate_all(argv: Sequence[str] | None = None) -> int:
    """``generate-all``: ``patchgen --all --diff`` over the whole zoo."""
    extra = list(sys.argv[1:] if argv is None else argv)
    return main(["--all", "--diff", *extra], summary=True)


if __name__ == "__main__":
    sys.exit(main())
