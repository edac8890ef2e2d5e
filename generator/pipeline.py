"""Generation end to end: plan, check and assemble each config, normalize the batch, final checks.

Orchestration only: each step is a function of its own module (see docs/design.md, "Generation,
step by step"). Nothing is written here; callers write only after every selected config passed
(see generator.output.write), which is what makes a failed run leave the tree untouched.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from modelgraft.generator.checks.dataclass_fields import check_dataclass_fields
from modelgraft.generator.checks.docstrings import check_docstrings
from modelgraft.generator.checks.exclusions import check_exclusions
from modelgraft.generator.checks.names import check_imports_kept, check_undefined_names
from modelgraft.generator.checks.signature import check_signatures
from modelgraft.generator.checks.targets import check_targets
from modelgraft.generator.closure import project_closure
from modelgraft.generator.codegen.assemble import Assembler
from modelgraft.generator.codegen.imports import merged_imports, requested_specs
from modelgraft.generator.codegen.patch_source import PatchSource
from modelgraft.generator.codegen.plan import Plan, build_plan
from modelgraft.generator.codegen.version_check import version_check_call
from modelgraft.generator.context import RunContext
from modelgraft.generator.discovery import LoadedConfig
from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.errors import PatchgenError, collected
from modelgraft.generator.gc_pause import paused_gc
from modelgraft.generator.normalize.ruff import Normalized, normalize, ruff_version
from modelgraft.generator.output.diff import unified_diff
from modelgraft.generator.output.header import fingerprint, relative_name, render_header
from modelgraft.generator.workers import map_batches


@dataclass(frozen=True)
class Prepared:
    """One config's assembled, not yet normalized output (picklable: crosses processes)."""

    name: str
    filename: str
    text: str
    imports: tuple[tuple[str, tuple[str, ...]], ...]
    inputs: tuple[str, ...]
    versions: tuple[tuple[str, str], ...]
    # The upstream module as read, and its name in the diff: the diff needs no second parse.
    upstream_text: str = ""
    upstream_name: str = ""


@dataclass(frozen=True)
class GeneratedFile:
    """One config's final output and where it belongs."""

    config_name: str
    path: Path
    text: str
    diff_path: Path
    diff: str
    inputs: tuple[str, ...]
    # Installed distributions whose version the output names (the header's transformers==X).
    versions: tuple[tuple[str, str], ...] = ()


def _origin_modules(config: PatchConfig) -> dict[int, str]:
    """For reused bodies: the upstream module the sibling config that defines them patches."""
    origins = {}
    for patch in config.patches:
        body_module = sys.modules.get(getattr(patch.body, "__module__", "") or "")
        if not patch.name_map or body_module is None:
            continue
        owners = [
            v
            for v in vars(body_module).values()
            if isinstance(v, PatchConfig) and v.defined_in == body_module.__name__
        ]
        if owners:
            origins[id(patch)] = owners[0].source_module
    return origins


def _check_plan(plan: Plan, config: PatchConfig, context: RunContext) -> None:
    """Checks 1, 2, 4, 5 and 6: everything that can be judged before the output exists.

    A plan that planning stopped (check 1) is not judged further; otherwise every check runs and their
    errors are raised together, so one run shows everything wrong with the config.
    """
    check_targets(plan)
    errors: list[PatchgenError] = []
    for check in (
        lambda: check_signatures(plan),
        lambda: check_docstrings(plan),
        lambda: check_dataclass_fields(plan, context.sources, _origin_modules(config)),
        lambda: check_exclusions(plan),
    ):
        try:
            check()
        except PatchgenError as error:
            errors.append(error)
    if errors:
        raise collected(errors)


