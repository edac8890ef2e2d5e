"""A saved model as its own class loads it back: the bitwise reference of another model loaded from the same files.

``from_pretrained`` memory-maps the safetensors file, so the loaded weights sit at the file's own offsets (4-byte
aligned for fp32), not where a model that allocates its weights puts them. Some of torch's CPU kernels round
differently on such data: on an AVX2 CPU, HY-V4-VL's logits loaded from a checkpoint were 6e-8 apart from those
of the model that saved it, and bitwise equal once the loaded weights were copied into fresh memory. A loaded model
is therefore compared bit for bit with a model loaded from the same files, which sits where it does; that this
reference holds the saved weights unchanged is checked when it is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

__all__ = ["loaded_alike"]


def loaded_alike(source: PreTrainedModel, folder: Path, **options: Any) -> PreTrainedModel:
    """``source`` loaded back by its own class from ``folder``, where ``source.save_pretrained`` wrote it, in eval
    mode; fails unless every tensor of its state dict equals the source's bit for bit (a save or load that loses or
    changes a weight fails here, not only where the two sides' logits are compared)."""
    loaded = type(source).from_pretrained(folder, **options).eval()
    saved, back = source.state_dict(), loaded.state_dict()
    assert back.keys() == saved.keys(), sorted(set(back) ^ set(saved))
    changed = [name for name, tensor in saved.items() if not torch.equal(back[name], tensor)]
    assert not changed, f"{type(source).__name__} does not load back what it saved: {changed}"
    return loaded
