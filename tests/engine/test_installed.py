"""installed_version answers what importlib.metadata.version answers, without importing it."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from modelgraft.generator.installed import installed_version


def test_every_installed_distribution_has_the_version_importlib_metadata_gives() -> None:
    names = {dist.metadata["Name"] for dist in importlib.metadata.distributions()}

    assert {"transformers", "ruff", "jinja2"} <= {n.lower() for n in names}
    for name in sorted(names):
        assert installed_version(name) == importlib.metadata.version(name), name
        assert installed_version(name.upper().replace("-", ".")) == importlib.metadata.version(name), name


def test_the_first_folder_on_the_path_wins_and_a_missing_one_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for folder, version in (("first", "2.0"), ("second", "1.0")):
        info = tmp_path / folder / "Toy_Pkg-9.9.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: toy-pkg\nSummary: x\n  folded: 0\nversion: {version}\n\nVersion: 3\n",
            encoding="utf-8",
        )
    monkeypatch.syspath_prepend(str(tmp_path / "second"))
    monkeypatch.syspath_prepend(str(tmp_path / "first"))

    assert installed_version("toy.pkg") == importlib.metadata.version("toy.pkg") == "2.0"
    assert installed_version("not-installed-anywhere") is None


def test_checking_versions_does_not_import_importlib_metadata() -> None:
    code = (
        "import sys; from modelgraft.generator.installed import installed_version as v; "
        "assert v('transformers') and v('ruff'); print('importlib.metadata' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

    assert out.strip() == "False"
