"""A parsed upstream module: the stdlib AST plus the exact source it came from.

Positions (``lineno``/``end_lineno`` and decorator starts) are what codegen
uses to keep untouched upstream text byte-for-byte, comments included.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.source_lines import SourceLines
from modelgraft.generator.syntax import DEFINITION_NODES, FUNCTION_NODES, FunctionNode
from modelgraft.generator.upstream.locate import module_path, package_root, resolve_relative


def statement_start(node: ast.stmt) -> int:
    """First line of a statement, counting its decorators."""
    decorators = getattr(node, "decorator_list", None)
    return min([d.lineno for d in decorators] + [node.lineno]) if decorators else node.lineno


def defined_names(node: ast.stmt) -> tuple[str, ...]:
    """Names a top-level statement binds (definitions and plain assignments)."""
    if isinstance(node, DEFINITION_NODES):
        return (node.name,)
    if isinstance(node, ast.Assign):
        return tuple(t.id for t in node.targets if isinstance(t, ast.Name))
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return (node.target.id,)
    return ()


@dataclass
class ModuleIndex:
    """Top-level members of one module, by name, with their source text."""

    module: str
    path: Path
    source: str
    tree: ast.Module
    members: dict[str, ast.stmt] = field(default_factory=dict)

    @classmethod
    def parse(cls, module: str, path: Path | None = None) -> ModuleIndex:
        path = path or module_path(module)
        source = path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(source, filename=str(path))
        except SyntaxError as exc:
            raise UpstreamError(f"{path} is not valid Python: {exc}") from exc
        index = cls(module=module, path=path, source=source, tree=tree)
        for node in tree.body:
            for name in defined_names(node):
                index.members[name] = node
        return index

    @cached_property
    def source_lines(self) -> SourceLines:
        """The source split once: every position of the tree turns into text through it."""
        return SourceLines(self.source)

    @property
    def lines(self) -> list[str]:
        """The source's lines as the parser numbers them, line ends kept."""
        return self.source_lines.lines

    def segment(self, node: ast.AST) -> str | None:
        """The source text of ``node`` (``ast.get_source_segment`` without splitting the file again)."""
        return self.source_lines.segment(node)

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    def method(self, class_name: str, method: str) -> FunctionNode | None:
        """``method`` as defined in the body of ``class_name`` itself (inherited ones: UpstreamSources)."""
        cls_node = self.members.get(class_name)
        if not isinstance(cls_node, ast.ClassDef):
            return None
        for node in cls_node.body:
            if isinstance(node, FUNCTION_NODES) and node.name == method:
                return node
        return None

    @property
    def dunder_all(self) -> ast.List | ast.Tuple | None:
        """The literal list or tuple assigned to ``__all__`` at the top level (None when there is none)."""
        node = self.members.get("__all__")
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple)):
            return node.value
        return None

    @property
    def public_names(self) -> set[str]:
        """The string entries of ``__all__``: upstream's declared public API."""
        value = self.dunder_all
        if value is None:
            return set()
        return {e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}

    @cached_property
    def imported_from(self) -> dict[str, tuple[str, str]]:
        """Top-level ``from x import y [as z]``: bound name -> (absolute module, original name)."""
        result: dict[str, tuple[str, str]] = {}
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom):
                module = (
                    resolve_relative(self.module, node.level, node.module, is_package=self.is_package)
                    if node.level
                    else node.module
                )
                for alias in node.names:
                    result[alias.asname or alias.name] = (module or "", alias.name)
        return result


class UpstreamSources:
    """Caches parsed modules so a batch parses each upstream file once."""

    def __init__(self, root: Path | None = None) -> None:
        # None reads the installed packages; a folder reads an unpacked reference tree instead.
        self.root = root
        self._cache: dict[str, ModuleIndex] = {}
        self._package_roots: dict[str, Path] = {}
        # Every file handed out since the last reset: a config's upstream inputs, for the check cache.
        self.accessed: set[Path] = set()

    def folder_of(self, top_level: str) -> Path:
        """The folder holding package ``top_level``: the reference tree, else where it is installed."""
        if self.root is not None:
            return self.root
        if top_level not in self._package_roots:
            self._package_roots[top_level] = package_root(top_level).parent
        return self._package_roots[top_level]

    def parsed_modules(self) -> tuple[str, ...]:
        """The modules parsed so far (each is parsed once per UpstreamSources)."""
        return tuple(sorted(self._cache))

    def get(self, module: str) -> ModuleIndex:
        if module not in self._cache:
            folder = self.folder_of(module.partition(".")[0])
            self._cache[module] = ModuleIndex.parse(module, module_path(module, folder))
        index = self._cache[module]
        self.accessed.add(index.path)
        return index

    def resolve_class(self, index: ModuleIndex, name: str) -> tuple[ModuleIndex, ast.ClassDef] | None:
        """Find class ``name`` as seen from ``index``: defined there or imported into it."""
        node = index.members.get(name)
        if isinstance(node, ast.ClassDef):
            return index, node
        origin = index.imported_from.get(name)
        if origin is None:
            return None
        try:
            other = self.get(origin[0])
        except UpstreamError:
            return None
        return self.resolve_class(other, origin[1])

    def find_method(
        self, index: ModuleIndex, class_name: str, method: str
    ) -> tuple[ModuleIndex, FunctionNode, bool] | None:
        """``class_name.method`` own or inherited: (the module defining it, the function, whether inherited)."""
        own = index.method(class_name, method)
        if own is not None:
            return index, own, False
        inherited = self.inherited_method(index, class_name, method)
        return None if inherited is None else (*inherited, True)

    def inherited_method(
        self, index: ModuleIndex, class_name: str, method: str
    ) -> tuple[ModuleIndex, FunctionNode] | None:
        """The definition of ``method`` that ``class_name`` inherits, following bases in MRO-ish order."""
        found = self.resolve_class(index, class_name)
        if found is None:
            return None
        owner_index, cls_node = found
        for base in cls_node.bases:
            if not isinstance(base, ast.Name):
                continue
            base_found = self.resolve_class(owner_index, base.id)
            if base_found is None:
                continue
            base_index, base_node = base_found
            own = base_index.method(base_node.name, method)
            if own is not None:
                return base_index, own
            deeper = self.inherited_method(base_index, base_node.name, method)
            if deeper is not None:
                return deeper
        return None
