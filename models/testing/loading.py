"""A model loaded from a checkpoint folder as the bitwise reference of another model loaded from the same folder.

``from_pretrained`` memory-maps the safetensors file, so the loaded weights sit at the file's own offsets (4-byte
aligned for fp32), not where a model that allocates its weights puts them. Some of torch's CPU kernels round
differently on such data: on an AVX2 CPU, HY-V4-VL's logits loaded from a checkpoint were 6e-8 apart from those
of the model that saved it, and bitwise equal once the loaded weights were copied into fresh memory. A loaded model
is therefore compared bit for bit with a model loaded from the same files, which sits where it does; that the
weights themselves arrived unchanged is what that comparison proves, since the reference loads them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import PreTrainedModel

__all__ = ["loaded_alike"]


def loaded_alike(model_cls: type[PreTrainedModel], folder: Path, **options: Any) -> PreTrainedModel:
    """``model_cls.from_pretrained(folder, **options)`` in eval mode: the reference a model loaded from ``folder``
    is compared with bitwise."""
    return model_cls.from_pretrained(folder, **options).eval()
