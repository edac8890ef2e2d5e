"""Upstream's torchvision image processors, usable where torchvision is not installed.

transformers 5 writes an image processor as a ``TorchvisionBackend`` subclass (``image_processing_<m>.py``) and,
for many models, a PIL sibling (``image_processing_pil_<m>.py``). About ten VLMs (cohere2_vision, kimi_k25,
muse_glimmer, llama4, ...) ship only the first, whose module imports ``torchvision.transforms.v2.functional``
on its first lines; without torchvision, transformers hands out a placeholder class that raises when built.
What those classes ask of torchvision is a handful of tensor functions, which
:mod:`modelgraft.models.tensor_image_functional` implements in torch with torchvision's semantics.

:func:`importable_image_processor_class` gives such a class importable and working without torchvision: it reads
upstream's module source by path, points its torchvision import at the stand-in, and executes that source as
the module. The base class needs the same treatment, because ``TorchvisionBackend``'s methods read their
module's globals (``tvF``, and ``pil_torch_interpolation_mapping``, which transformers' ``image_utils`` leaves
empty without torchvision): a private copy of ``transformers.image_processing_backends`` is executed the same
way, its guarded torchvision import taking the stand-in, and the model module's ``TorchvisionBackend`` is
imported from that copy. Only imports are rewritten, each checked before anything runs:

* ``from torchvision.transforms.v2 import functional as X`` and ``import torchvision.transforms.v2.functional as
  X`` bind ``X`` to the stand-in; the ``if is_torchvision_available():`` block that guards such an import is
  replaced by its body (its ``else`` is what upstream runs without torchvision, which is not this case);
* ``pil_torch_interpolation_mapping`` / ``torch_pil_interpolation_mapping`` come from this module (Pillow's
  resampling filters to the stand-in's ``InterpolationMode``, as transformers maps them to torchvision's);
* ``transformers.image_processing_backends`` is the private copy;
* every other import of torchvision, and every ``X.<name>`` the stand-in does not define, is refused with
  :class:`~modelgraft.models.processor_imports.ProcessorImportError`, naming the module, the line and the name,
  before the module runs: a class is given whole or not at all.

What this leaves in the process, and why:

* nothing named torchvision enters ``sys.modules``, not even for a moment: the source is compiled with its imports
  pointed elsewhere;
* the model module is registered under its real name, as an import would register it: pickling an image processor
  and ``typing.get_type_hints`` look its class up there. Where upstream's module was imported before (one that
  imports no torchvision itself, molmo2's, imports fine but gets a base class whose torchvision functions are
  unbound), the stand-in-backed module takes its place there; classes taken from the earlier import stay as
  broken as they were. Its code is upstream's, line for line (tracebacks point at upstream's file);
* the backends copy is registered as ``modelgraft.models._tensor_image_backends``: a name under this package, so
  it is never mistaken for transformers' own module, which stays untouched (its ``PilBackend`` keeps serving the
  PIL classes);
* transformers' own lookups are left alone: ``transformers.Cohere2VisionImageProcessor`` is still the placeholder.

Upstream's ``resize`` asks ``is_torchvision_greater_or_equal("0.27")`` before resampling with LANCZOS, which is
False here: it falls back to BICUBIC with its own warning, as it does for an older torchvision or on a GPU.
The stand-in itself refuses LANCZOS, BOX and HAMMING rather than approximate them.

Where torchvision is installed, nothing is substituted: upstream's class is returned as transformers resolves it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from transformers.image_utils import PILImageResampling
from transformers.utils import is_torchvision_available
from transformers.utils.import_utils import DummyObject

from modelgraft.models import tensor_image_functional
from modelgraft.models.processor_imports import ProcessorImportError
from modelgraft.models.registry import resolve_dotted
from modelgraft.models.tensor_image_functional import InterpolationMode

__all__ = [
    "importable_image_processor_class",
    "is_torchvision_image_processor",
    "pil_torch_interpolation_mapping",
    "torch_pil_interpolation_mapping",
]

#: Pillow's resampling filter -> the stand-in's mode, as transformers' ``image_utils`` maps them to torchvision's.
pil_torch_interpolation_mapping: dict[PILImageResampling, InterpolationMode] = {
    PILImageResampling.NEAREST: InterpolationMode.NEAREST_EXACT,
    PILImageResampling.BOX: InterpolationMode.BOX,
    PILImageResampling.BILINEAR: InterpolationMode.BILINEAR,
    PILImageResampling.HAMMING: InterpolationMode.HAMMING,
    PILImageResampling.BICUBIC: InterpolationMode.BICUBIC,
    PILImageResampling.LANCZOS: InterpolationMode.LANCZOS,
}
#: The inverse, which ``PilBackend`` reads to accept an ``InterpolationMode`` for ``resample``.
torch_pil_interpolation_mapping: dict[InterpolationMode, PILImageResampling] = {
    mode: pil for pil, mode in pil_torch_interpolation_mapping.items()
}

_TORCHVISION = "torchvision"
_FUNCTIONAL = "torchvision.transforms.v2.functional"
_BACKENDS = "transformers.image_processing_backends"
_PRIVATE_BACKENDS = "modelgraft.models._tensor_image_backends"
_IMAGE_UTILS = "transformers.image_utils"
_MAPPINGS = ("pil_torch_interpolation_mapping", "torch_pil_interpolation_mapping")
_GUARD = "is_torchvision_available"
_LOCK = threading.RLock()
#: The modules executed here, by name: each is checked and executed once.
_LOADED: dict[str, ModuleType] = {}


def importable_image_processor_class(target: str | type) -> type:
    """The image processor class ``target`` names (a dotted path, a placeholder transformers gave, or upstream's
    class), working without torchvision: a torchvision-backed class is loaded on the torch stand-in (module
    docstring); any other class, and every class where torchvision is installed, is returned as transformers
    resolves it. Raises :class:`~modelgraft.models.processor_imports.ProcessorImportError` where the module uses
    torchvision beyond what the stand-in implements."""
    found = is_torchvision_image_processor(target)
    if found is None or is_torchvision_available():
        return resolve_dotted(target) if isinstance(target, str) else target
    module_name, class_name = found
    module = _load(module_name)
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ProcessorImportError(f"{module_name} defines no class {class_name!r}")
    return cls


def is_torchvision_image_processor(target: str | type) -> tuple[str, str] | None:
    """(module, class) of the torchvision image processor ``target`` names, else None; a dotted path to a module
    of source is read, not imported. A torchvision image processor is a class of a model's ``image_processing_<m>``
    module (not ``image_processing_pil_<m>``) whose source imports torchvision at its top level or builds on
    ``TorchvisionBackend``."""
    if isinstance(target, str):
        module_name, _, class_name = target.rpartition(".")
        path = _module_file(module_name) if module_name else None
        if path is None:
            target = resolve_dotted(target)
        else:
            wanted = _is_image_processing_module(module_name) and _needs_torchvision(path)
            return (module_name, class_name) if wanted else None
    if not isinstance(target, type):
        return None
    if isinstance(target, DummyObject) and _TORCHVISION not in getattr(target, "_backends", ()):
        return None
    path = _module_file(target.__module__) if _is_image_processing_module(target.__module__) else None
    if path is None or not _needs_torchvision(path):
        return None
    return target.__module__, target.__name__


def _is_image_processing_module(name: str) -> bool:
    """``image_processing_<m>`` of a model, not its PIL sibling: a video processor is out of this module's scope."""
    last = name.rpartition(".")[2]
    return last.startswith("image_processing_") and not last.startswith("image_processing_pil_")


