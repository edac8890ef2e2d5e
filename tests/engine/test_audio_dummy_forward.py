"""``audio_composed_dummy_forward``: the blank clip an audio language model's ``dummy_forward`` hands upstream's
``get_audio_features``, rendered and run on a stand-in model written here (the engine tests import no model).

The zoo's and the survey's passing audio models all take one frame mask; these cases are the snippet's other
branches: a ``get_audio_features`` without a mask (Voxtral's shape) and one requiring a parameter its body never
reads (MOSS-Transcribe-Diarize's ``padding_mask``), and the clip length each kind of tower config asks for.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.snippets import environment, render


class _Clips(torch.nn.Module):
    """A Model whose ``get_audio_features`` records what it is given and returns one feature row per frame."""

    def __init__(self, audio_config: SimpleNamespace) -> None:
        super().__init__()
        self.config = SimpleNamespace(audio_config=audio_config)
        self.audio_tower = torch.nn.Linear(audio_config.num_mel_bins, 3)
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def get_audio_features(self, *args: Any, **kwargs: Any) -> SimpleNamespace:
        self.calls.append((args, kwargs))
        return SimpleNamespace(pooler_output=self.audio_tower(args[0].transpose(1, 2))[0])


def _dummy_forward(**variables: Any) -> Any:
    """The rendered method, defined on :class:`_Clips`."""
    ref = SnippetRef(
        "audio_composed_dummy_forward", {"tower": "audio_tower", "attribute": "pooler_output"} | variables
    )
    text, _ = render(ref, None, environment())
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(text, "audio_composed_dummy_forward", "exec"), namespace)  # noqa: S102 (the snippet under test)
    return namespace["dummy_forward"]


def _run(audio_config: SimpleNamespace, **variables: Any) -> tuple[_Clips, torch.Tensor]:
    model = _Clips(audio_config)
    return model, _dummy_forward(**variables)(model)


WHISPER = SimpleNamespace(num_mel_bins=4, max_source_positions=6)


def test_a_frame_mask_of_ones_goes_with_the_clip() -> None:
    model, zero = _run(WHISPER, mask="input_features_mask")
    (features, mask), kwargs = model.calls[0]
    assert features.shape == (1, 4, 12) and not features.any()
    assert torch.equal(mask, torch.ones(1, 12, dtype=torch.long)) and kwargs == {"return_dict": True}
    assert zero.item() == 0.0


def test_a_get_audio_features_without_a_mask_gets_the_clip_alone() -> None:
    model, _ = _run(WHISPER, mask="")
    args, kwargs = model.calls[0]
    assert len(args) == 1 and kwargs == {"return_dict": True}


def test_a_required_parameter_the_body_never_reads_is_passed_none() -> None:
    model, _ = _run(WHISPER, mask="input_features_mask", unread=["padding_mask"])
    assert model.calls[0][1] == {"padding_mask": None, "return_dict": True}


@pytest.mark.parametrize(
    ("audio_config", "frames"),
    [
        (SimpleNamespace(num_mel_bins=4, max_source_positions=6), 12),  # a Whisper-style window of positions
        (SimpleNamespace(num_mel_bins=4, n_window=5), 10),  # two chunks of a chunked tower
        (SimpleNamespace(num_mel_bins=4, max_position_embeddings=8), 16),  # a rotary tower's longest input
    ],
)
def test_the_blank_clip_is_one_window_of_the_tower(audio_config: SimpleNamespace, frames: int) -> None:
    model, _ = _run(audio_config, mask="input_features_mask")
    assert model.calls[0][0][0].shape == (1, 4, frames)


def test_the_zero_reaches_the_tower_through_get_audio_features() -> None:
    model, zero = _run(WHISPER, mask="input_features_mask")
    zero.backward()
    assert all(p.grad is not None and not p.grad.any() for p in model.audio_tower.parameters())
