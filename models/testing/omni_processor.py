"""An Omni model's own processor, built locally at tiny sizes: the VLM pieces plus Whisper's feature extractor.

No hub download, as for the VLMs (``modelgraft.models.testing.vlm_processor``): the tokenizer is word-level with the
model's special tokens, named as the processor reads them (``tokenizer.image_token``, ``tokenizer.audio_bos_token``,
...); images go through the PIL image processor and video frames through it too
(``modelgraft.models.processors.FramesVideoProcessor``); audio through transformers' ``WhisperFeatureExtractor`` (numpy), at the model's mel bins and a short padded length. The
processor class is the model's own (``Qwen2_5OmniProcessor``), so placeholder expansion, audio-in-video
interleaving and the feature lengths are upstream's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, ProcessorMixin, WhisperFeatureExtractor

from modelgraft.models.processors import build_processor
from modelgraft.models.testing.vlm_processor import EOS, PAD, UNK

__all__ = [
    "QWEN_OMNI_SPECIAL_TOKENS",
    "build_omni_processor",
    "synthetic_audio",
    "tiny_omni_tokenizer",
    "whisper_features",
]

#: Qwen2.5-Omni's special tokens by the tokenizer attribute its processor reads; ids follow the words in this order.
QWEN_OMNI_SPECIAL_TOKENS: Mapping[str, str] = {
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
    "image_token": "<|IMAGE|>",
    "video_token": "<|VIDEO|>",
    "audio_token": "<|AUDIO|>",
}

#: The feature extractor's sampling rate (Whisper's and the processor's default).
SAMPLING_RATE = 16000


def tiny_omni_tokenizer(
    words: int = 40, special_tokens: Mapping[str, str] = QWEN_OMNI_SPECIAL_TOKENS
) -> PreTrainedTokenizerFast:
    """Word-level tokenizer: ``<pad>`` (id 0), ``<unk>``, ``<|endoftext|>``, ``w0`` .. ``w{words-1}``, then the specials.

    Each special token is also a named attribute (``tokenizer.image_token``), as the hub tokenizer's config names
    them, and is split off whatever surrounds it, so expanded placeholders tokenize to one id each.
    """
    vocab = {token: i for i, token in enumerate([PAD, UNK, EOS, *(f"w{i}" for i in range(words))])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        unk_token=UNK,
        eos_token=EOS,
        extra_special_tokens=dict(special_tokens),
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(special_tokens.values())})
    return tokenizer


def whisper_features(num_mel_bins: int, *, seconds: int = 1) -> WhisperFeatureExtractor:
    """Whisper's feature extractor at ``num_mel_bins``, padding every clip to ``seconds`` (the processor pads to it)."""
    return WhisperFeatureExtractor(
        feature_size=num_mel_bins, sampling_rate=SAMPLING_RATE, hop_length=160, chunk_length=seconds, n_fft=400
    )


def build_omni_processor(
    processor_class: type[ProcessorMixin], image_processor: Any, feature_extractor: Any, tokenizer: Any
) -> ProcessorMixin:
    """``processor_class`` over these parts and video frames through the image processor, without torchvision
    (``modelgraft.models.processors.build_processor``)."""
    return build_processor(
        processor_class, image_processor=image_processor, feature_extractor=feature_extractor, tokenizer=tokenizer
    )


def synthetic_audio(seconds: float, *, seed: int) -> np.ndarray:
    """A mono clip of ``seconds`` at the sampling rate: a tone plus noise, deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    time = np.arange(int(seconds * SAMPLING_RATE)) / SAMPLING_RATE
    tone = 0.3 * np.sin(2 * np.pi * rng.uniform(200, 800) * time)
    return (tone + 0.05 * rng.standard_normal(time.shape)).astype(np.float32)
