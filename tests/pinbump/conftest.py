"""Fixtures of the pin-bump tests: a wheelhouse of the fake transformers, and a project patching it."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from .toy import TOY_V1, TOY_V2, build_wheel


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    house = tmp_path / "wheelhouse"
    house.mkdir()
    build_wheel(house, "9.0.0", TOY_V1)
    build_wheel(house, "9.1.0", TOY_V2)
    return house


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    (root / "zoopin" / "toy").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.patchgen]\nroots = ["zoopin"]\n')
    (root / "zoopin" / "__init__.py").write_text("")
    (root / "zoopin" / "toy" / "__init__.py").write_text("")
    (root / "zoopin" / "toy" / "toy_gpu_patch_gen_config.py").write_text(
        textwrap.dedent(
            """
            from modelgraft.generator import PatchConfig

            config = PatchConfig("transformers.models.toy.modeling_toy", "patched_modeling_toy_gpu.py")


            @config.override_method("ToyModel.forward")
            def forward(self, input_ids, attention_mask=None):
                return input_ids


            @config.replace_function("helper")
            def helper(x, scale=1.0):
                return x


            @config.override_method("ToyModel.dummy_forward", add=True)
            def dummy_forward(self):
                return None
            """
        )
    )
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [m for m in sys.modules if m == "zoopin" or m.startswith("zoopin.")]:
        del sys.modules[name]
