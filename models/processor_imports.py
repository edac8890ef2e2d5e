"""Upstream processor classes that import torchvision only for helpers their PIL sibling also defines.

Some of upstream's processing modules import a helper function from the model's torchvision image processing
module (``processing_pixtral`` does ``from .image_processing_pixtral import get_resize_output_image_size``), and that
module imports torchvision on its first lines. Without torchvision the processing module fails to import, and
transformers hands out a placeholder class for the processor (``transformers.PixtralProcessor``, the processor of
pixtral, mistral3 and mistral_large4) that raises when it is built. Yet the PIL image processing module of the same
model (``image_processing_pil_pixtral``) defines the same helper, and with the PIL image processor the processor works.

:func:`importable_processor_class` returns such a class importable without torchvision: it reads the processing
module's source by path, points each ``from .image_processing_<x> import ...`` whose module imports torchvision at
``image_processing_pil_<x>`` instead, and executes that source as the module, under its own name. It does so only
when every imported name is the same definition in both files, read by path (the torchvision module is never
imported): the same ``ast`` with docstrings left out (so comments and docstrings may differ), and so is every
module-level name that definition uses, transitively (a helper it calls, a constant, an import, which must
import the same name from the same module). Anything else is refused with :class:`ProcessorImportError`, naming
the processor class, the module, the name and the cause, rather than giving a processor that counts differently
from upstream's.

What this leaves in the process, and why:

* the torchvision module never enters ``sys.modules`` under its name, not even for a moment (no stand-in is put
  there, which another thread, or a later ``import``, would see): the processing module's source is compiled with
  the import pointed elsewhere. A later ``import transformers.models.pixtral.image_processing_pixtral`` fails as it
  did, on torchvision;
* the processing module is registered under its real name, as an import would register it: pickling the
  processor, ``typing.get_type_hints`` on its kwargs classes and ``inspect`` look the class up there. Its code is
  upstream's, line for line (tracebacks point at upstream's file); only the module one import reads from differs,
  and the name it reads there was checked to be the same definition;
* transformers' own lookups are left alone: ``transformers.PixtralProcessor`` still gives upstream's placeholder.

An image processor class written for torchvision alone (``image_processing_<m>`` with no PIL sibling:
cohere2_vision's, kimi_k25's) is another matter: it needs torchvision's image functions themselves, not helpers a
PIL module repeats. For one of those, :func:`importable_processor_class` gives what
:func:`importable_image_processor_class` gives: the class on modelgraft's torch stand-in for those functions
(``modelgraft.models.image_processor_imports``).

Where torchvision is installed, nothing is substituted: the helper returns upstream's class as transformers
resolves it.
"""

from __future__ import annotations

import ast
import copy
import importlib
import importlib.util
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from transformers.utils import is_torchvision_available
from transformers.utils.import_utils import DummyObject

from modelgraft.models.registry import resolve_dotted

__all__ = ["ProcessorImportError", "importable_image_processor_class", "importable_processor_class"]

_TORCHVISION = "torchvision"
_IMAGE_PROCESSING = "image_processing_"
_PIL_PREFIX = "image_processing_pil_"
_LOCK = threading.RLock()
#: The modules :func:`_load` gave, by name: each is checked and executed once.
_LOADED: dict[str, ModuleType] = {}


class ProcessorImportError(ImportError):
    """A processor class that cannot be made importable without torchvision; the message says why."""


def importable_processor_class(processor: str | type) -> type:
    """The processor class ``processor`` names (a dotted path, or a class transformers gave), importable on CPU.

    A class transformers hands out as a placeholder because torchvision is missing, or a dotted path to a
    processing module that imports torchvision, is loaded with each helper import from the model's torchvision
    image processing module taken from its PIL sibling instead, after checking that it is the same definition
    there (module docstring). Any other class or path is returned as transformers resolves it, and so is every
    one where torchvision is installed. Raises :class:`ProcessorImportError` where the substitution would not be
    the same code, or where the class needs torchvision for its own work.

    An image processor written for torchvision (a dotted path into ``image_processing_<m>``, or its placeholder)
    is given on the torch stand-in (:func:`importable_image_processor_class`).
    """
    if not is_torchvision_available():
        from modelgraft.models import image_processor_imports  # it imports this module: imported on first use

        if image_processor_imports.is_torchvision_image_processor(processor) is not None:
            return image_processor_imports.importable_image_processor_class(processor)
    if isinstance(processor, str):
        if is_torchvision_available():
            return resolve_dotted(processor)
        module_name, _, class_name = processor.rpartition(".")
        if module_name and _is_module_file(module_name):
            return _load(module_name, class_name, declared=False)
        processor = resolve_dotted(processor)
    if isinstance(processor, DummyObject) and _TORCHVISION in getattr(processor, "_backends", ()):
        if is_torchvision_available():
            return processor
        return _load(processor.__module__, processor.__name__, declared=True)
    return processor


