"""``patchgen-pin``: fetch reference sources of a transformers version; survey signature drift; try a version
on a scratch copy and report what it breaks; bump the pin.

Exit statuses are those of every console script (``modelgraft.generator.entrypoint``): 0 ok (survey: no drift;
try and bump: every model passes), 1 findings (signature drift; a model that fails under the version),
2 bad input (an unknown config, a version pip cannot download), 3 a bug.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from modelgraft.generator.discovery import config_module_from_arg, discover, find_settings, load_config
from modelgraft.generator.entrypoint import ExitStatus, run_script
from modelgraft.generator.pinbump.fetch import DEFAULT_WORKSPACE, fetch_reference
from modelgraft.generator.pinbump.report import render_markdown
from modelgraft.generator.pinbump.survey import render, survey
from modelgraft.generator.pinbump.trial import TrialSettings, apply_bump, run_trial
from modelgraft.generator.upstream.locate import distribution_version, package_root


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="patchgen-pin", description="Pin-bump helpers for the pinned transformers version."
    )
    parser.add_argument(
        "--workspace",
        type=Path,
        help=f"git-ignored folder for reference trees (default: <project>/{DEFAULT_WORKSPACE})",
    )
    parser.add_argument(
        "--pip-arg",
        action="append",
        default=[],
        help="extra argument for `pip download`, as --pip-arg=--no-index (repeatable)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="unpack the sources of a version into the workspace")
    fetch.add_argument("version")
    drift = sub.add_parser("survey", help="signature drift of every patch target between two versions")
    drift.add_argument("old", help="version the configs were written against (e.g. the current pin)")
    drift.add_argument("new", help="version to move to")
    drift.add_argument("configs", nargs="*", metavar="config.module", help="default: every discovered config")
    drift.add_argument("--show-unchanged", action="store_true", help="also list targets whose signature is the same")
    for name, help_text in (
        ("try", "generate and test every model against a version on a scratch copy; write the migration report"),
        ("bump", "try a version, then move the pin and the regenerated files into the project if every model passes"),
    ):
        trial = sub.add_parser(name, help=help_text)
        trial.add_argument("version")
        trial.add_argument(
            "--report", type=Path, help="folder for report.md and report.json (default: <workspace>/try-<version>)"
        )
        trial.add_argument("-j", "--jobs", type=int, default=2, help="test workers in the trial environment")
        trial.add_argument("--timeout", type=float, default=900.0, help="seconds the model tests may take")
        trial.add_argument("--keep", action="store_true", help="keep the scratch copy (its path is printed)")
        if name == "bump":
            trial.add_argument(
                "--keep-partial",
                action="store_true",
                help="move the pin and what generated even when some model fails, for hand work",
            )
    return parser


def _root_for(version: str, workspace: Path, pip_args: tuple[str, ...]) -> Path:
    """The installed package serves the installed version; any other comes from its wheel."""
    if version == distribution_version("transformers"):
        return package_root("transformers").parent
    return fetch_reference(version, workspace=workspace, pip_args=pip_args)


def run(argv: Sequence[str] | None = None) -> int:
    """``patchgen-pin argv``: ``fetch`` returns 0; ``survey`` returns 1 where a target's signature changed."""
    args = build_parser().parse_args(argv)
    settings = find_settings()
    workspace = (args.workspace or settings.root / DEFAULT_WORKSPACE).resolve()
    pip_args = tuple(args.pip_arg)
    if args.command == "fetch":
        root = fetch_reference(args.version, workspace=workspace, pip_args=pip_args)
        print(f"transformers {args.version} sources in {root}")
        return ExitStatus.OK
    if args.command in ("try", "bump"):
        return _trial(args, settings.root, workspace, pip_args)
    module_names = [config_module_from_arg(arg, settings) for arg in args.configs] or discover(settings)
    loaded_configs = [load_config(module_name, settings) for module_name in module_names]
    findings = survey(
        loaded_configs,
        _root_for(args.old, workspace, pip_args),
        _root_for(args.new, workspace, pip_args),
        settings.root,
    )
    print(render(findings, show_unchanged=args.show_unchanged))
    drifted = any(finding.status != "unchanged" for finding in findings)
    return ExitStatus.FINDINGS if drifted else ExitStatus.OK


def _trial(args: argparse.Namespace, root: Path, workspace: Path, pip_args: tuple[str, ...]) -> int:
    """``try``: 0 when every model would pass, else 1. ``bump``: the same, and the pin moved where allowed."""
    report_dir = (args.report or workspace / f"try-{args.version}").resolve()
    trial = run_trial(
        args.version,
        TrialSettings(workspace, report_dir, pip_args, jobs=args.jobs, timeout=args.timeout),
    )
    report = trial.report
    print(render_markdown(report))
    print(f"report: {report_dir / 'report.md'} and report.json")
    if args.command == "bump":
        if report.passes or args.keep_partial:
            moved = apply_bump(trial, root)
            print(f"moved the pin to transformers=={report.new} and {len(moved)} generated file(s) into {root}")
            print("reinstall the project's environment to run it: pip install -e '.[test]'")
        else:
            print("the pin was not moved: not every model passes (--keep-partial moves it anyway)")
    if args.keep or (args.command == "bump" and args.keep_partial):
        print(f"scratch copy: {trial.scratch}")
    else:
        shutil.rmtree(trial.scratch.parent, ignore_errors=True)
    return ExitStatus.OK if report.passes else ExitStatus.FINDINGS


def main(argv: Sequence[str] | None = None) -> int:
    """The ``patchgen-pin`` console script: :func:`run` under the shared exit-status handler."""
    return run_script("patchgen-pin", lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())
