"""``import modelgraft.models`` must stay cheap: generation-time code imports it and must not pay for torch."""

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