def importable_image_processor_class(image_processor: str | type) -> type:
    """The image processor class ``image_processor`` names (a dotted path, a placeholder transformers gave, or
    upstream's class), working without torchvision: one written for torchvision runs on modelgraft's torch
    stand-in for its image functions (``modelgraft.models.image_processor_imports``); any other, and every one
    where torchvision is installed, is returned as transformers resolves it."""
    from modelgraft.models import image_processor_imports  # it imports this module: imported on first use

    return image_processor_imports.importable_image_processor_class(image_processor)


def _is_module_file(name: str) -> bool:
    """Whether ``name`` is a module of source (not a package), found without executing it."""
    if name in sys.modules:
        return not hasattr(sys.modules[name], "__path__")
    try:
        spec = importlib.util.find_spec(name)  # imports the parent packages, never the module itself
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.submodule_search_locations is None and bool(spec.origin)


def _source_path(module_name: str) -> Path:
    spec = importlib.util.find_spec(module_name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ProcessorImportError(f"{module_name}: no Python source to read")
    return Path(spec.origin)


def _load(module_name: str, class_name: str, *, declared: bool) -> type:
    """``module_name.class_name``: the module as a plain import gives it, or its source with substituted imports.

    ``declared``: transformers marks the class as needing torchvision; unless a substitution explains that, refuse.
    """
    with _LOCK:
        module = _LOADED.get(module_name)
        if module is None:
            module = _import_without_torchvision(module_name, class_name, declared=declared)
            _LOADED[module_name] = module
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ProcessorImportError(f"{module_name} defines no class {class_name!r}")
    return cls


def _refusal(class_name: str, module_name: str, cause: str) -> ProcessorImportError:
    return ProcessorImportError(
        f"{class_name} ({module_name}) cannot be made importable without torchvision: {cause} "
        "(modelgraft.models.processor_imports)"
    )


def _import_without_torchvision(module_name: str, class_name: str, *, declared: bool) -> ModuleType:
    path = _source_path(module_name)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    siblings = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and node.level == 1
        and node.module
        and node.module.startswith(_IMAGE_PROCESSING)
        and not node.module.startswith(_PIL_PREFIX)
        and _imports_torchvision(path.parent / f"{node.module}.py")
    ]
    if declared or siblings:
        own = _torchvision_import_line(tree.body, unconditional=False)
        if own is not None:
            raise _refusal(class_name, module_name, f"it imports torchvision itself (line {own})")
    if declared and not siblings:
        raise _refusal(
            class_name,
            module_name,
            "transformers marks it as needing torchvision, and it imports no torchvision image processing "
            "module whose helpers a PIL module could give",
        )
    if not siblings or module_name in sys.modules:
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] != _TORCHVISION:
                raise
            cause = f"it imports torchvision through a module other than an image_processing_<x> sibling: {error}"
            raise _refusal(class_name, module_name, cause) from error
    for node in siblings:
        _check_substitution(node, path.parent, module_name, class_name)
        node.module = _PIL_PREFIX + node.module.removeprefix(_IMAGE_PROCESSING)
    return _execute(module_name, path, tree, class_name)