def _module_file(name: str) -> Path | None:
    """The source file of module ``name`` (not a package), found without executing it; None if there is none."""
    module = sys.modules.get(name)
    if module is not None:
        origin = getattr(module, "__file__", None)
        return Path(origin) if origin and not hasattr(module, "__path__") and origin.endswith(".py") else None
    try:
        spec = importlib.util.find_spec(name)  # imports the parent packages, never the module itself
    except (ImportError, ValueError):
        return None
    if spec is None or spec.submodule_search_locations is not None or not (spec.origin or "").endswith(".py"):
        return None
    return Path(spec.origin)


def _needs_torchvision(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Import) and any(_is_torchvision(alias.name) for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _is_torchvision(node.module or ""):
            return True
        if isinstance(node, ast.ImportFrom) and any(alias.name == "TorchvisionBackend" for alias in node.names):
            return True
    return False


def _is_torchvision(module: str) -> bool:
    return module.split(".")[0] == _TORCHVISION


def _load(module_name: str) -> ModuleType:
    with _LOCK:
        module = _LOADED.get(module_name)
        if module is None:
            _backends()
            path = _module_file(module_name)
            assert path is not None, module_name  # is_torchvision_image_processor found it
            module = _execute(module_name, module_name, path)
            _LOADED[module_name] = module
        return module


def _backends() -> ModuleType:
    """The private copy of ``transformers.image_processing_backends`` with ``tvF`` bound to the stand-in."""
    module = _LOADED.get(_PRIVATE_BACKENDS)
    if module is None:
        path = _module_file(_BACKENDS)
        if path is None:
            raise ProcessorImportError(
                f"{_BACKENDS}: no Python source to read (modelgraft.models.image_processor_imports)"
            )
        module = _LOADED[_PRIVATE_BACKENDS] = _execute(_PRIVATE_BACKENDS, _BACKENDS, path)
    return module


@dataclass
class _Rewrite(ast.NodeTransformer):
    """Points one module's torchvision, backends and interpolation-mapping imports at modelgraft's stand-ins, and
    makes its relative imports absolute (the backends copy runs under a name outside transformers)."""

    source: str  # the module's real name: what relative imports are resolved against, and what errors name
    package: str
    stand_in_names: set[str]

    def refuse(self, node: ast.AST, cause: str) -> ProcessorImportError:
        return ProcessorImportError(
            f"{self.source} (line {getattr(node, 'lineno', '?')}) cannot run without torchvision: {cause} "
            "(modelgraft.models.image_processor_imports)"
        )

    def visit_If(self, node: ast.If) -> ast.AST | list[ast.stmt]:
        self.generic_visit(node)
        guard = (
            isinstance(node.test, ast.Call)
            and isinstance(node.test.func, ast.Name)
            and node.test.func.id == _GUARD
            and not node.test.args
        )
        binds_stand_in = any(
            isinstance(stmt, (ast.Import, ast.ImportFrom)) and getattr(stmt, "modelgraft_stand_in", False)
            for stmt in node.body
        )
        return node.body if guard and binds_stand_in else node

    def visit_Import(self, node: ast.Import) -> ast.AST:
        if not any(_is_torchvision(alias.name) for alias in node.names):
            return node
        if len(node.names) != 1 or node.names[0].name != _FUNCTIONAL or not node.names[0].asname:
            names = ", ".join(alias.name for alias in node.names)
            raise self.refuse(node, f"it imports {names}, which the stand-in does not provide")
        return self._stand_in(node, node.names[0].asname)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | list[ast.stmt]:
        module = importlib.util.resolve_name("." * node.level + (node.module or ""), self.package)
        if _is_torchvision(module):
            names = [alias.name for alias in node.names]
            if module != "torchvision.transforms.v2" or names != ["functional"]:
                raise self.refuse(node, f"it imports {', '.join(names)} from {module}, which the stand-in lacks")
            return self._stand_in(node, node.names[0].asname or "functional")
        if module == _BACKENDS:
            module = _PRIVATE_BACKENDS
        rewritten = ast.ImportFrom(module=module, names=node.names, level=0)
        if module != _IMAGE_UTILS or not any(alias.name in _MAPPINGS for alias in node.names):
            return ast.copy_location(rewritten, node)
        kept = [alias for alias in node.names if alias.name not in _MAPPINGS]
        mappings = ast.ImportFrom(module=__name__, names=[a for a in node.names if a.name in _MAPPINGS], level=0)
        statements = [ast.ImportFrom(module=module, names=kept, level=0)] if kept else []
        return [ast.copy_location(statement, node) for statement in [*statements, mappings]]

    def _stand_in(self, node: ast.stmt, bound: str) -> ast.stmt:
        self.stand_in_names.add(bound)
        module, _, name = tensor_image_functional.__name__.rpartition(".")
        statement = ast.copy_location(ast.ImportFrom(module=module, names=[ast.alias(name, bound)], level=0), node)
        statement.modelgraft_stand_in = True  # type: ignore[attr-defined]  # read by visit_If
        return statement


def _rewritten(source: str, path: Path) -> ast.Module:
    """The module's tree with its imports rewritten (:class:`_Rewrite`), refused where the stand-in falls short."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rewrite = _Rewrite(source, source.rpartition(".")[0], set())
    tree = ast.fix_missing_locations(rewrite.visit(tree))
    implemented = set(tensor_image_functional.__all__)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in rewrite.stand_in_names
            and node.attr not in implemented
        ):
            cause = (
                f"it calls {node.value.id}.{node.attr}, which {tensor_image_functional.__name__} does not implement"
            )
            raise rewrite.refuse(node, cause)
    return tree


def _execute(name: str, source: str, path: Path) -> ModuleType:
    """Run ``source``'s rewritten code as module ``name``, registered under that name as an import would."""
    tree = _rewritten(source, path)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    code = compile(tree, str(path), "exec")  # the tree keeps upstream's line numbers
    previous = sys.modules.get(name)
    sys.modules[name] = module  # decorators and dataclasses of the module look it up by name
    try:
        exec(code, module.__dict__)  # noqa: S102  (upstream's source, with only its imports repointed)
    except BaseException as error:
        if previous is None:
            del sys.modules[name]
        else:
            sys.modules[name] = previous
        if isinstance(error, ModuleNotFoundError) and _is_torchvision(error.name or ""):
            raise ProcessorImportError(
                f"{source} cannot run without torchvision: with its own torchvision import on the stand-in, it "
                f"still imports torchvision through another module: {error} (modelgraft.models.image_processor_imports)"
            ) from error
        raise
    return module
