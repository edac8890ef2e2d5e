"""``patchgen`` and ``generate-all``: the only place that maps failures to exit codes.

Exit codes: 0 ok, 1 drift (``--check``), 2 bad input or a failed check, 3 a bug in patchgen.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from generator.discovery import LoadedConfig, Settings, config_module_from_arg, discover, find_settings, load_config
from generator.errors import OrphanedOutputError, PatchgenError
from generator.progress import Progress

EXIT_OK, EXIT_DRIFT, EXIT_ERROR, EXIT_INTERNAL = 0, 1, 2, 3


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
    """Plain lines on stdout; progress (``generator.progress``) is drawn on stderr, on a terminal only."""

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose

    def info(self, message: str) -> None:
        print(message)

    def detail(self, message: str) -> None:
        if self.verbose:
            print(message)


def _select(args: argparse.Namespace, settings: Settings) -> list[str]:
    if args.configs:
        return [config_module_from_arg(arg, settings) for arg in args.configs]
    if args.all or args.check or args.list:
        return discover(settings)
    raise PatchgenError("name a config module, or pass --all (see patchgen --help)")


def _load(
    names: list[str], args: argparse.Namespace, settings: Settings, progress: Progress | None = None
) -> list[LoadedConfig]:
    if args.config_name and len(names) > 1:
        raise PatchgenError("-c NAME selects a variable in one config module; name exactly one")
    loaded = []
    if progress is not None:
        progress.phase("loading configs", len(names))
    for name in names:
        loaded.append(load_config(name, settings, variable=args.config_name, output_dir=args.output_dir))
        if progress is not None:
            progress.advance()
    return loaded


def _list(configs: list[LoadedConfig], reporter: Reporter) -> int:
    for loaded in configs:
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


def run(argv: Sequence[str] | None = None, *, summary: bool = False) -> int:
    """``patchgen argv``; with ``summary`` (``generate-all``), end a generation with one summary line."""
    args = build_parser().parse_args(argv)
    if args.fix and not args.check:
        raise PatchgenError("--fix only works with --check")
    reporter = Reporter(args.verbose)
    settings = find_settings()
    names = _select(args, settings)
    if args.list:
        return _list(_load(names, args, settings), reporter)
    with Progress(quiet=args.quiet) as progress:
        return _run(args, settings, names, reporter, progress, summary)


def _run(
    args: argparse.Namespace,
    settings: Settings,
    names: list[str],
    reporter: Reporter,
    progress: Progress,
    summary: bool,
) -> int:
    zoo_wide = not args.configs
    configs = _load(names, args, settings, progress)

    from generator import drift
    from generator.cache import CheckCache
    from generator.output.write import write_all

    with_diff = args.diff or (args.check and settings.write_diff)
    cache = (
        CheckCache(settings.cache_dir) if settings.cache_dir and not args.output_dir and not args.no_cache else None
    )

    def outputs_of(loaded: LoadedConfig) -> list[Path]:
        return [loaded.output_path] + ([loaded.diff_path] if with_diff else [])

    todo = configs
    if args.check and cache is not None:
        todo = [c for c in configs if not cache.is_clean(c.name, outputs_of(c))]
        reporter.detail(
            f"check cache: {len(configs) - len(todo)} of {len(configs)} config(s) unchanged since generated"
        )

    started = time.perf_counter()
    progress.phase(f"generating {len(todo)} config(s)", len(todo))
    files = _generate(todo, settings, args.jobs) if todo else []
    progress.advance(len(todo))
    reporter.detail(f"generated {len(files)} file(s) in {time.perf_counter() - started:.2f}s")
    expected = drift.expected_files(files, with_diff=with_diff)
    owned = {p.resolve() for c in configs for p in (c.output_path, c.diff_path)}
    stale = drift.orphans(settings, owned) if zoo_wide and not args.output_dir else []

    def remember() -> None:
        if cache is None or args.dry_run:
            return
        for f in files:
            outputs = {p: t for p, t in expected.items() if p in (f.path, f.diff_path)}
            cache.record(f.config_name, f.inputs, outputs, dict(f.versions))
        cache.save()

    if args.check:
        drifts = drift.compare(expected) + stale
        for item in drifts:
            reporter.info(f"{'fixed' if args.fix else 'drift'}: {_rel(item.path, settings)} ({item.reason})")
        if args.fix:
            write_all({d.path: d.expected for d in drifts if d.expected is not None})
            for item in stale:
                item.path.unlink()
            remember()
            return EXIT_OK
        if drifts:
            reporter.info(
                f"{len(drifts)} generated file(s) out of date; run `patchgen --check --fix` or `generate-all`"
            )
            return EXIT_DRIFT
        remember()
        reporter.detail(f"{len(configs)} config(s) up to date")
        return EXIT_OK

    if stale:
        raise OrphanedOutputError(
            f"generated file {_rel(stale[0].path, settings)} has no config (delete it, or restore its config)"
        )
    changed = {p: t for p, t in expected.items() if not p.is_file() or p.read_text(encoding="utf-8") != t}
    verb = "would write" if args.dry_run else "wrote"
    if not args.dry_run:
        progress.phase(f"writing {len(changed)} file(s)", len(configs))
        write_all(changed)
        remember()
        progress.advance(len(configs))
    for path in sorted(expected):
        if path in changed:
            reporter.info(f"{verb} {_rel(path, settings)}")
        else:
            reporter.detail(f"unchanged {_rel(path, settings)}")
    if summary:
        written = "to write" if args.dry_run else "written"
        progress.summary(
            f"generate-all: {len(configs)} config(s), {len(changed)} file(s) {written}, "
            f"{len(expected) - len(changed)} unchanged, {progress.elapsed():.1f}s"
        )
    return EXIT_OK


def _generate(configs: list[LoadedConfig], settings: Settings, jobs: int | None) -> list:
    # Imported here: a --check that the cache answers never loads the pipeline, ruff or jinja.
    from generator.pipeline import generate

    return generate(configs, settings, jobs=jobs)


def _config_file(module: str | None) -> str | None:
    """The file of a config module, relative to the project root, for error messages."""
    if not module:
        return None
    try:
        root = find_settings().root
    except PatchgenError:
        return None
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    return path.relative_to(root).as_posix() if path.is_file() else None


def _rel(path: Path, settings: Settings) -> str:
    try:
        return path.resolve().relative_to(settings.root).as_posix()
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None, *, summary: bool = False) -> int:
    try:
        return run(argv, summary=summary)
    except PatchgenError as exc:
        print(f"patchgen: error: {exc.format(_config_file(exc.config))}", file=sys.stderr)
        return EXIT_ERROR
    except Exception:
        # A bug in patchgen itself: never let it read as drift (1) or as bad input (2).
        traceback.print_exc()
        print("patchgen: internal error (the traceback above is a bug in patchgen; please report it)", file=sys.stderr)
        return EXIT_INTERNAL


def generate_all(argv: Sequence[str] | None = None) -> int:
    """``generate-all``: ``patchgen --all --diff`` over the whole zoo."""
    extra = list(sys.argv[1:] if argv is None else argv)
    return main(["--all", "--diff", *extra], summary=True)


if __name__ == "__main__":
    sys.exit(main())
