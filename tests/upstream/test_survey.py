"""The reader over every upstream package with a ``*ForCausalLM``: it must never crash."""

from __future__ import annotations

import re

from modelgraft.generator.categories import category_names
from modelgraft.generator.upstream.index import UpstreamSources
from modelgraft.generator.upstream.locate import package_root
from modelgraft.generator.upstream.reader import read_model
from modelgraft.generator.upstream.structure import MLP_KINDS, NORM_KINDS


def causal_lm_packages() -> list[str]:
    models = package_root("transformers") / "models"
    found = []
    for folder in sorted(models.iterdir()):
        path = folder / f"modeling_{folder.name}.py"
        if path.is_file() and re.search(r"^class \w+ForCausalLM\b", path.read_text(encoding="utf-8"), re.MULTILINE):
            found.append(folder.name)
    return found


def test_every_causal_lm_package_is_read_with_valid_kinds() -> None:
    sources = UpstreamSources()
    packages = causal_lm_packages()
    assert len(packages) > 100
    for model in packages:
        s = read_model(model, sources=sources)
        assert s.category in category_names(), model
        assert all(n.kind in NORM_KINDS and (n.kind != "unknown" or n.reason) for n in s.norms), model
        assert all(m.kind in MLP_KINDS and (m.kind != "unknown" or m.reason) for m in s.mlps), model
        assert s.rope is not None and (s.rope.formulation != "unknown" or s.rope.reason), model
