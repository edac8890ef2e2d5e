"""VLMs and the Omni thinker under Ulysses, expert parallelism and FSDP2, each equal to one process (gloo, CPU ranks).

The scenarios are in ``tests/distributed/multimodal_scenarios.py``; each test starts its 2 ranks once
(``launch.spawn``) and fails with the traceback of the first rank that fails, or at the timeout when a rank
waits in a collective the other never enters.
"""

from __future__ import annotations

import pytest
import torch

from modelgraft.models.distributed.launch import spawn
from modelgraft.models.distributed.multimodal import packed_position_ids

from . import multimodal_scenarios

TIMEOUT = 150.0


def test_sp2_on_qwen2_5_vl_with_the_images_on_one_rank_matches_one_process() -> None:
    spawn(
        multimodal_scenarios.sequence_parallel_vlm_matches_one_process,
        2,
        "qwen2_5_vl",
        "images_on_sp_rank_0",
        timeout=TIMEOUT,
    )


def test_sp2_on_qwen3_vl_with_images_across_both_ranks_and_deepstack_matches_one_process() -> None:
    """Each rank's image features are not the batch's first: the kernel must find them by their ordinals."""
    spawn(
        multimodal_scenarios.sequence_parallel_vlm_matches_one_process,
        2,
        "qwen3_vl",
        "images_across_both_sp_ranks",
        timeout=TIMEOUT,
    )


def test_sp2_on_llava_onevision_with_the_images_on_one_rank_matches_one_process() -> None:
    """A composed VLM: its anyres tiles' features, all of them on sp rank 0's slice."""
    spawn(
        multimodal_scenarios.sequence_parallel_composed_vlm_matches_one_process,
        2,
        "llava_onevision",
        "images_on_sp_rank_0",
        timeout=TIMEOUT,
    )


def test_sp2_on_internvl_with_images_across_both_ranks_matches_one_process() -> None:
    """A composed VLM whose tower is its own (InternViT) and whose features come stacked per image."""
    spawn(
        multimodal_scenarios.sequence_parallel_composed_vlm_matches_one_process,
        2,
        "internvl",
        "images_across_both_sp_ranks",
        timeout=TIMEOUT,
    )


def test_sp2_on_mistral_large4_with_the_images_on_one_rank_matches_one_process() -> None:
    """A composed VLM + MoE: a Pixtral tower fed each image's size, and a text model of its own module whose
    routed experts go through the composed recipe's guard; sp rank 1 runs the tower's dummy_forward."""
    spawn(
        multimodal_scenarios.sequence_parallel_composed_vlm_matches_one_process,
        2,
        "mistral_large4",
        "images_on_sp_rank_0",
        timeout=TIMEOUT,
    )


def test_fsdp2_on_llava_onevision_with_a_rank_without_images_matches_one_process() -> None:
    """A composed VLM's dummy_forward on the rank without images: its tower and projector still run under FSDP."""
    spawn(multimodal_scenarios.data_parallel_composed_vlm_matches_one_process, 2, "llava_onevision", timeout=TIMEOUT)


def test_ep2_on_qwen3_vl_moe_with_a_rank_without_images_matches_one_process() -> None:
    spawn(multimodal_scenarios.data_parallel_vlm_matches_one_process, 2, "qwen3_vl_moe", "ep", timeout=TIMEOUT)


def test_fsdp2_on_qwen2_5_vl_with_a_rank_without_images_matches_one_process() -> None:
    spawn(multimodal_scenarios.data_parallel_vlm_matches_one_process, 2, "qwen2_5_vl", "fsdp", timeout=TIMEOUT)


def test_sp2_on_the_qwen2_5_omni_thinker_with_audio_and_images_matches_one_process() -> None:
    spawn(multimodal_scenarios.sequence_parallel_omni_thinker_matches_one_process, 2, "qwen2_5_omni", timeout=TIMEOUT)


def test_sp2_on_the_qwen3_omni_moe_thinker_with_audio_images_and_its_aux_loss_matches_one_process() -> None:
    """The MoE thinker: its router logits and aux loss come from both ranks' tokens, as one process's do."""
    spawn(
        multimodal_scenarios.sequence_parallel_omni_thinker_matches_one_process, 2, "qwen3_omni_moe", timeout=TIMEOUT
    )


def test_sp2_on_glmasr_with_a_clips_placeholders_across_both_ranks_matches_one_process() -> None:
    """A composed audio language model: its clips' features, each rank's placeholders' own."""
    spawn(multimodal_scenarios.sequence_parallel_audio_lm_matches_one_process, 2, "glmasr", timeout=TIMEOUT)


def test_fsdp2_on_glmasr_with_a_rank_without_audio_matches_one_process() -> None:
    spawn(multimodal_scenarios.data_parallel_audio_lm_matches_one_process, 2, "glmasr", timeout=TIMEOUT)


def test_packed_position_ids_number_the_text_row_from_zero_in_each_document() -> None:
    first, second = torch.arange(6).view(3, 1, 2), torch.arange(9).view(3, 1, 3) + 10
    packed = packed_position_ids([first, second])
    assert packed[0, 0].tolist() == [0, 1, 0, 1, 2]
    assert torch.equal(packed[1:], torch.cat((first, second), dim=-1))


@pytest.mark.parametrize("shape", [(3, 2, 4), (4, 1, 4), (1, 4)], ids=["two-rows", "four-rows", "text-only"])
def test_packed_position_ids_refuse_a_document_that_is_not_one_row_of_three_naming_it(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"document 1 has position ids of shape"):
        packed_position_ids([torch.zeros(3, 1, 2, dtype=torch.long), torch.zeros(shape, dtype=torch.long)])
