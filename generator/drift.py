"""The drift check: do the files on disk equal what generation would write now?"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from modelgraft.generator.discovery import LoadedConfig, Settings
from modelgraft.generator.installed import installed_version
from modelgraft.generator.output.header import generated_from

if TYPE_CHECKING:  # the pipeline is imported only when something has to be generated
    from modelgraft.generator.pipeline import GeneratedFile


@dataclass(frozen=True)
class Drift:
    path: Path
    reason: str  # "differs" | "missing" | "orphaned" | "generated from <package>==<version>, ..."
    expected: str | None = None


def read_text(path: Path) -> str | None:
    """The file's text, or None where it does not exist."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def expected_files(files: list[GeneratedFile], *, with_diff: bool) -> dict[Path, str]:
    out = {f.path: f.text for f in files}
    if with_diff:
        out.update({f.diff_path: f.diff for f in files})
    return out


def run_outputs(loaded_configs: list[LoadedConfig], files: list[GeneratedFile]) -> dict[str, tuple[str, str]]:
    """Each config of the run -> (its target file, the text of its output), for checks across configs.

    A config generated in this run gives its new text; one the check cache skipped gives the file on
    disk, which the cache found equal to what generation would write. A skipped config whose file is
    gone is left out (the cache never skips it then).
    """
    generated = {f.config_name: f.text for f in files}
    outputs = {}
    for loaded in loaded_configs:
        text = generated.get(loaded.name)
        if text is None:
            text = read_text(loaded.output_path)
        if text is not None:
            outputs[loaded.name] = (loaded.config.target_file, text)
    return outputs


def compare(expected: dict[Path, str]) -> list[Drift]:
    drifts = []
    for path in sorted(expected):
        actual = read_text(path)
        if actual is None:
            drifts.append(Drift(path, "missing", expected[path]))
        elif actual != expected[path]:
            drifts.append(Drift(path, "differs", expected[path]))
    return drifts


def from_other_versions(loaded_configs: list[LoadedConfig]) -> dict[str, Drift]:
    """Config name -> the drift of its generated file, for files generated from another upstream version.

    After the pin moved, such a file is out of date whatever generation would write now, and the
    config may not even generate under the new version: that is drift to report (``--check`` exits 1),
    not the config's errors (exit 2), which ``generate-all`` or ``patchgen-pin try`` show.
    """
    found = {}
    for loaded in loaded_configs:
        text = read_text(loaded.output_path)
        source = generated_from(text) if text is not None else None
        if source is None:
            continue
        top = loaded.config.source_module.split(".")[0]
        installed = f"{top}=={installed_version(top)}"
        if source != installed:
            found[loaded.name] = Drift(loaded.output_path, f"generated from {source}, but {installed} is installed")
    return found


def orphans(settings: Settings, expected: set[Path]) -> list[Drift]:
    """Generated files under the discovery roots that no config produces any more."""
    found = []
    for root in settings.roots:
        for folder in sorted(root.rglob(settings.output_subdir)):
            if not folder.is_dir():
                continue
            for path in sorted(folder.iterdir()):
                if path.suffix in (".py", ".diff") and path.name != "__init__.py" and path.resolve() not in expected:
                    found.append(Drift(path, "orphaned"))
    return found
