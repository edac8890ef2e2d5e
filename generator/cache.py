"""Content-hash cache that lets ``--check`` skip regeneration on an unchanged tree.

An entry records, for one config, every input file it was generated from and
the hash of every output it produced.  It is trusted only when a fresh hash of
all those inputs, the generator's own code and the ruff version equals the
stored key, and the files on disk hash to the stored outputs.  Anything else,
including a corrupt or foreign cache file, is a miss and means real
generation, so a stale cache can cost time but never hide drift.

An entry also names the config's generated module, so a check can find every output without
loading the config (:meth:`CheckCache.vouched_output`): the entry's inputs hold the config's file
and every project module it imports, so while they hash the same the config names the same file,
as it produces the same text (the cache relies on that already to skip generating it).
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

from modelgraft.generator.installed import installed_version
from modelgraft.generator.normalize.ruff import ruff_version
from modelgraft.generator.own_code import GENERATOR_ROOT

SCHEMA = 1
_OWN_SUFFIXES = (".py", ".j2", ".toml")


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "missing"


# Memoised per process: a fact of the installed generator, not run state (RunContext holds that).
@lru_cache(maxsize=1)
def generator_digest() -> str:
    """Hash of the generator's own code, templates and ruff settings, plus the ruff version."""
    digest = hashlib.sha256(ruff_version().encode())
    for name in _generator_files():
        digest.update(name.encode() + b"\0" + bytes.fromhex(_file_digest(GENERATOR_ROOT / name)))
    return digest.hexdigest()


def _generator_files() -> list[str]:
    """The generator's code, templates and settings, as sorted relative POSIX names; bytecode folders are
    not walked (``os.walk``: a warm check pays for this on every run, pathlib's ``rglob`` several times over)."""
    found = []
    for folder, subfolders, files in os.walk(GENERATOR_ROOT):
        subfolders[:] = [name for name in subfolders if name != "__pycache__"]
        relative = Path(folder).relative_to(GENERATOR_ROOT).as_posix()
        found += [name if relative == "." else f"{relative}/{name}" for name in files if name.endswith(_OWN_SUFFIXES)]
    return sorted(found)


def _entry_checksum(entry: dict) -> str:
    body = {k: v for k, v in entry.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class CheckCache:
    """One JSON file per project under the git-ignored cache folder."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "check-cache.json"
        self.entries: dict[str, dict] = self._load()
        # Input files hashed and distribution versions looked up so far: configs share many (snippets,
        # transformers' base modules, transformers itself), and nothing changes them during one run.
        self._digests: dict[str, str] = {}
        self._versions: dict[str, str | None] = {}

    def inputs_key(self, inputs: list[str]) -> str:
        """Hash of the generator's own code and of every input file, by name and content."""
        digest = hashlib.sha256(generator_digest().encode())
        for name in sorted(inputs):
            if name not in self._digests:
                self._digests[name] = _file_digest(Path(name))
            digest.update(name.encode() + b"\0" + self._digests[name].encode())
        return digest.hexdigest()

    def _load(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("entries"), dict):
            return {}
        return {
            k: v for k, v in data["entries"].items() if isinstance(v, dict) and v.get("checksum") == _entry_checksum(v)
        }

    def is_clean(self, config_name: str, outputs: list[Path]) -> bool:
        """True only if the stored key matches the inputs now and every output on disk is as generated."""
        entry = self.entries.get(config_name)
        if entry is None or not isinstance(entry.get("inputs"), list) or not isinstance(entry.get("outputs"), dict):
            return False
        if self.inputs_key(entry["inputs"]) != entry.get("key"):
            return False
        versions = entry.get("versions")
        if not isinstance(versions, dict) or any(self._installed(name) != v for name, v in versions.items()):
            return False
        recorded = entry["outputs"]
        if sorted(recorded) != sorted(str(p) for p in outputs):
            return False
        return all(_file_digest(Path(p)) == recorded[p] for p in recorded)

    def vouched_output(self, config_name: str, folder: Path, *, with_diff: bool) -> Path | None:
        """The generated module of ``config_name`` when its entry names one in ``folder`` and
        :meth:`is_clean` holds for it (and its ``.diff`` when ``with_diff``); None otherwise."""
        entry = self.entries.get(config_name)
        output = entry.get("output") if entry is not None else None
        if not isinstance(output, str) or Path(output).parent != folder:
            return None
        path = Path(output)
        return (
            path if self.is_clean(config_name, [path, *([path.with_suffix(".diff")] if with_diff else [])]) else None
        )

    def _installed(self, distribution: str) -> str | None:
        if distribution not in self._versions:
            self._versions[distribution] = installed_version(distribution)
        return self._versions[distribution]

    def record(
        self,
        config_name: str,
        inputs: tuple[str, ...],
        outputs: dict[Path, str],
        versions: dict[str, str],
        *,
        output: Path | None = None,
    ) -> None:
        """Remember one config's inputs, the hash of each of its ``outputs`` and, as ``output``, its
        generated module (the one of ``outputs`` that is not a ``.diff``)."""
        entry = {
            "versions": dict(sorted(versions.items())),
            "inputs": sorted(inputs),
            "key": self.inputs_key(list(inputs)),
            "outputs": {str(p): hashlib.sha256(text.encode()).hexdigest() for p, text in sorted(outputs.items())},
        }
        if output is not None:
            entry["output"] = str(output)
        entry["checksum"] = _entry_checksum(entry)
        self.entries[config_name] = entry

    def save(self) -> None:
        from modelgraft.generator.output.write import write_atomic  # tempfile and shutil: only when saving

        write_atomic(
            self.path, json.dumps({"schema": SCHEMA, "entries": self.entries}, indent=1, sort_keys=True) + "\n"
        )
