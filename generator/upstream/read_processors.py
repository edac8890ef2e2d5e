"""The processor classes a model's checkpoints load with: its package's processing modules, else the Auto maps.

A VLM's scaffold has to build a processor for its tests; which classes upstream offers is read here from
the package's ``processing_*``, ``image_processing_*`` and ``video_processing_*`` modules (their
``__all__``), and, for the kinds a package borrows from another (qwen3_vl_moe uses Qwen3-VL's processor,
qwen3_vl Qwen2-VL's image processor), from the ``*_MAPPING_NAMES`` tables of ``transformers.models.auto``, all by path with ``ast``.
"""

from __future__ import annotations

import ast
import weakref

from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.upstream.index import ModuleIndex
from modelgraft.generator.upstream.source import ModelSource
from modelgraft.generator.upstream.vlm_structure import ProcessorInfo

#: Processing modules of a model package, by file-name prefix, longest first: the kind each one's classes are.
_PACKAGE_KINDS = (
    ("image_processing_pil_", "image_processor_pil"),
    ("image_processing_", "image_processor"),
    ("video_processing_", "video_processor"),
    ("processing_", "processor"),
)
#: Auto tables, by name, with the kind of the classes they map a model_type to.
_AUTO_TABLES = {
    "PROCESSOR_MAPPING_NAMES": "processor",
    "MISSING_PROCESSOR_MAPPING_NAMES": "processor",
    "IMAGE_PROCESSOR_MAPPING_NAMES": "image_processor",
    "MISSING_IMAGE_PROCESSOR_MAPPING_NAMES": "image_processor",
    "VIDEO_PROCESSOR_MAPPING_NAMES": "video_processor",
    "MISSING_VIDEO_PROCESSOR_MAPPING_NAMES": "video_processor",
}
_AUTO_MODULES = ("auto_mappings", "processing_auto", "image_processing_auto", "video_processing_auto")
#: An image-processor entry given per backend ({"torchvision": A, "pil": B}): the kind of each.
_BACKEND_KINDS = {"torchvision": "image_processor", "pil": "image_processor_pil"}


def read_processors(source: ModelSource, model_type: str | None) -> tuple[ProcessorInfo, ...]:
    """The package's own processing classes, then those of kinds it lacks that the Auto tables map it to."""
    own = _package_processors(source)
    if model_type is None:
        return own
    kinds = {p.kind for p in own}
    found = own + tuple(p for p in _auto_processors(source, model_type) if p.kind not in kinds)
    kinds = {p.kind for p in found}
    for borrowed in [p for p in found if p.kind == "processor" and p not in own]:
        # A processor borrowed through the Auto tables (glm4v_moe's is GLM-4V's) comes with its own package's
        # image processors: the kinds still missing are taken from there (the package's model_type is its name).
        package = _package_defining(source, borrowed.cls)
        if package is not None:
            found += tuple(p for p in _package_processors(source, package) if p.kind not in kinds)
            kinds = {p.kind for p in found}
            # ... and with what that package borrows in turn (qwen3_vl_moe -> qwen3_vl -> Qwen2-VL's images).
            found += tuple(p for p in _auto_processors(source, package) if p.kind not in kinds)
    return found


def _package_defining(source: ModelSource, cls: str) -> str | None:
    """The model package whose ``processing_*`` module exports ``cls``, found among the pinned packages."""
    for path in sorted(source.index.path.parent.parent.glob("*/processing_*.py")):
        index = ModuleIndex.parse(f"transformers.models.{path.parent.name}.{path.stem}", path)
        if cls in index.public_names:
            return path.parent.name
    return None


def _package_processors(source: ModelSource, package: str | None = None) -> tuple[ProcessorInfo, ...]:
    """The processing classes of ``package`` (default: the model's own)."""
    package = package or source.model
    folder = source.index.path.parent.parent / package
    found: list[ProcessorInfo] = []
    for path in sorted(folder.glob("*.py")):
        kind = next((k for prefix, k in _PACKAGE_KINDS if path.stem.startswith(prefix)), None)
        if kind is None:
            continue
        module = f"transformers.models.{package}.{path.stem}"
        index = ModuleIndex.parse(module, path)
        found.extend(ProcessorInfo(kind=kind, cls=name, module=module) for name in sorted(index.public_names))
    return tuple(found)


def _auto_processors(source: ModelSource, model_type: str) -> tuple[ProcessorInfo, ...]:
    found: list[ProcessorInfo] = []
    for name in _AUTO_MODULES:
        module = f"transformers.models.auto.{name}"
        try:
            index = source.sources.get(module)
        except UpstreamError:
            continue
        for table, kind in _table_entries(index.tree):
            for key, value in table:
                if key != model_type:
                    continue
                for entry_kind, cls in _classes(kind, value):
                    info = ProcessorInfo(kind=entry_kind, cls=cls, module=module)
                    if all((f.kind, f.cls) != (info.kind, info.cls) for f in found):
                        found.append(info)
    return tuple(found)


#: The tables of an Auto module, kept while its tree lives: a survey reads them for every VLM and Omni model.
_TABLES: weakref.WeakKeyDictionary[ast.Module, tuple[tuple[list[tuple[str, ast.expr]], str], ...]] = (
    weakref.WeakKeyDictionary()
)


def _table_entries(tree: ast.Module) -> tuple[tuple[list[tuple[str, ast.expr]], str], ...]:
    """``NAME = OrderedDict([("model_type", value), ...])`` for each Auto table, at any depth of the module."""
    found = _TABLES.get(tree)
    if found is None:
        found = _TABLES[tree] = tuple(_read_tables(tree))
    return found


def _read_tables(tree: ast.Module) -> list[tuple[list[tuple[str, ast.expr]], str]]:
    tables = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        kind = _AUTO_TABLES.get(node.targets[0].id)
        if kind is None or not isinstance(node.value, ast.Call) or not node.value.args:
            continue
        items = node.value.args[0]
        if not isinstance(items, ast.List):
            continue
        pairs = [
            (e.elts[0].value, e.elts[1])
            for e in items.elts
            if isinstance(e, ast.Tuple) and len(e.elts) == 2 and isinstance(e.elts[0], ast.Constant)
        ]
        tables.append((pairs, kind))
    return tables


def _classes(kind: str, value: ast.expr) -> list[tuple[str, str]]:
    """The class names of one table value: a name, a tuple of names, or an image table's per-backend dict."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return [(kind, value.value)]
    if isinstance(value, ast.Tuple):
        return [(kind, e.value) for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if isinstance(value, ast.Dict):
        return [
            (_BACKEND_KINDS.get(k.value, kind), v.value)
            for k, v in zip(value.keys, value.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(v, ast.Constant) and isinstance(v.value, str)
        ]
    return []
