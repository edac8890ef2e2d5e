"""Ulysses attention's masks and head split, against one process (gloo, 2 CPU ranks, sp=2).

* Packed documents (position ids that restart inside a row, no attention mask) are refused on every rank,
  wherever the restart falls: inside a rank's slice, or exactly on the boundary between two slices; with
  ``shard_sequence(..., packed=True)`` and a model under ``attach_ulysses`` they match one process.
* The padding ``shard_sequence`` adds reaches sdpa as no mask at all, and the model still gives one
  process's logits, loss and gradients; left padding, and rows padded to different lengths, keep their mask.
* Key/value heads that do not divide by sp are repeated only up to lcm(kv heads, sp).

Each spawned test starts its ranks once (starting ranks is the slow part on 2 cores).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, PreTrainedConfig, Qwen3Config

from modelgraft.models.distributed import (
    ParallelState,
    average_gradients,
    full_state,
    gather_sequence,
    register_ulysses,
    shard_multimodal,
    shard_sequence,
)
from modelgraft.models.distributed import ulysses as ulysses_module
from modelgraft.models.distributed.launch import spawn
from modelgraft.models.distributed.scope import attach_parallel
from modelgraft.models.distributed.ulysses import DOCUMENT_IDS, kv_head_repeats
from modelgraft.models.loader import build_model
from modelgraft.models.testing import causal_lm_batch, seed_everything, tiny_config

TIMEOUT = 150.0
RTOL, ATOL = 1e-4, 1e-5
ARCHITECTURES = {"llama": (LlamaConfig, "LlamaForCausalLM"), "qwen3": (Qwen3Config, "Qwen3ForCausalLM")}


def _config(name: str, attention: str, **overrides: Any) -> PreTrainedConfig:
    return tiny_config(ARCHITECTURES[name][0], use_cache=False, attn_implementation=attention, **overrides)


def _model(name: str, config: PreTrainedConfig) -> torch.nn.Module:
    seed_everything(0)
    return build_model(config, architecture=ARCHITECTURES[name][1])


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def _attention_masks(model: torch.nn.Module) -> list[Any]:
    """What every attention layer receives as its mask, call by call."""
    seen: list[Any] = []
    for layer in model.model.layers:
        layer.self_attn.register_forward_pre_hook(
            lambda module, args, kwargs: seen.append(kwargs.get("attention_mask")), with_kwargs=True
        )
    return seen


def _matches_one_process(
    name: str, batch: dict[str, torch.Tensor], state: ParallelState, *, grads: bool = True, **overrides: Any
) -> torch.nn.Module:
    """Run ``batch`` in one process (sdpa) and under Ulysses; compare real tokens' logits, the loss and (with
    ``grads``) every gradient. Returns the parallel model (its hooks saw the forward)."""
    reference = _model(name, _config(name, "sdpa", **overrides))
    ref_out = reference(**batch)
    model = attach_parallel(_model(name, _config(name, "sdpa", **overrides)), state)
    masks = _attention_masks(model)
    out = model(**shard_sequence(batch, state))
    length = batch["input_ids"].shape[1]
    real = batch.get("attention_mask", torch.ones_like(batch["input_ids"])).bool()
    logits = gather_sequence(out.logits, state, length=length)
    _close(logits[real], ref_out.logits[real], "logits of real tokens")
    _close(out.loss, ref_out.loss, "loss")
    if grads:
        ref_out.loss.backward()
        out.loss.backward()
        average_gradients(model, state)
        got = full_state(model, state, grads=True)
        for param_name, param in reference.named_parameters():
            assert param.grad.abs().sum() > 0, f"reference gradient of {param_name} is zero: a vacuous check"
            _close(got[param_name], param.grad, f"gradient of {param_name}")
    model.seen_masks = masks
    return model


# -- spawned: packed documents ---------------------------------------------------------------------------------
def _packed(positions: list[int]) -> dict[str, torch.Tensor]:
    config = _config("llama", "sdpa")
    batch = causal_lm_batch(config, batch_size=2, seq_len=len(positions))
    return {"input_ids": batch["input_ids"], "position_ids": torch.tensor([list(range(len(positions))), positions])}


def packed_documents_are_refused_on_every_rank() -> None:
    state = ParallelState.build(sp=2)
    # 12 positions, 6 per rank: a restart inside rank 1's slice (position 8), and one exactly on the boundary (6).
    for positions in ([0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]):
        with pytest.raises(ValueError, match=r"packed sequences are not supported .* row\(s\) \[1\]"):
            shard_sequence(_packed(positions), state)
    # A slice given straight to the model, without the 2-D mask (so transformers would read packing from the
    # slice): refused by the mask builder on every rank, whether its slice restarts or not.
    model = attach_parallel(_model("llama", _config("llama", "sdpa")), state)
    local = {key: value[:, state.sp_rank * 6 : state.sp_rank * 6 + 6] for key, value in _packed([0] * 12).items()}
    local["position_ids"] = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 1, 2, 0, 1, 2]]) + 6 * state.sp_rank
    with pytest.raises(ValueError, match="needs the 2-D attention mask of the rank's slice"):
        model(**local)
    # One document per row with the same position ids given explicitly runs (the guard let every rank on).
    whole = _packed(list(range(12)))
    whole["attention_mask"] = torch.ones(2, 12, dtype=torch.long)
    whole["labels"] = whole["input_ids"].clone()
    _matches_one_process("llama", whole, state, grads=False)


def test_packed_documents_are_refused_on_every_rank_wherever_the_restart_falls() -> None:
    spawn(packed_documents_are_refused_on_every_rank, 2, timeout=TIMEOUT)


def packed_documents_match_one_process() -> None:
    """11 positions (padded to 12): row 0 restarts on the slice boundary (6), row 1 inside rank 1's slice (7)."""
    state = ParallelState.build(sp=2)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3]])
    for name, attention in (("llama", "eager"), ("qwen3", "sdpa")):
        config = _config(name, attention)
        ids = causal_lm_batch(config, batch_size=2, seq_len=11)["input_ids"]
        batch = {"input_ids": ids, "position_ids": positions, "labels": ids.clone()}
        reference = _model(name, config)
        expected = reference(**batch)  # one process: transformers reads the restarts as documents
        expected.loss.backward()
        model = attach_parallel(_model(name, _config(name, attention)), state)
        local = shard_sequence(batch, state, packed=True)
        assert local[DOCUMENT_IDS].tolist() == [[0] * 6 + [1] * 5 + [2], [0] * 7 + [1] * 4 + [2]]
        out = model(**local)
        _close(gather_sequence(out.logits, state, length=11), expected.logits, f"{name} logits of packed rows")
        _close(out.loss, expected.loss, f"{name} loss of packed rows")
        out.loss.backward()
        average_gradients(model, state)
        got = full_state(model, state, grads=True)
        for param_name, param in reference.named_parameters():
            _close(got[param_name], param.grad, f"{name}: gradient of {param_name}")

    # A model whose mask never sees the document ids (process-wide names, no attach_ulysses hook) refuses them.
    register_ulysses(state)
    config = _config("llama", "ulysses_sdpa")
    ids = causal_lm_batch(config, batch_size=2, seq_len=11)["input_ids"]
    local = shard_sequence({"input_ids": ids, "position_ids": positions}, state, packed=True)
    with pytest.raises(NotImplementedError, match="packed_document_ids .* that its mask never saw"):
        _model("llama", config)(**local)


