"""What each rank runs in the multimodal distributed tests: a VLM (or Omni thinker) under Ulysses, expert
parallelism or FSDP2, against one process on the whole batch.

The models and batches are the zoo's own parity declarations (``models/<m>/tests/test_<m>_parity.py``, read
through ``modelgraft.models.testing.declarations``): tiny configs, real processor outputs. Each scenario checks the
loss, the logits at real tokens and every gradient against the one-process step (``tests/distributed/scenarios.py``'s
tolerances), with the images where the scenario says (on one sp rank's slice only, or on one data rank only).
"""

from __future__ import annotations

from typing import Any

import torch

from modelgraft.models.distributed import (
    ParallelState,
    apply_expert_parallel,
    apply_fsdp,
    attach_parallel,
    average_gradients,
    full_state,
    gather_sequence,
    shard_multimodal,
)
from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig
from modelgraft.models.testing import seed_everything
from modelgraft.models.testing.declarations import parity_declaration
from modelgraft.models.testing.omni_processor import synthetic_audio
from modelgraft.models.testing.omni_suite import AUDIO
from modelgraft.models.testing.omni_suite import IMAGE as OMNI_IMAGE
from modelgraft.models.testing.vlm_processor import synthetic_image, synthetic_video
from modelgraft.models.testing.vlm_suite import IMAGE, VIDEO

from .scenarios import GROUPED, assert_close, assert_same_grads, ops

#: get_rope_index's inputs, where a batch has them.
ROPE_INPUTS = (
    "input_ids",
    "mm_token_type_ids",
    "image_grid_thw",
    "video_grid_thw",
    "second_per_grid_ts",
    "attention_mask",
)


def _fresh(spec: Any, config: Any) -> torch.nn.Module:
    seed_everything(0)
    return build_model(config, architecture=spec.causal_lm)


def _reference(
    spec: Any, config: Any, batch: dict[str, Any], base: OpsConfig
) -> tuple[Any, dict[str, torch.Tensor | None]]:
    model = _fresh(spec, config)
    with ops(base):
        out = model(**batch)
        out.loss.backward()
    # None where one process gives a parameter no gradient (the parallel run must then give it none, or zero).
    return out, {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()}


def _words(first: int, last: int) -> str:
    return " ".join(f"w{i}" for i in range(first, last))


def _images_on_sp_rank_0(spec: Any) -> dict[str, Any]:
    """Two rows of 18 tokens: an image (4 placeholders) and a 2-frame video (1 placeholder) in the first 9
    positions, text after them: with sp=2, sp rank 1's slice holds no placeholder."""
    return spec.batch(
        [
            (f"{IMAGE} {_words(1, 13)}", [synthetic_image(16, 16, seed=1)], []),
            (f"w1 {VIDEO} {_words(13, 21)}", [], [synthetic_video(8, 8, seed=2)]),
        ]
    )


def _images_across_both_sp_ranks(spec: Any) -> dict[str, Any]:
    """Row 0's image in sp rank 1's slice, row 1's image straddling the two slices after a video in rank 0's:
    each rank's image features are not the first ones of the batch (row 0's come first)."""
    return spec.batch(
        [
            (f"{_words(1, 10)} {IMAGE} {_words(10, 13)}", [synthetic_image(16, 16, seed=1)], []),
            (f"{VIDEO} {IMAGE} {_words(13, 20)}", [synthetic_image(16, 16, seed=3)], [synthetic_video(8, 8, seed=2)]),
        ]
    )


LAYOUTS = {"images_on_sp_rank_0": _images_on_sp_rank_0, "images_across_both_sp_ranks": _images_across_both_sp_ranks}


def _check_sequence_parallel_step(
    model: Any, local: dict[str, Any], state: ParallelState, batch: dict[str, Any], ref_out: Any, ref_grads: Any
) -> None:
    """The sharded step's gathered logits at real tokens, loss and every averaged gradient are one process's."""
    out = model(**local)
    real = batch["attention_mask"].bool()
    logits = gather_sequence(out.logits, state, length=real.shape[1])
    assert_close(logits[real], ref_out.logits[real], "logits at real tokens")
    assert_close(out.loss, ref_out.loss, "loss")
    out.loss.backward()
    average_gradients(model, state)
    assert_same_grads(full_state(model, state, grads=True), ref_grads)


