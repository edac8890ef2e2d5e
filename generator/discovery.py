"""Where configs live: ``[tool.patchgen]`` in the nearest pyproject.toml, and loading them.

Loading a config imports it (it is Python), so configs must stay cheap: no
torch/transformers at import time.  Every failure is an error, never a skip.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from generator.dsl.config import PatchConfig
from generator.errors import ConfigLoadError, DiscoveryError, PatchgenError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

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
    module = importlib.import_module(module_name)
    return LoadedConfig(name, getattr(module, variable), module, path, output_dir)


def _import(module_name: str, settings: Settings) -> ModuleType:
    root = str(settings.root)
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        return importlib.import_module(module_name)
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