def test_packed_documents_under_attach_ulysses_match_one_process_and_are_refused_without_it() -> None:
    spawn(packed_documents_match_one_process, 2, timeout=TIMEOUT)


# -- spawned: padding without a mask, left padding with one, kv heads ---------------------------------------------
def padding_and_kv_heads_match_one_process() -> None:
    state = ParallelState.build(sp=2)
    config = _config("qwen3", "sdpa")
    # 11 positions, no mask given (padded to 12 for sp=2 by shard_sequence): sdpa gets no mask in any layer.
    batch = causal_lm_batch(config, seq_len=11)
    batch = {"input_ids": batch["input_ids"], "labels": batch["input_ids"].clone()}
    model = _matches_one_process("qwen3", batch, state)
    assert model.seen_masks and all(mask is None for mask in model.seen_masks), [
        None if m is None else tuple(m.shape) for m in model.seen_masks
    ]

    # Left padding is not hidden by causality, nor is a row padded more than the others (the last row here):
    # their mask is built, over the whole (padded) sequence.
    left = causal_lm_batch(config, seq_len=11)
    left["attention_mask"][1, :2] = 0
    left["labels"][1, :3] = -100
    model = _matches_one_process("qwen3", left, state, grads=False)
    assert {tuple(mask.shape) for mask in model.seen_masks} == {(4, 1, 12, 12)}

    # One k/v head for 6 query heads over sp=2: repeated to 2 heads (lcm(1, 2)), not to 6.
    exchanged: list[int] = []
    original = ulysses_module.sequence_to_heads

    def recording(x: torch.Tensor, group: Any) -> torch.Tensor:
        exchanged.append(x.shape[1])
        return original(x, group)

    ulysses_module.sequence_to_heads = recording
    try:
        _matches_one_process("qwen3", causal_lm_batch(config, seq_len=11), state, num_key_value_heads=1)
    finally:
        ulysses_module.sequence_to_heads = original
    assert sorted(set(exchanged)) == [2, 6], exchanged  # keys and values: 2 heads; queries: 6