def sequence_parallel_vlm_matches_one_process(package: str, layout: str) -> None:
    """SP=2 (Ulysses on the text decoder, the towers on every rank) equals one process on the whole batch."""
    state = ParallelState.build(sp=2)
    spec = parity_declaration(package)
    config = spec.config()
    batch = LAYOUTS[layout](spec)
    ref_out, ref_grads = _reference(spec, config, batch, OpsConfig())

    model = _fresh(spec, config)
    positions, _ = model.get_position_id_func()(**{k: batch[k] for k in ROPE_INPUTS if k in batch})
    attach_parallel(model, state)
    local = shard_multimodal({**batch, "position_ids": positions}, state, pad_token_id=config.text_config.pad_token_id)
    assert local["position_ids"].shape == (3, 2, -(-batch["input_ids"].shape[1] // 2))
    images_here = bool((local["mm_token_type_ids"] == 1).any())
    assert images_here == (state.sp_rank == 0 or layout == "images_across_both_sp_ranks"), layout
    _check_sequence_parallel_step(model, local, state, batch, ref_out, ref_grads)


def sequence_parallel_composed_vlm_matches_one_process(package: str, layout: str) -> None:
    """SP=2 on a composed (LLaVA-style) VLM equals one process: the text is sharded with its 1-D positions, every
    rank runs the tower on the whole batch's images, and each keeps the features of its own placeholders.

    ``images_on_sp_rank_0``: each row's image, then more words than the image has placeholders, so sp rank 1's
    slice holds text only; ``images_across_both_sp_ranks``: rows as the processor writes them, whose placeholders
    straddle the two slices."""
    state = ParallelState.build(sp=2)
    spec = parity_declaration(package)
    config = spec.config()
    trailing = 0
    if layout == "images_on_sp_rank_0":
        tokens = spec.batch(config, (1, 1))["input_ids"].shape[1]
        trailing = tokens + 4
    batch = spec.batch(config, (1, 1), trailing_words=trailing)
    ref_out, ref_grads = _reference(spec, config, batch, OpsConfig())

    model = _fresh(spec, config)
    rows, length = batch["input_ids"].shape
    positions = torch.arange(length).expand(rows, length)  # the text's own 1-D positions, as one process numbers them
    attach_parallel(model, state)
    local = shard_multimodal({**batch, "position_ids": positions}, state, pad_token_id=config.text_config.pad_token_id)
    images_here = bool((local["input_ids"] == config.image_token_id).any())
    assert images_here == (state.sp_rank == 0 or layout == "images_across_both_sp_ranks"), layout
    _check_sequence_parallel_step(model, local, state, batch, ref_out, ref_grads)


def _split_rows(spec: Any, rows: list[Any], rank: int, world: int) -> dict[str, Any]:
    """Rank ``rank``'s share of ``rows`` through the processor alone (its own images, its own padding)."""
    share = len(rows) // world
    return spec.batch(rows[rank * share : (rank + 1) * share])


def _images_on_data_rank_0() -> list[Any]:
    """Four rows: the first two (data rank 0's) with an image and a video, the last two (rank 1's) text only."""
    return [
        (f"w1 {IMAGE} w2 w3", [synthetic_image(16, 16, seed=3)], []),
        (f"w4 {VIDEO} w5", [], [synthetic_video(8, 8, seed=4)]),
        ("w6 w7 w8 w9 w10", [], []),
        ("w11 w12", [], []),
    ]


def data_parallel_vlm_matches_one_process(package: str, mode: str) -> None:
    """``mode`` "ep": experts split over 2 ranks (grouped kernel on both sides); "fsdp": FSDP2 over 2 ranks. Data
    rank 1's batch has no image or video: its towers run ``dummy_forward``, which keeps FSDP's collectives of the
    vision blocks in step and gives every vision parameter its (zero) share of the gradient."""
    state = ParallelState.build(ep=2 if mode == "ep" else 1)
    spec = parity_declaration(package)
    config = spec.config()
    if mode == "ep":  # experts that split over the 2 ranks
        config.text_config.num_experts = 8
    rows = _images_on_data_rank_0()
    base = GROUPED if mode == "ep" else OpsConfig()
    batch = spec.batch(rows)
    ref_out, ref_grads = _reference(spec, config, batch, base)

    model = _fresh(spec, config)
    if mode == "ep":
        apply_expert_parallel(model, state)
    attach_parallel(model, state, base)
    if mode == "fsdp":
        model = apply_fsdp(model, state)
    local = _split_rows(spec, rows, state.rank, state.world_size)
    assert ("pixel_values" in local) == (state.rank == 0)
    out = model(**local)
    share = slice(state.rank * 2, state.rank * 2 + 2)
    real, ref_real = local["attention_mask"].bool(), batch["attention_mask"][share].bool()
    assert_close(out.logits[real], ref_out.logits[share][ref_real], "logits at real tokens")
    assert_close(out.loss, ref_out.loss, "loss")
    if mode == "ep":
        assert_close(out.aux_loss, ref_out.aux_loss, "aux loss")
    out.loss.backward()
    if mode == "ep":
        average_gradients(model, state)
    assert_same_grads(full_state(model, state, grads=True), ref_grads)


def data_parallel_composed_vlm_matches_one_process(package: str) -> None:
    """FSDP2 over 2 data ranks on a composed (LLaVA-style) VLM: rank 0's two rows hold an image each, rank 1's are
    text only, so rank 1 runs the tower's ``dummy_forward``, which keeps FSDP's collectives of the vision blocks in
    step and gives every vision parameter its (zero) share of the gradient; the step equals one process on the four
    rows."""
    state = ParallelState.build()
    spec = parity_declaration(package)
    config = spec.config()
    layout = (1, 1, 0, 0)
    batch = spec.batch(config, layout)
    ref_out, ref_grads = _reference(spec, config, batch, OpsConfig())

    model = apply_fsdp(attach_parallel(_fresh(spec, config), state, OpsConfig()), state)
    share = slice(state.rank * 2, state.rank * 2 + 2)
    local = spec.batch(config, layout[share], first_row=share.start)
    assert ("pixel_values" in local) == (state.rank == 0)
    out = model(**local)
    real, ref_real = local["attention_mask"].bool(), batch["attention_mask"][share].bool()
    assert_close(out.logits[real], ref_out.logits[share][ref_real], "logits at real tokens")
    assert_close(out.loss, ref_out.loss, "loss")
    out.loss.backward()
    assert_same_grads(full_state(model, state, grads=True), ref_grads)


def sequence_parallel_omni_thinker_matches_one_process(package: str) -> None:
    """SP=2 on an Omni thinker (``package``: qwen2_5_omni, or qwen3_omni_moe with its router logits and aux loss),
    left-padded as its processor pads: row 0's audio in sp rank 0's slice and its image straddling the two slices,
    row 1's image in rank 1's; the audio features are scattered too."""
    state = ParallelState.build(sp=2)
    spec = parity_declaration(package)
    config = spec.config()
    batch = spec.omni_batch(
        [
            (
                f"{AUDIO} {_words(1, 4)} {OMNI_IMAGE} {_words(4, 12)}",
                [synthetic_image(16, 16, seed=1)],
                [],
                [synthetic_audio(0.2, seed=2)],
            ),
            (f"{_words(1, 12)} {OMNI_IMAGE} {_words(12, 14)}", [synthetic_image(8, 8, seed=3)], [], []),
        ]
    )
    ref_out, ref_grads = _reference(spec, config, batch, OpsConfig())

    model = _fresh(spec, config)
    positions, _ = model.get_position_id_func()(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        image_grid_thw=batch["image_grid_thw"],
        audio_seqlens=batch["feature_attention_mask"].sum(-1),
    )
    attach_parallel(model, state)
    local = shard_multimodal({**batch, "position_ids": positions}, state, pad_token_id=config.text_config.pad_token_id)
    audio_here = bool((local["input_ids"] == spec.token_id("<|AUDIO|>")).any())
    assert audio_here == (state.sp_rank == 0) and bool((local["input_ids"] == spec.token_id("<|IMAGE|>")).any())
    _check_sequence_parallel_step(model, local, state, batch, ref_out, ref_grads)


def sequence_parallel_audio_lm_matches_one_process(package: str) -> None:
    """SP=2 on a composed audio language model equals one process: the text is sharded with its 1-D positions,
    every rank runs the audio tower on the whole batch's clips, and each keeps the features of its own
    placeholders (found by ``input_ids == config.audio_token_id``); row 1's placeholders straddle the two slices."""
    state = ParallelState.build(sp=2)
    spec = parity_declaration(package)
    config = spec.config()
    batch = spec.batch("audio")
    ref_out, ref_grads = _reference(spec, config, batch, OpsConfig())

    model = _fresh(spec, config)
    rows, length = batch["input_ids"].shape
    positions = torch.arange(length).expand(rows, length)  # the text's own 1-D positions, as one process numbers them
    attach_parallel(model, state)
    local = shard_multimodal({**batch, "position_ids": positions}, state, pad_token_id=config.text_config.pad_token_id)
    placeholders = (local["input_ids"] == config.audio_token_id).sum(dim=1)
    assert bool(placeholders[1]), "row 1's placeholders reach both slices"
    _check_sequence_parallel_step(model, local, state, batch, ref_out, ref_grads)


def _padding_independent(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` as one row's step does not depend on how much left padding it gets in one batch or another: its
    real tokens numbered from 0 (``attention_mask``'s cumulative sum), and no label predicted from a padding
    position (a left-padded row's first token: the shifted loss would read a padding position's logits there)."""
    mask = batch["attention_mask"]
    after_padding = torch.nn.functional.pad(mask[:, :-1], (1, 0), value=0) == 0
    labels = batch["labels"].masked_fill(after_padding, -100)
    return {**batch, "labels": labels, "position_ids": (mask.cumsum(dim=1) - 1).clamp(min=0)}


def _padded_rows(side: str, *batches: dict[str, Any]) -> dict[str, Any]:
    """The rows of ``batches`` in one batch, each padded on ``side`` to the longest (ids with 0, mask 0, labels
    ignored), the clips of the batches that have them kept as they are."""
    length = max(part["input_ids"].shape[1] for part in batches)
    merged: dict[str, Any] = {}
    for key, fill in (("input_ids", 0), ("attention_mask", 0), ("labels", -100)):
        rows = []
        for part in batches:
            extra = length - part[key].shape[1]
            rows.append(torch.nn.functional.pad(part[key], (extra, 0) if side == "left" else (0, extra), value=fill))
        merged[key] = torch.cat(rows)
    for part in batches:
        merged.update({key: value for key, value in part.items() if key not in merged})
    return merged


def data_parallel_audio_lm_matches_one_process(package: str) -> None:
    """FSDP2 over 2 data ranks on a composed audio language model: rank 0's two rows hold a clip each, rank 1's are
    text only, so rank 1 runs the tower's ``dummy_forward``, which keeps FSDP's collectives of the audio blocks in
    step and gives every audio parameter its (zero) share of the gradient; the step equals one process on the four
    rows."""
    state = ParallelState.build()
    spec = parity_declaration(package)
    config = spec.config()
    shares = [spec.batch("audio"), spec.batch("text")]
    side = "left" if not bool(shares[0]["attention_mask"][:, 0].all()) else "right"
    batch = _padding_independent(_padded_rows(side, *shares))
    ref_out, ref_grads = _reference(spec, config, batch, OpsConfig())

    model = apply_fsdp(attach_parallel(_fresh(spec, config), state, OpsConfig()), state)
    local = _padding_independent(shares[state.rank])
    assert ("input_features" in local) == (state.rank == 0)
    out = model(**local)
    share = slice(state.rank * 2, state.rank * 2 + 2)
    real, ref_real = local["attention_mask"].bool(), batch["attention_mask"][share].bool()
    assert_close(out.logits[real], ref_out.logits[share][ref_real], "logits at real tokens")
    assert_close(out.loss, ref_out.loss, "loss")
    out.loss.backward()
    assert_same_grads(full_state(model, state, grads=True), ref_grads)
