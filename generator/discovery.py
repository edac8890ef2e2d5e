"""Where configs live: ``[tool.patchgen]`` in the nearest pyproject.toml, and loading them.

Loading a config imports it (it is Python), so configs must stay cheap: no
torch/transformers at import time.  Every failure is an error, never a skip.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import tomllib
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from modelgraft.generator.errors import ConfigLoadError, DiscoveryError, PatchgenError

if TYPE_CHECKING:  # imported where a config is loaded: a check the cache answers loads none
    from modelgraft.generator.dsl.config import PatchConfig


CONFIG_SUFFIX = "_patch_gen_config.py"


@dataclass(frozen=True)
class Settings:
    """Discovery settings, all paths absolute."""

    root: Path
    roots: tuple[Path, ...]
    output_subdir: str = "generated"
    cache_dir: Path | None = None
    write_diff: bool = True


def find_settings(start: Path | None = None) -> Settings:
    """Read ``[tool.patchgen]`` from the nearest pyproject.toml at or above ``start``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        pyproject = folder / "pyproject.toml"
        if not pyproject.is_file():
            continue
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise DiscoveryError(f"{pyproject} is not valid TOML: {exc}") from exc
        section = data.get("tool", {}).get("patchgen")
        if section is None:
            continue
        roots = section.get("roots", ["."])
        if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
            raise DiscoveryError(f"{pyproject}: [tool.patchgen] roots must be a list of folder names")
        cache = section.get("cache_dir")
        return Settings(
            root=folder,
            roots=tuple((folder / r).resolve() for r in roots),
            output_subdir=section.get("output_subdir", "generated"),
            cache_dir=(folder / cache).resolve() if cache else None,
            write_diff=bool(section.get("diff", True)),
        )
    raise DiscoveryError(f"no pyproject.toml with a [tool.patchgen] section at or above {here}")


def module_name_for(path: Path, settings: Settings) -> str:
    rel = path.resolve().relative_to(settings.root).with_suffix("")
    return ".".join(rel.parts)


def discover(settings: Settings) -> list[str]:
    """Module names of every config under the discovery roots, sorted for determinism."""
    found = []
    for root in settings.roots:
        if not root.is_dir():
            raise DiscoveryError(f"discovery root {root} does not exist")
        configs = sorted(p for p in root.rglob(f"*{CONFIG_SUFFIX}") if settings.output_subdir not in p.parts)
        if not configs:
            raise DiscoveryError(f"discovery root {root} holds no *{CONFIG_SUFFIX} files")
        found += [module_name_for(p, settings) for p in configs]
    return sorted(found)


@dataclass(frozen=True)
class LoadedConfig:
    """A config ready for generation."""

    name: str
    config: PatchConfig
    module: ModuleType
    path: Path
    output_dir: Path

    @property
    def output_path(self) -> Path:
        return self.output_dir / self.config.target_file

    @property
    def diff_path(self) -> Path:
        return self.output_path.with_suffix(".diff")

    def __reduce__(self) -> tuple:
        # A module does not pickle: a worker finds the config again by module and variable name. A
        # forked worker already holds the module, so this is a lookup, not a second import.
        variable = next(k for k, v in vars(self.module).items() if v is self.config)
        return (_reloaded, (self.name, self.module.__name__, variable, self.path, self.output_dir))


def _reloaded(name: str, module_name: str, variable: str, path: Path, output_dir: Path) -> LoadedConfig:
    module = sys.modules.get(module_name) or _exec_config_file(module_name, path)
    return LoadedConfig(name, getattr(module, variable), module, path, output_dir)


#: Configs are loaded from their files under this private prefix: a training repository's own ``models``
#: package keeps its name, and nothing is added to ``sys.path``.
CONFIG_MODULE_PREFIX = "_patchgen_config."


def config_path_for(module_name: str, settings: Settings) -> Path:
    """The file of a config named by its dotted path relative to the project root."""
    return settings.root.joinpath(*module_name.split(".")).with_suffix(".py")


