"""Each surveyed model's category, from the upstream reader of the clone (guessed from class names without one).

The reader runs in a child process inside the clone, so the categories are the clone's (the working tree
surveyed), and this process imports neither the reader nor transformers. What the survey says of a category
(its name, label, pass-rate target, whether it has towers) is the one table, ``modelgraft.generator.categories``:
pure data, imported on first use, so importing the survey loads nothing of the generator.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from modelgraft.scaffold.survey.clones import subprocess_env

#: A model the reader could not read.
UNKNOWN = "unknown"


def category_names() -> tuple[str, ...]:
    """The reader's categories, in the table's order (``modelgraft.generator.categories``)."""
    from modelgraft.generator.categories import category_names

    return category_names()


def multimodal_categories() -> tuple[str, ...]:
    """The categories of a package holding a vision or audio tower (VLMs and Omni models)."""
    from modelgraft.generator.categories import CATEGORIES

    return tuple(entry.name for entry in CATEGORIES if entry.towers)


def category_label(name: str) -> str:
    """How the report names a category ("MoE", "VLM + MoE"); any other name (``unknown``) as it is, without "_"."""
    from modelgraft.generator.categories import CATEGORIES

    labels = {entry.name: entry.label for entry in CATEGORIES}
    return labels.get(name, name.replace("_", " "))


def category_target(name: str) -> float | None:
    """The pass rate the survey measures a category's scaffold against; None for no target."""
    from modelgraft.generator.categories import CATEGORIES

    return next((entry.target for entry in CATEGORIES if entry.name == name), None)


_READER_SCRIPT = r"""
import json, sys
names = json.loads(sys.stdin.read())
try:
    import modelgraft.generator.upstream.reader as reader_module
    read_model = reader_module.read_model
except ModuleNotFoundError as error:
    if error.name not in ("modelgraft.generator.upstream.reader", "modelgraft.generator.upstream", "generator"):
        result = {"reader": None, "error": f"modelgraft.generator.upstream.reader does not import: {type(error).__name__}: {error}"}
    else:
        result = {"reader": None, "error": "modelgraft.generator.upstream.reader is missing"}
except Exception as error:
    result = {"reader": None, "error": f"modelgraft.generator.upstream.reader does not import: {type(error).__name__}: {error}"}
else:
    models = {}
    for name in names:
        try:
            structure = read_model(name)
            models[name] = {
                "category": str(getattr(structure, "category", "unknown")),
                "reason": str(getattr(structure, "category_reason", "") or ""),
            }
        except Exception as error:
            models[name] = {"category": "unknown", "reason": f"the reader failed: {type(error).__name__}: {error}"}
    result = {"reader": reader_module.__file__, "models": models}
print("SURVEY-JSON:" + json.dumps(result))
"""

_GUESS_MOE = re.compile(
    r"^class\s+\w*(?:Experts|SparseMoeBlock|MoeBlock|MoE|MoELayer|MoeLayer)\w*\s*[(:]", re.MULTILINE
)
_GUESS_OUT = re.compile(
    r"^class\s+\w*(?:ForConditionalGeneration|ForMaskedLM|ForSeq2SeqLM|Mamba\w*Mixer|EncoderLayer)\w*\s*[(:]",
    re.MULTILINE,
)


def guess_category(modeling_source: str) -> tuple[str, str]:
    """A category from class names alone, for when the reader is missing: moe, out_of_category or dense."""
    from modelgraft.generator.categories import OUT_OF_CATEGORY, category_for

    note = "guessed from class names (no generator.upstream.reader)"
    if _GUESS_OUT.search(modeling_source):
        return OUT_OF_CATEGORY, note
    return category_for(experts=bool(_GUESS_MOE.search(modeling_source))).name, note


@dataclass(frozen=True)
class Categories:
    """Each model's (category, reason), and where they came from."""

    by_model: dict[str, tuple[str, str]]
    #: The reader's file in the clone, or None when it was missing (categories then guessed).
    reader: str | None
    warning: str = ""


def read_categories(clone: Path, names: Sequence[str], models_dir: Path, timeout: float = 600) -> Categories:
    """Each model's category and its reason, by the clone's reader; guessed when the reader is missing."""
    if not names:
        return Categories({}, None)
    error = ""
    try:
        result = subprocess.run(
            [sys.executable, "-c", _READER_SCRIPT],
            input=json.dumps(list(names)),
            cwd=clone,
            env=subprocess_env(clone),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        error = f"modelgraft.generator.upstream.reader took more than {timeout:g} s"
        payload: dict = {}
    else:
        lines = [line for line in result.stdout.splitlines() if line.startswith("SURVEY-JSON:")]
        payload = json.loads(lines[-1][len("SURVEY-JSON:") :]) if lines else {}
        if not lines:
            error = "running generator.upstream.reader failed: " + (result.stderr.strip().splitlines() or ["?"])[-1]
        error = payload.get("error") or error
    if payload.get("reader"):
        models = payload["models"]
        return Categories({n: (models[n]["category"], models[n]["reason"]) for n in names}, payload["reader"])
    guessed = {}
    for name in names:
        source = (models_dir / name / f"modeling_{name}.py").read_text(encoding="utf-8", errors="replace")
        guessed[name] = guess_category(source)
    return Categories(guessed, None, f"{error}: categories are guessed from class names")
