"""A VLM's own processor, built locally at tiny sizes: a word-level tokenizer, the PIL image processor, video frames.

No hub download: the tokenizer is a word-level vocabulary (``w0`` ... plus the model's special tokens) made with
``tokenizers``, the image processor is the slow, PIL-based one, and the processor class is the model's own
(``Qwen2_5_VLProcessor``), so the placeholder expansion, ``mm_token_type_ids`` and the video timing come from
upstream. Video: upstream's video processors need torchvision (whose build on the package index is a CUDA one that
breaks this CPU torch), so :class:`FramesVideoProcessor` sends each frame through the image processor's path and
stacks the frames of one temporal patch, the layout upstream's video processor writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import BatchFeature, PreTrainedTokenizerFast, ProcessorMixin
from transformers.video_processing_utils import BaseVideoProcessor
from transformers.video_utils import VideoMetadata, make_batched_videos

__all__ = [
    "QWEN_VL_SPECIAL_TOKENS",
    "FramesVideoProcessor",
    "build_processor",
    "synthetic_image",
    "synthetic_video",
    "tiny_tokenizer",
]

#: The Qwen-VL family's vision special tokens, in the order their ids follow the words.
QWEN_VL_SPECIAL_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
PAD, UNK, EOS = "<pad>", "<unk>", "<|endoftext|>"


def tiny_tokenizer(words: int = 40, special_tokens: Sequence[str] = QWEN_VL_SPECIAL_TOKENS) -> PreTrainedTokenizerFast:
    """Word-level tokenizer: ``<pad>`` (id 0), ``<unk>``, ``<|endoftext|>``, ``w0`` .. ``w{words-1}``, then the specials.

    Special tokens are split off whatever surrounds them, as the hub tokenizers of the family do, so a processor's
    expanded placeholders (``<|image_pad|>`` repeated) tokenize to one id each.
    """
    vocab = {token: i for i, token in enumerate([PAD, UNK, EOS, *(f"w{i}" for i in range(words))])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD, unk_token=UNK, eos_token=EOS)
    tokenizer.add_special_tokens({"additional_special_tokens": list(special_tokens)})
    return tokenizer


class FramesVideoProcessor(BaseVideoProcessor):
    """Videos through an image processor: each frame processed as an image, ``temporal_patch_size`` frames per patch.

    The image processor patchifies one frame into rows ``[C, temporal_patch_size, P, P]`` with the frame repeated
    along the temporal axis; a video's row holds ``temporal_patch_size`` consecutive frames there instead, which
    is what upstream's Qwen2-VL video processor writes (same patch order: merge blocks, then channels, time, pixels).
    ``fps`` is the sampling rate the metadata reports (the processor derives ``second_per_grid_ts`` from it).
    """

    def __init__(self, image_processor: Any, fps: float = 1.0) -> None:
        super().__init__()
        self.image_processor = image_processor
        self.patch_size = image_processor.patch_size
        self.merge_size = image_processor.merge_size
        self.temporal_patch_size = image_processor.temporal_patch_size
        self.fps = fps

    def __call__(self, videos: Any, **kwargs: Any) -> BatchFeature:
        step = self.temporal_patch_size
        rows, grids, metadata = [], [], []
        for frames in make_batched_videos(videos):
            frames = list(frames)
            if len(frames) % step:
                raise ValueError(f"a video needs a multiple of {step} frames, got {len(frames)}")
            images = self.image_processor(images=frames, return_tensors="np")
            _, grid_h, grid_w = (int(n) for n in images["image_grid_thw"][0])
            patches = images["pixel_values"].reshape(
                len(frames), grid_h * grid_w, -1, step, self.patch_size, self.patch_size
            )
            single = patches[:, :, :, 0]  # [frames, patches, C, P, P]: each frame once
            groups = [np.stack(list(single[t : t + step]), axis=2) for t in range(0, len(frames), step)]
            rows.append(np.concatenate([group.reshape(grid_h * grid_w, -1) for group in groups]))
            grids.append([len(frames) // step, grid_h, grid_w])
            metadata.append(
                VideoMetadata(total_num_frames=len(frames), fps=self.fps, frames_indices=list(range(len(frames))))
            )
        return BatchFeature(
            {
                "pixel_values_videos": np.concatenate(rows),
                "video_grid_thw": np.array(grids),
                "video_metadata": metadata,
            }
        )


def build_processor(processor_class: type[ProcessorMixin], image_processor: Any, tokenizer: Any) -> ProcessorMixin:
    """``processor_class(image_processor, tokenizer, FramesVideoProcessor(image_processor))``.

    ``ProcessorMixin`` checks a video processor against ``transformers.BaseVideoProcessor``, which without
    torchvision is a placeholder class that nothing is an instance of; the check of that one argument is made
    against the real base class instead, for this instance's construction only. Everything else is upstream's.
    """
    processor = processor_class.__new__(processor_class)
    check = processor.check_argument_for_proper_class

    def check_video_processor_by_its_real_base(name: str, argument: Any) -> Any:
        if name == "video_processor":
            if not isinstance(argument, BaseVideoProcessor):
                raise TypeError(f"video_processor must be a BaseVideoProcessor, got {type(argument).__name__}")
            return BaseVideoProcessor
        return check(name, argument)

    processor.check_argument_for_proper_class = check_video_processor_by_its_real_base
    try:
        processor_class.__init__(
            processor,
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=FramesVideoProcessor(image_processor),
        )
    finally:
        del processor.check_argument_for_proper_class
    return processor


def synthetic_image(height: int, width: int, *, seed: int) -> Image.Image:
    """An RGB image of uniform noise, deterministic in ``seed``."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def synthetic_video(height: int, width: int, *, frames: int = 2, seed: int) -> list[Image.Image]:
    """``frames`` distinct noise frames, deterministic in ``seed``."""
    return [synthetic_image(height, width, seed=seed * 1000 + i) for i in range(frames)]
