"""Generate every config of a scratch copy against another version's sources, going on past every failure.

Run by ``patchgen-pin try`` inside its scratch copy of the project (``python -m
modelgraft.generator.pinbump.trial_generate``), so the configs, snippets and generator that load are the
copy's. It reads upstream from an unpacked reference tree (``patchgen-pin fetch``) instead of the installed
package, and needs no environment with that version installed: generation never imports transformers.
Each config that generates is written into the copy with its ``.diff``; each that does not is reported
with every error and the owner of each. The result goes to a JSON file for the caller.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from modelgraft.generator.context import RunContext
from modelgraft.generator.discovery import LoadedConfig, discover, find_settings, load_config
from modelgraft.generator.errors import CollectedErrors, PatchgenError
from modelgraft.generator.output.write import write_all
from modelgraft.generator.pinbump.owners import owner_of
from modelgraft.generator.pipeline import generate_each
from modelgraft.generator.upstream.index import UpstreamSources


def _errors(error: PatchgenError) -> list[PatchgenError]:
    return list(error.errors) if isinstance(error, CollectedErrors) else [error]


def _finding(error: PatchgenError, loaded: LoadedConfig | None, root: Path) -> dict[str, str | None]:
    owner = owner_of(loaded, error.target, root) if loaded is not None else f"config of {error.config}"
    return {"type": type(error).__name__, "target": error.target, "cause": error.cause, "owner": owner}


def generate_against(reference: Path, version: str) -> dict[str, dict[str, object]]:
    """Config name -> ``{"file": generated file or None, "errors": [finding, ...]}`` for every config."""
    settings = find_settings()
    results: dict[str, dict[str, object]] = {}
    loaded_configs = []
    for name in discover(settings):
        try:
            loaded_configs.append(load_config(name, settings))
        except PatchgenError as error:
            results[name] = {"file": None, "errors": [_finding(error.with_context(config=name), None, settings.root)]}
    by_name = {loaded.name: loaded for loaded in loaded_configs}
    context = RunContext(settings, sources=UpstreamSources(reference), upstream_version=version)
    files, errors = generate_each(loaded_configs, context)
    for loaded in loaded_configs:
        results[loaded.name] = {"file": None, "errors": []}
    for error in (inner for outer in errors for inner in _errors(outer)):
        entry = results.setdefault(error.config or "(every config)", {"file": None, "errors": []})
        entry["errors"].append(_finding(error, by_name.get(error.config or ""), settings.root))  # type: ignore[attr-defined]
    written = {}
    for generated in files:
        written[generated.path] = generated.text
        written[generated.diff_path] = generated.diff
        results[generated.config_name]["file"] = generated.path.relative_to(settings.root).as_posix()
    write_all(written)
    return dict(sorted(results.items()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m modelgraft.generator.pinbump.trial_generate")
    parser.add_argument("--reference", type=Path, required=True, help="folder holding the unpacked transformers/")
    parser.add_argument("--version", required=True, help="the version of that tree")
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    results = generate_against(args.reference, args.version)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