def prepare(loaded: LoadedConfig, context: RunContext) -> Prepared:
    """Plan, check and assemble one config."""
    config = loaded.config
    root = context.settings.root
    consulted = context.begin_config()
    try:
        index = context.sources.get(config.source_module)
        plan = build_plan(loaded.name, config, index, context)
        _check_plan(plan, config, context)
        files = set(project_closure(loaded.path, root))
        for resolved in plan.all_resolved():
            files.update(resolved.source.files if resolved.source else ())
        files.update(f for helper, _ in plan.helpers if isinstance(helper, PatchSource) for f in helper.files)
        top = config.source_module.split(".")[0]
        version = context.version_of(top)
        upstream_root = context.sources.folder_of(top)
        upstream_files = [(relative_name(p, upstream_root), p.read_bytes()) for p in consulted if p != index.path]
        digest = fingerprint(
            upstream_version=version,
            source_module=config.source_module,
            upstream_bytes=index.source.encode(),
            files=[(relative_name(f, root), f.read_bytes()) for f in files] + upstream_files,
            ruff_version=ruff_version(),
        )
        header = render_header(
            config,
            config_name=loaded.name,
            upstream_version=version,
            fingerprint=digest,
            regenerate=f"patchgen {loaded.name}",
        )
        imports = merged_imports(requested_specs(config, plan), plan)
        check = version_check_call(config.upstream_version_check, top, version)
        text = Assembler(plan, list(imports), config.post_import_blocks, header, version_check=check).build()
    except PatchgenError as exc:
        raise exc.with_context(config=loaded.name) from exc
    inputs = tuple(sorted(str(f) for f in files | consulted))
    return Prepared(
        loaded.name,
        config.target_file,
        text,
        tuple(imports.items()),
        inputs,
        ((top, version),),
        upstream_text=index.source,
        upstream_name=relative_name(index.path, upstream_root),
    )


def generate(configs: list[LoadedConfig], context: RunContext) -> list[GeneratedFile]:
    """Every output of ``configs``, fully checked; raises every PatchgenError of every config together.

    Parsed sources live in ``context``, one per run, so a long-lived process that edits files
    between runs sees what a fresh process would.
    """
    files, errors = generate_each(configs, context)
    if errors:
        raise collected(errors)
    return files


def generate_each(configs: list[LoadedConfig], context: RunContext) -> tuple[list[GeneratedFile], list[PatchgenError]]:
    """Every config on its own: the files of those that passed, and the error of each that failed.

    A failed config does not stop the others, so one run shows everything that a pin bump broke.
    """
    _check_unique_outputs(configs)
    with paused_gc():
        return _generate(configs, context)


@dataclass(frozen=True)
class _Outcome:
    """What a batch made of one config: its file, or the error that stopped it (picklable)."""

    generated: GeneratedFile | None = None
    error: PatchgenError | None = None


def _generate(configs: list[LoadedConfig], context: RunContext) -> tuple[list[GeneratedFile], list[PatchgenError]]:
    """Each batch prepared, normalized, checked and diffed in its worker (``workers.map_batches``).

    Outcomes come back in the configs' order, so the errors are reported in that order whatever ``-j``
    says.
    """
    outcomes = map_batches(_generate_batch, configs, context)
    files = [o.generated for o in outcomes if o.generated is not None]
    return files, [o.error for o in outcomes if o.error is not None]


def _generate_batch(batch: list[LoadedConfig], context: RunContext) -> list[_Outcome]:
    """One worker's configs: prepared, normalized by one ruff run, checked and diffed; one outcome each.

    A config that fails is left out of the later stages; the others go on. A ruff run that fails fails
    every config it normalized.
    """
    outcomes = [_Outcome()] * len(batch)
    prepared: dict[int, Prepared] = {}
    for i, loaded in enumerate(batch):
        try:
            prepared[i] = prepare(loaded, context)
        except PatchgenError as exc:
            outcomes[i] = _Outcome(error=exc)
    try:
        normalized = normalize({p.name: (p.filename, p.text) for p in prepared.values()}) if prepared else {}
    except PatchgenError as exc:
        for i, item in prepared.items():
            outcomes[i] = _Outcome(error=exc.with_context(config=item.name))
        return outcomes
    for i, item in prepared.items():
        try:
            outcomes[i] = _Outcome(generated=_finish(batch[i], item, normalized[item.name]))
        except PatchgenError as exc:
            outcomes[i] = _Outcome(error=exc)
    return outcomes


def _finish(loaded: LoadedConfig, item: Prepared, out: Normalized) -> GeneratedFile:
    """Checks 3 and 7 on the normalized text, and the diff against upstream."""
    check_undefined_names(item.name, out.diagnostics, out.fixed)
    check_imports_kept(item.name, out.text, item.imports)
    diff = unified_diff(
        item.upstream_text, out.text, upstream_name=item.upstream_name, generated_name=loaded.config.target_file
    )
    return GeneratedFile(item.name, loaded.output_path, out.text, loaded.diff_path, diff, item.inputs, item.versions)


def _check_unique_outputs(loaded_configs: list[LoadedConfig]) -> None:
    owners: dict[Path, str] = {}
    for loaded in loaded_configs:
        other = owners.setdefault(loaded.output_path, loaded.name)
        if other != loaded.name:
            raise PatchgenError(
                f"writes {loaded.output_path}, which {other} writes too",
                config=loaded.name,
                target=loaded.config.target_file,
            )