def _parent_packages(module_name: str, path: Path) -> None:
    """Stand-ins for the config's parent packages, so its relative imports resolve to its own folder.

    Each is a bare module whose ``__path__`` is the folder; the folder's ``__init__.py`` is not run (a
    training repository's package may import torch there, which generation never does). The sibling folders
    that hold a config get one too, so ``from ..qwen3_5.qwen3_5_gpu_patch_gen_config import config`` reuses a
    sibling's patches without running that model package's ``__init__.py``.
    """
    parts = module_name.split(".")[:-1]
    folders = [path.parent]
    for _ in parts[1:]:
        folders.insert(0, folders[0].parent)
    packages = list(zip((".".join(parts[:depth]) for depth in range(1, len(parts) + 1)), folders))
    if len(parts) > 1:
        siblings = sorted({config.parent for config in path.parent.parent.glob(f"*/*{CONFIG_SUFFIX}")})
        packages += [(".".join([*parts[:-1], folder.name]), folder) for folder in siblings if folder != path.parent]
    for name, folder in packages:
        present = sys.modules.get(name)
        if present is not None and list(getattr(present, "__path__", [])) == [str(folder)]:
            continue
        package = ModuleType(name, f"the folder {folder}, as patchgen loads configs from it")
        package.__path__ = [str(folder)]
        package.__package__ = name
        sys.modules[name] = package


def _exec_config_file(module_name: str, path: Path) -> ModuleType:
    _parent_packages(module_name, path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigLoadError(f"cannot be loaded from {path}", config=module_name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _import(module_name: str, settings: Settings) -> ModuleType:
    path = config_path_for(module_name, settings)
    if not path.is_file():
        raise ConfigLoadError(
            f"no config file {path.relative_to(settings.root)} under {settings.root}", config=module_name
        )
    private_name = CONFIG_MODULE_PREFIX + module_name
    loaded = sys.modules.get(private_name)
    if loaded is not None and Path(loaded.__file__ or "") == path:
        return loaded
    try:
        return _exec_config_file(private_name, path)
    except PatchgenError as exc:  # a misuse of the patch API already names the config's line (dsl.call_site)
        raise exc.with_context(config=module_name) from exc
    except Exception as exc:  # any failure of user code is a config error, never a skip
        last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" ({Path(last.filename).name}:{last.lineno})" if last else ""
        raise ConfigLoadError(f"failed to import: {type(exc).__name__}: {exc}{where}", config=module_name) from exc


def load_config(
    module_name: str, settings: Settings, *, variable: str | None = None, output_dir: Path | None = None
) -> LoadedConfig:
    """Import ``module_name`` and pick its PatchConfig (by ``variable`` name, or the one it defines)."""
    from modelgraft.generator.dsl.config import PatchConfig

    module = _import(module_name, settings)
    if variable is not None:
        config = getattr(module, variable, None)
        if not isinstance(config, PatchConfig):
            raise ConfigLoadError(f"has no PatchConfig named {variable!r}", config=module_name)
    else:
        own = {
            id(v): v for v in vars(module).values() if isinstance(v, PatchConfig) and v.defined_in == module.__name__
        }
        if not own:
            raise ConfigLoadError("defines no PatchConfig", config=module_name)
        if len(own) > 1:
            raise ConfigLoadError("defines several PatchConfig objects; choose one with -c NAME", config=module_name)
        config = next(iter(own.values()))
    path = Path(module.__file__ or "").resolve()
    out = (output_dir or path.parent / settings.output_subdir).resolve()
    return LoadedConfig(name=module_name, config=config, module=module, path=path, output_dir=out)


def config_module_from_arg(arg: str, settings: Settings) -> str:
    """Accept a dotted module name or a path to a config file."""
    candidate = Path(arg)
    if arg.endswith(".py") or candidate.exists():
        if not candidate.is_file():
            raise ConfigLoadError(f"no such config file {arg}", config=arg)
        try:
            return module_name_for(candidate, settings)
        except ValueError as exc:
            raise ConfigLoadError(f"{arg} lies outside the project root {settings.root}", config=arg) from exc
    return arg