def _execute(module_name: str, path: Path, tree: ast.Module, class_name: str) -> ModuleType:
    """Run the rewritten source as the module, registered under its name as the import system would do it."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    code = compile(tree, str(path), "exec")  # the tree keeps upstream's line numbers
    sys.modules[module_name] = module  # decorators and relative imports of the module look it up by name
    try:
        exec(code, module.__dict__)  # noqa: S102  (upstream's source, with only its imports repointed)
    except ModuleNotFoundError as error:
        del sys.modules[module_name]
        if (error.name or "").split(".")[0] != _TORCHVISION:
            raise
        raise _refusal(
            class_name,
            module_name,
            f"with its image processing helpers taken from the PIL modules, it still imports torchvision: {error}",
        ) from error
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _torchvision_import_line(body: list[ast.stmt], *, unconditional: bool) -> int | None:
    """The line of an import of torchvision among these statements (and, unless ``unconditional``, those nested
    in them: a guarded import still means the module uses torchvision when it is there)."""
    nodes: Iterator[ast.AST] = iter(body) if unconditional else (n for stmt in body for n in ast.walk(stmt))
    for node in nodes:
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == _TORCHVISION for a in node.names):
            return node.lineno
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == _TORCHVISION:
            return node.lineno
    return None


def _imports_torchvision(path: Path) -> bool:
    """Whether the module at ``path`` imports torchvision when it is imported, whatever is installed."""
    if not path.is_file():
        return False
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return _torchvision_import_line(tree.body, unconditional=True) is not None


@dataclass(frozen=True)
class _Module:
    """The module-level definitions of one source file, by name: each is a list, as a name can be bound twice."""

    name: str
    definitions: dict[str, list[ast.AST]]

    @classmethod
    def read(cls, path: Path, name: str) -> _Module:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        definitions: dict[str, list[ast.AST]] = {}
        for node, names in _bindings(tree.body):
            for bound in names:
                definitions.setdefault(bound, []).append(node)
        return cls(name, definitions)


def _bindings(body: list[ast.stmt]) -> Iterator[tuple[ast.AST, list[str]]]:
    """Each module-level statement that binds names, with those names; statements under ``if``/``try`` count."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield stmt, [stmt.name]
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                yield ast.Import(names=[alias]), [alias.asname or alias.name.split(".")[0]]
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                yield ast.ImportFrom(module=stmt.module, names=[alias], level=stmt.level), [alias.asname or alias.name]
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            yield stmt, names
        elif isinstance(stmt, ast.If):
            yield from _bindings(stmt.body + stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from _bindings(stmt.body + [s for h in stmt.handlers for s in h.body] + stmt.orelse + stmt.finalbody)


def _without_docstrings(node: ast.AST) -> str:
    """``ast.dump`` of ``node`` with the docstring of every function and class in it left out."""
    node = copy.deepcopy(node)
    for inner in ast.walk(node):
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and inner.body:
            first = inner.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                inner.body = inner.body[1:] or [ast.Pass()]
    return ast.dump(node, include_attributes=False)


def _check_substitution(node: ast.ImportFrom, folder: Path, module_name: str, class_name: str) -> None:
    """Refuse unless every name ``node`` imports is the same definition in the PIL sibling."""
    package = module_name.rpartition(".")[0]
    source = f"{package}.{node.module}"
    pil_name = _PIL_PREFIX + node.module.removeprefix(_IMAGE_PROCESSING)
    pil_path = folder / f"{pil_name}.py"
    if not pil_path.is_file():
        raise _refusal(
            class_name,
            module_name,
            f"it imports from {source}, which imports torchvision, and there is "
            f"no {package}.{pil_name} to take the names from",
        )
    torchvision_module = _Module.read(folder / f"{node.module}.py", source)
    pil_module = _Module.read(pil_path, f"{package}.{pil_name}")
    for alias in node.names:
        if alias.name == "*":
            raise _refusal(class_name, module_name, f"it imports * from {source}, so the names cannot be checked")
        cause = _difference(alias.name, torchvision_module, pil_module, used_by=None, seen=set())
        if cause:
            raise _refusal(class_name, module_name, f"it imports {alias.name} from {source}, and {cause}")


def _difference(name: str, first: _Module, second: _Module, *, used_by: str | None, seen: set[str]) -> str | None:
    """Why ``name`` (and what it uses, transitively) is not the same definition in both modules, or None."""
    if name in seen:
        return None
    seen.add(name)
    mine, theirs = first.definitions.get(name), second.definitions.get(name)
    what = f"{name} (used by {used_by})" if used_by else name
    if mine is None and theirs is None:
        return None  # a builtin, or a local name: it resolves alike in both
    if theirs is None:
        return f"{second.name} does not define {what}"
    if mine is None:
        return f"{second.name} defines {what}, which {first.name} leaves to the builtins"
    if [_without_docstrings(n) for n in mine] != [_without_docstrings(n) for n in theirs]:
        return f"{what} is defined differently in {first.name} and {second.name}"
    for node in mine:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for used in sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - {name}):
            cause = _difference(used, first, second, used_by=name, seen=seen)
            if cause:
                return cause
    return None
