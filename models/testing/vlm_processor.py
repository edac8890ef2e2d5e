"""A VLM's own processor, built locally at tiny sizes: a word-level tokenizer, the PIL image processor, video frames.

No hub download: the tokenizer is a word-level vocabulary (``w0`` ... plus the model's special tokens) made with
``tokenizers``, the image processor is the slow, PIL-based one, and the processor class is the model's own
(``Qwen2_5_VLProcessor``), so the placeholder expansion, ``mm_token_type_ids`` and the video timing come from
upstream. The processor is built without torchvision as a library user builds one
(``modelgraft.models.processors``: video frames through the image processor).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

__all__ = [
    "QWEN_VL_SPECIAL_TOKENS",
    "read_tokenizer_attributes",
    "synthetic_image",
    "synthetic_video",
    "tiny_tokenizer",
]

#: The Qwen-VL family's vision special tokens, in the order their ids follow the words.
QWEN_VL_SPECIAL_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
PAD, UNK, EOS = "<pad>", "<unk>", "<|endoftext|>"


def tiny_tokenizer(
    words: int = 40, special_tokens: Sequence[str] = QWEN_VL_SPECIAL_TOKENS, named: Mapping[str, str] | None = None
) -> PreTrainedTokenizerFast:
    """Word-level tokenizer: ``<pad>`` (id 0), ``<unk>``, ``<|endoftext|>``, ``w0`` .. ``w{words-1}``, then the specials.

    Special tokens are split off whatever surrounds them, as the hub tokenizers of the family do, so a processor's
    expanded placeholders (``<|image_pad|>`` repeated) tokenize to one id each. ``named`` special tokens come after
    them and are also attributes of the tokenizer (``tokenizer.image_token`` and ``tokenizer.image_token_id``), as a
    hub tokenizer's config names them for a processor that reads its placeholder from there (PaddleOCR-VL's).
    """
    vocab = {token: i for i, token in enumerate([PAD, UNK, EOS, *(f"w{i}" for i in range(words))])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # Named tokens only where asked: the keyword changes nothing else, and Qwen-VL's tokenizers stay as they were.
    extra = {"extra_special_tokens": dict(named)} if named else {}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD, unk_token=UNK, eos_token=EOS, **extra)
    tokenizer.add_special_tokens({"additional_special_tokens": list(special_tokens)})
    return tokenizer


def synthetic_image(height: int, width: int, *, seed: int) -> Image.Image:
    """An RGB image of uniform noise, deterministic in ``seed``."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def synthetic_video(height: int, width: int, *, frames: int = 2, seed: int) -> list[Image.Image]:
    """``frames`` distinct noise frames, deterministic in ``seed``."""
    return [synthetic_image(height, width, seed=seed * 1000 + i) for i in range(frames)]


#: A bound on the ``*_token`` attributes a processor may ask its tokenizer for, against one that keeps asking
#: (MiniCPM-V asks for eight: image, video, and the starts and ends of images, slices and image ids).
_MOST_TOKEN_ATTRIBUTES = 32


def read_tokenizer_attributes(build: Callable[[Mapping[str, str]], Any], owner: str) -> dict[str, str]:
    """The ``*_token`` attributes a processor reads from its tokenizer, found by building it with ``build`` (given
    the attributes found so far): each one it asks for and the tiny tokenizer lacks becomes a special token of its
    own, named after it (``<image_token>``). Empty for a processor with defaults of its own (Qwen-VL's); any other
    error, or a tokenizer that keeps asking, is raised (``owner`` names the processor)."""
    attributes: dict[str, str] = {}
    for _ in range(_MOST_TOKEN_ATTRIBUTES + 1):
        try:
            build(attributes)
        except AttributeError as error:
            name = getattr(error, "name", None) or str(error).rsplit(" ", 1)[-1].strip("'\"")
            if not name.endswith("_token") or name in attributes:
                raise
            attributes[name] = f"<{name}>"
            continue
        return attributes
    raise AttributeError(f"{owner} reads more tokenizer attributes than expected")
