"""Generation end to end: plan and check each config, normalize the batch, then the final checks.

Nothing is written here; callers write only after every selected config
passed (see generator.output.write), which is what makes a failed run leave
the tree untouched.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator import snippets
from generator.checks.dataclass_fields import check_dataclass_fields
from generator.checks.docstrings import check_docstrings
from generator.checks.names import check_imports_kept, check_undefined_names
from generator.checks.signature import check_signatures
from generator.checks.targets import build_plan
from generator.codegen.assemble import Assembler
from generator.codegen.patch_source import PatchSource, clear_source_cache, resolve
from generator.codegen.plan import Plan
from generator.discovery import LoadedConfig, Settings
from generator.dsl.config import PatchConfig
from generator.errors import PatchgenError, PatchSourceError, SnippetError
from generator.normalize.ruff import normalize, ruff_version
from generator.output.diff import unified_diff
from generator.output.header import fingerprint, relative_name, render_header
from generator.upstream.index import ModuleIndex, UpstreamSources
from generator.upstream.locate import distribution_version, package_root
from generator.upstream.member import UpstreamMember

_SOURCES = UpstreamSources()
GENERATOR_ROOT = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Prepared:
    """One config's assembled, not yet normalized output (picklable: crosses processes)."""

    name: str
    filename: str
    text: str
    imports: tuple[tuple[str, tuple[str, ...]], ...]
    inputs: tuple[str, ...]
    versions: tuple[tuple[str, str], ...]


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


def _resolve_body(body: Any, upstream: UpstreamMember | None = None) -> PatchSource:
    """Source of a patch body; a snippet renders with ``upstream``, the member it patches."""
    try:
        return resolve(body, lambda ref: snippets.render(ref, upstream))
    except PatchSourceError as exc:
        if isinstance(body, snippets.SnippetRef):
            raise SnippetError(f"snippet {body.name!r} rendered to invalid Python: {exc.cause}") from exc
        raise


def _origin_modules(config: PatchConfig) -> dict[int, str]:
    """For reused bodies: the upstream module the sibling config that defines them patches."""
    origins = {}
    for patch in config.patches:
        module = sys.modules.get(getattr(patch.body, "__module__", "") or "")
        if not patch.name_map or module is None:
            continue
        owners = [v for v in vars(module).values() if isinstance(v, PatchConfig) and v.defined_in == module.__name__]
        if owners:
            origins[id(patch)] = owners[0].source_module
    return origins


def _module_file(name: str, root: Path) -> Path | None:
    candidate = root.joinpath(*name.split("."))
    for file in (candidate.with_suffix(".py"), candidate / "__init__.py"):
        if file.is_file():
            return file.resolve()
    return None


