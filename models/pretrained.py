"""What a generated class's strict ``from_pretrained`` calls to judge transformers' loading report.

Every generated ``<Prefix>PreTrainedModel`` defines its own ``from_pretrained`` (the recipes' snippet
``strict_from_pretrained``; docs/design.md, "Strict loading"): it runs upstream's loading with
``output_loading_info=True`` and hands the report to :func:`require_complete_load` unless called with
``strict=False``. The rule lives here, once, and not in every generated file, so changing a message
regenerates nothing; the decision to apply it, and the default, stay visible in the generated class.

Nothing here patches a class or registers anything: importing this module changes no state outside it
(docs/design.md, "Importing changes nothing").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from modelgraft.models.checkpoint import CheckpointError, describe_key_problems

__all__ = ["require_complete_load"]


def require_complete_load(cls: type, checkpoint: Any, loading_info: Mapping[str, Any]) -> None:
    """Raise CheckpointError if ``loading_info`` (transformers' loading report) lists missing or unexpected keys.

    transformers fills a weight the checkpoint lacks with a fresh initialisation and drops a tensor the model
    lacks, and only logs both; a silently half-initialised model is what strict loading exists to refuse. The
    report already leaves out the keys upstream ignores on purpose (``_keys_to_ignore_on_load_*``, tied
    weights), so those never raise. ``checkpoint`` is what the caller passed as the checkpoint, named in the
    message with ``cls``, the keys and the way out.
    """
    missing = loading_info.get("missing_keys") or ()
    unexpected = loading_info.get("unexpected_keys") or ()
    if not missing and not unexpected:
        return
    raise CheckpointError(
        f"checkpoint {checkpoint} does not fit {cls.__module__}.{cls.__qualname__}: "
        f"{describe_key_problems(missing, unexpected)}. from_pretrained(..., strict=False) loads it anyway, "
        "with the missing weights freshly initialised and the unexpected ones dropped"
    )
