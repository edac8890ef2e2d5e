"""Reading the real tokens of one sequence-parallel rank's slice off any form of attention mask.

Under sequence parallelism rank ``r`` holds positions ``r * chunk ...`` of each sequence, while a prepared
4-D mask covers the whole sequence (Ulysses attention needs it whole): the rank's own tokens are the mask's
diagonal at queries and keys ``r * chunk ...``, not at the last keys that ``real_token_mask`` reads
(``modelgraft.models.ops.kernels.token_mask.slice_real_token_mask``).
"""

from __future__ import annotations

import pytest
import torch

from modelgraft.models.ops.kernels.token_mask import real_token_mask, slice_real_token_mask

#: Two sequences of 8 positions, split over sp=2 ranks of 4: padding in both halves, differently per half.
REAL = torch.tensor(
    [
        [0, 0, 1, 1, 1, 1, 1, 1],  # left padding: rank 0's slice
        [1, 1, 1, 1, 1, 1, 0, 0],  # right padding: rank 1's slice
    ]
)
CHUNK = 4


def _causal(real: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """``[batch, 1, S, S]`` boolean causal (sliding within ``window``) mask over the real keys."""
    size = real.shape[-1]
    query, key = torch.arange(size).view(-1, 1), torch.arange(size).view(1, -1)
    allowed = (key <= query) & (True if window is None else query - key < window)
    return allowed & real.bool()[:, None, None, :]


def _additive(mask: torch.Tensor) -> torch.Tensor:
    return torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)


def _slice(rank: int) -> torch.Tensor:
    return REAL[:, rank * CHUNK : (rank + 1) * CHUNK].bool()


def _read(mask: object, rank: int, sp: int = 2) -> torch.Tensor | None:
    return slice_real_token_mask(mask, num_tokens=REAL.shape[0] * CHUNK, sp_rank=rank, sp=sp)


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_reads_its_own_slice_of_a_whole_sequence_mask(rank: int) -> None:
    assert torch.equal(_read(_causal(REAL), rank), _slice(rank))


def test_the_last_keys_rule_reads_rank_0s_real_tokens_as_padding() -> None:
    """Why the slice reading exists: read at the last keys, rank 0's causal queries see only future keys."""
    rank_0_queries = _causal(REAL)[:, :, :CHUNK]
    assert not real_token_mask(rank_0_queries).any()
    assert _slice(0).any()


@pytest.mark.parametrize("rank", [0, 1])
def test_a_mask_of_this_ranks_queries_is_read_at_the_ranks_keys(rank: int) -> None:
    own_queries = _causal(REAL)[:, :, rank * CHUNK : (rank + 1) * CHUNK]
    assert torch.equal(_read(own_queries, rank), _slice(rank))


def test_cached_keys_in_front_of_the_whole_sequence_are_skipped() -> None:
    mask = torch.cat((torch.ones(2, 1, 8, 3, dtype=torch.bool), _causal(REAL)), dim=-1)
    assert torch.equal(_read(mask, 1), _slice(1))


def test_an_additive_mask_gives_ones_for_real_tokens_in_its_dtype() -> None:
    read = _read(_additive(_causal(REAL)), 0)
    assert read.dtype == torch.float32
    assert torch.equal(read, _slice(0).float())


@pytest.mark.parametrize("rank", [0, 1])
def test_a_dict_of_whole_sequence_masks_gives_the_ranks_slice(rank: int) -> None:
    masks = {"full_attention": _causal(REAL), "sliding_attention": _additive(_causal(REAL, window=3))}
    assert torch.equal(_read(masks, rank).bool(), _slice(rank))


def test_a_dict_without_masks_means_no_padding() -> None:
    assert _read({"full_attention": None, "sliding_attention": None}, 0) is None
    assert _read(None, 0) is None


def test_a_dict_whose_masks_disagree_on_the_ranks_padding_is_refused() -> None:
    masks = {"full_attention": _causal(REAL), "sliding_attention": _causal(torch.ones_like(REAL))}
    with pytest.raises(ValueError, match="disagree on which tokens are padding"):
        _read(masks, 0)


def test_a_2d_slice_as_shard_sequence_gives_it_is_returned_unchanged() -> None:
    local = REAL[:, CHUNK:]
    assert _read(local, 1) is local


def test_a_2d_mask_of_the_whole_sequence_under_sp_is_refused_with_its_shape() -> None:
    with pytest.raises(ValueError, match=r"shape \(2, 8\): expected \[2, 4\].*sp rank 1 of 2"):
        _read(REAL, 1)


def test_a_4d_mask_of_neither_the_whole_sequence_nor_the_slice_is_refused_with_its_shape() -> None:
    with pytest.raises(ValueError, match=r"shape \(2, 1, 6, 8\): expected \[2, heads, 8, >= 8\]"):
        _read(_causal(REAL)[:, :, :6], 0)


def test_a_4d_mask_with_fewer_keys_than_the_whole_sequence_is_refused() -> None:
    with pytest.raises(ValueError, match=r"shape \(2, 1, 4, 4\)"):
        _read(_causal(REAL)[:, :, :4, :4], 0)


def test_a_mask_whose_batch_does_not_divide_the_ranks_tokens_is_refused() -> None:
    with pytest.raises(ValueError, match=r"shape \(3, 1, 8, 8\).*batch divides the 8 tokens"):
        _read(torch.ones(3, 1, 8, 8, dtype=torch.bool), 0)


def test_a_mask_without_per_token_padding_is_refused() -> None:
    with pytest.raises(TypeError, match="BlockMask"):
        _read({"full_attention": object()}, 0)


def test_an_sp_rank_outside_the_group_is_refused() -> None:
    with pytest.raises(ValueError, match="sp_rank must be in"):
        _read(_causal(REAL), 2)


@pytest.mark.parametrize(
    "mask",
    [REAL, _causal(REAL), _additive(_causal(REAL)), torch.cat((torch.ones(2, 1, 8, 2).bool(), _causal(REAL)), -1)],
    ids=["2d", "4d-bool", "4d-additive", "4d-cached-prefix"],
)
def test_with_one_rank_it_reads_what_real_token_mask_reads(mask: torch.Tensor) -> None:
    assert torch.equal(slice_real_token_mask(mask, num_tokens=16), real_token_mask(mask))