def project_closure(path: Path, root: Path) -> list[Path]:
    """``path`` and every project module it imports, transitively: the config's input files.

    Follows absolute and relative imports and ``from package import module``
    forms. A package's ``__init__`` counts only when names are imported from
    it, not merely because a module below it was imported, so registering a
    new model in ``models/__init__.py`` is not an input of every config.
    """
    seen: list[Path] = []
    stack = [path.resolve()]
    while stack:
        current = stack.pop()
        if current in seen or not current.is_file():
            continue
        seen.append(current)
        rel = current.relative_to(root).with_suffix("")
        parts = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        package = parts if current.name == "__init__.py" else parts[:-1]
        modules: list[str] = []
        for node in ast.walk(ast.parse(current.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    submodule = f"{base}.{alias.name}" if base else alias.name
                    modules.append(submodule if _module_file(submodule, root) else base)
        for name in modules:
            file = _module_file(name, root) if name else None
            # The generator's own code is not a config input: the check cache keys on it separately.
            if file is not None and GENERATOR_ROOT not in file.parents:
                stack.append(file)
    return sorted(seen)


def prepare(loaded: LoadedConfig, root: Path) -> Prepared:
    """Plan, check and assemble one config (checks 1, 2, 4 and 5)."""
    config = loaded.config
    _SOURCES.accessed.clear()
    try:
        index = _SOURCES.get(config.source_module)
        plan = build_plan(loaded.name, config, index, _SOURCES, _resolve_body)
        check_signatures(plan)
        check_docstrings(plan)
        check_dataclass_fields(plan, _SOURCES, _origin_modules(config))
        files = set(project_closure(loaded.path, root))
        for resolved in plan.all_resolved():
            files.update(resolved.source.files if resolved.source else ())
        files.update(f for helper, _ in plan.helpers if isinstance(helper, PatchSource) for f in helper.files)
        top = config.source_module.split(".")[0]
        version = distribution_version(top)
        upstream_root = package_root(top).parent
        consulted = [(relative_name(p, upstream_root), p.read_bytes()) for p in _SOURCES.accessed if p != index.path]
        digest = fingerprint(
            upstream_version=version,
            source_module=config.source_module,
            upstream_bytes=index.source.encode(),
            files=[(relative_name(f, root), f.read_bytes()) for f in files] + consulted,
            ruff_version=ruff_version(),
        )
        header = render_header(
            config,
            config_name=loaded.name,
            upstream_version=version,
            fingerprint=digest,
            regenerate=f"patchgen {loaded.name}",
        )
        imports = _requested_imports(config, plan, index)
        text = Assembler(plan, list(imports), config.post_import_blocks, header).build()
    except PatchgenError as exc:
        raise exc.with_context(config=loaded.name) from exc
    inputs = files | _SOURCES.accessed
    inputs = tuple(sorted(str(f) for f in inputs))
    return Prepared(loaded.name, config.target_file, text, tuple(imports.items()), inputs, ((top, version),))


def _requested_imports(config: PatchConfig, plan: Plan, index: ModuleIndex) -> dict[str, tuple[str, ...]]:
    """Import statement -> names it binds: add_import calls, then the imports snippets declare.

    From-imports of one module are merged into one statement with sorted names,
    so ten snippets importing ten slots read as one line; a name upstream
    still imports from the same module (not dropped) is not imported twice.
    """
    statements = [spec.render() for spec in config.additional_imports]
    for resolved in plan.all_resolved():
        statements.extend(resolved.source.imports if resolved.source else ())
    from_names: dict[str, list[str]] = {}
    plain: list[str] = []
    for statement in statements:
        node = ast.parse(statement).body[0]
        if isinstance(node, ast.ImportFrom):
            names = from_names.setdefault(node.module or "", [])
            for alias in node.names:
                bound = alias.asname or alias.name
                if bound not in plan.dropped_imports and index.imported_from.get(bound) == (node.module, alias.name):
                    continue
                spelled = f"{alias.name} as {alias.asname}" if alias.asname else alias.name
                if spelled not in names:
                    names.append(spelled)
        elif statement not in plain:
            plain.append(statement)
    imports = {s: tuple((a.asname or a.name).split(".")[0] for a in ast.parse(s).body[0].names) for s in plain}
    for module, names in from_names.items():
        if names:
            unique = sorted(set(names))
            imports[f"from {module} import {', '.join(unique)}"] = tuple(n.split(" as ")[-1] for n in unique)
    return imports


_WORK: list[LoadedConfig] = []


def _prepare_nth(i: int, root: Path) -> Prepared:
    return prepare(_WORK[i], root)


def _prepare_all(configs: list[LoadedConfig], root: Path, jobs: int) -> list[Prepared]:
    if jobs <= 1 or len(configs) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [prepare(c, root) for c in configs]
    # Forked workers inherit the already-imported configs: nothing is pickled but an index.
    _WORK[:] = configs
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_prepare_nth, range(len(configs)), [root] * len(configs)))
    finally:
        _WORK.clear()


def default_jobs(count: int) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(count, cores))


def generate(configs: list[LoadedConfig], settings: Settings, *, jobs: int | None = None) -> list[GeneratedFile]:
    """Every output of ``configs``, fully checked; raises the first PatchgenError.

    Parsed sources are cached for one call only, so a long-lived process that
    edits files between calls sees what a fresh process would.
    """
    global _SOURCES
    _SOURCES = UpstreamSources()
    clear_source_cache()
    _check_unique_outputs(configs)
    prepared = _prepare_all(configs, settings.root, jobs if jobs is not None else default_jobs(len(configs)))
    normalized = normalize({p.name: (p.filename, p.text) for p in prepared})
    results = []
    by_name = {c.name: c for c in configs}
    for item in prepared:
        loaded = by_name[item.name]
        out = normalized[item.name]
        check_undefined_names(item.name, out.diagnostics, out.fixed)
        check_imports_kept(item.name, out.text, item.imports)
        index = _SOURCES.get(loaded.config.source_module)
        upstream_name = relative_name(index.path, package_root(loaded.config.source_module.split(".")[0]).parent)
        diff = unified_diff(
            index.source, out.text, upstream_name=upstream_name, generated_name=loaded.config.target_file
        )
        results.append(
            GeneratedFile(item.name, loaded.output_path, out.text, loaded.diff_path, diff, item.inputs, item.versions)
        )
    return results


def _check_unique_outputs(configs: list[LoadedConfig]) -> None:
    owners: dict[Path, str] = {}
    for loaded in configs:
        other = owners.setdefault(loaded.output_path, loaded.name)
        if other != loaded.name:
            raise PatchgenError(
                f"writes {loaded.output_path}, which {other} writes too",
                config=loaded.name,
                target=loaded.config.target_file,
            )