def test_sp_padding_reaches_sdpa_as_no_mask_and_kv_heads_repeat_to_lcm_matching_one_process() -> None:
    spawn(padding_and_kv_heads_match_one_process, 2, timeout=TIMEOUT)


# -- one process ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kv_heads", "query_heads", "sp", "repeats"),
    [(2, 6, 2, 1), (1, 6, 2, 2), (2, 8, 4, 2), (3, 12, 4, 4), (4, 16, 8, 2), (4, 12, 3, 3)],
)
def test_kv_heads_repeat_to_the_least_multiple_of_sp(kv_heads: int, query_heads: int, sp: int, repeats: int) -> None:
    assert kv_head_repeats(kv_heads, query_heads, sp) == repeats


def test_kv_heads_that_cannot_split_evenly_are_refused() -> None:
    with pytest.raises(ValueError, match="must divide by lcm"):
        kv_head_repeats(2, 6, 4)


@pytest.mark.parametrize("sp_rank", [0, 1])
@pytest.mark.parametrize(
    "positions",
    [[0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]],
    ids=["inside", "boundary"],
)
def test_shard_sequence_reads_packed_documents_from_the_whole_row_on_every_sp_rank(
    positions: list[int], sp_rank: int
) -> None:
    """One process plays each sp rank (a stand-in state): the rank whose slice has no restart refuses too."""
    with pytest.raises(ValueError, match=r"packed sequences are not supported under Ulysses .*sp=2"):
        shard_sequence(_packed(positions), SimpleNamespace(sp=2, sp_rank=sp_rank))


def test_shard_sequence_keeps_restarting_positions_with_a_mask_and_adds_a_mask_without_one() -> None:
    """With a 2-D mask one process does not read documents from position ids: nothing to refuse. Without one,
    under sp > 1, a mask is added, so transformers never reads documents from a slice's position ids."""
    batch = _packed([0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5])
    masked = shard_sequence({**batch, "attention_mask": torch.ones(2, 12)}, SimpleNamespace(sp=2, sp_rank=1))
    assert masked["position_ids"].tolist() == [[6, 7, 8, 9, 10, 11], [0, 1, 2, 3, 4, 5]]
    plain = shard_sequence({"input_ids": batch["input_ids"]}, SimpleNamespace(sp=2, sp_rank=0))
    assert plain["attention_mask"].tolist() == [[1] * 6, [1] * 6]


@pytest.mark.parametrize("name", ["mm_token_type_ids", "token_type_ids"])
def test_shard_multimodal_slices_per_token_types_with_the_ids_padded_to_the_sharded_length(name: str) -> None:
    """Gemma3's token_type_ids are sliced like Qwen-VL's mm_token_type_ids: its forward gathers them back."""
    types = torch.tensor([[0, 1, 1, 0, 1]])
    batch = {"input_ids": torch.arange(5)[None], "attention_mask": torch.ones(1, 5), name: types}
    slices = [shard_multimodal(batch, SimpleNamespace(sp=2, sp_rank=rank))[name] for rank in (0, 1)]
    assert [piece.tolist() for piece in slices] == [[[0, 1, 1]], [[0, 1, 0]]]
