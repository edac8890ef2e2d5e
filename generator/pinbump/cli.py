"""``patchgen-pin``: fetch reference sources of a transformers version; survey signature drift.

Exit statuses are those of every console script (``modelgraft.generator.entrypoint``): 0 ok (survey: no drift),
1 signature drift found, 2 bad input (an unknown config, a version pip cannot download), 3 a bug.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from modelgraft.generator.discovery import config_module_from_arg, discover, find_settings, load_config
from modelgraft.generator.entrypoint import ExitStatus, run_script
from modelgraft.generator.pinbump.fetch import DEFAULT_WORKSPACE, fetch_reference
from modelgraft.generator.pinbump.survey import render, survey
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
    module_names = [config_module_from_arg(arg, settings) for arg in args.configs] or discover(settings)
    loaded_configs = [load_config(module_name, settings) for module_name in module_names]
    findings = survey(
        loaded_configs, _root_for(args.old, workspace, pip_args), _root_for(args.new, workspace, pip_args)
    )
    print(render(findings, show_unchanged=args.show_unchanged))
    drifted = any(finding.status != "unchanged" for finding in findings)
    return ExitStatus.FINDINGS if drifted else ExitStatus.OK


def main(argv: Sequence[str] | None = None) -> int:
    """The ``patchgen-pin`` console script: :func:`run` under the shared exit-status handler."""
    return run_script("patchgen-pin", lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())
