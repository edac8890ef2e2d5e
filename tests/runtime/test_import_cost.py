"""``import modelgraft.models`` must stay cheap: generation-time code imports it and must not pay for torch.

It fills the registries from every model package and imports nothing else of the run-time support
(docs/design.md, "Importing changes nothing"). Each case runs in a fresh interpreter, so nothing this
test process imported earlier can hide a cost.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from modelgraft import models

REPO_ROOT = Path(models.__file__).resolve().parent.parent


def _run(code: str) -> None:
    result = subprocess.run([sys.executable, "-c", code], check=False, cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_import_models_imports_neither_torch_nor_transformers() -> None:
    _run(
        "import sys, modelgraft.models, modelgraft.models.registry\n"
        "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )


def test_import_models_imports_every_model_package() -> None:
    _run(
        "import sys\n"
        "from modelgraft import models\n"
        "missing = [p for p in models.MODEL_PACKAGES if 'modelgraft.models.' + p not in sys.modules]\n"
        "assert not missing, missing\n"
        "assert len(models.MODELING_REGISTRY) >= len(models.MODEL_PACKAGES)\n"
    )


def test_every_folder_with_a_patch_config_is_a_model_package() -> None:
    """Discovery through the import system finds exactly the folders a reader sees on disk."""
    on_disk = sorted(
        folder.name
        for folder in Path(models.__file__).parent.iterdir()
        if (folder / "__init__.py").is_file() and any(folder.glob("*_patch_gen_config.py"))
    )
    assert list(models.MODEL_PACKAGES) == on_disk


def test_import_models_imports_none_of_the_run_time_support_without_a_patch_config() -> None:
    """distributed would import torch and testing needs pytest: discovery must only list them, never import them."""
    _run(
        "import sys, modelgraft.models\n"
        "support = ('distributed', 'ops', 'testing', 'attention', 'checkpoint', 'loader', 'pretrained')\n"
        "imported = [m for m in support if 'modelgraft.models.' + m in sys.modules]\n"
        "assert not imported, imported\n"
    )


def test_import_models_needs_no_pytest() -> None:
    _run(
        "import sys\n"
        "sys.modules['pytest'] = sys.modules['_pytest'] = None  # any import of them now raises ImportError\n"
        "import modelgraft.models\n"
    )
