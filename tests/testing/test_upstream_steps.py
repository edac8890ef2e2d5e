"""``check_parity`` computes upstream's side once per inputs, and only for inputs that are the same in every respect."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from modelgraft.models.ops import OpsConfig
from modelgraft.models.testing import causal_lm_batch, check_parity
from modelgraft.models.testing.parity import eager_slots_on_one_thread
from modelgraft.models.testing.upstream_steps import UPSTREAM_STEPS, UpstreamSteps, step_key

SIZES = {
    "vocab_size": 64,
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
}


def _config(**overrides: object) -> LlamaConfig:
    return LlamaConfig(**{**SIZES, "num_key_value_heads": 1, "attn_implementation": "eager", **overrides})


def _key(config: LlamaConfig | None = None, batch: dict | None = None, **options: object) -> str:
    config = config or _config()
    batch = batch if batch is not None else causal_lm_batch(config, batch_size=2, seq_len=5, seed=0)
    settings = {"seed": 0, "dtype": torch.float32, "device": "cpu", **options}
    return step_key(LlamaForCausalLM, config, batch, **settings)  # type: ignore[arg-type]


@pytest.fixture
def counted_upstream_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Whether each ``check_parity`` call computed upstream's side (True) or reused it (False)."""
    computed: list[bool] = []
    original = UpstreamSteps.get_or_compute

    def counting(self: UpstreamSteps, key: str, compute):  # type: ignore[no-untyped-def]
        weights, step, fresh = original(self, key, compute)
        computed.append(fresh)
        return weights, step, fresh

    monkeypatch.setattr(UpstreamSteps, "get_or_compute", counting)
    UPSTREAM_STEPS.clear()
    with eager_slots_on_one_thread():
        yield computed
    UPSTREAM_STEPS.clear()


def test_equal_inputs_give_equal_keys() -> None:
    assert _key() == _key()


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"config": _config(rms_norm_eps=1e-5)}, id="a-config-value"),
        pytest.param({"config": _config(attn_implementation="sdpa")}, id="the-attention-implementation"),
        pytest.param({"seed": 1}, id="the-seed"),
        pytest.param({"dtype": torch.bfloat16}, id="the-dtype"),
    ],
)
def test_a_different_input_gives_another_key(change: dict) -> None:
    assert _key(**change) != _key()


def test_one_token_of_the_batch_changed_gives_another_key() -> None:
    batch = causal_lm_batch(_config(), batch_size=2, seq_len=5, seed=0)
    changed = {**batch, "input_ids": batch["input_ids"].clone()}
    changed["input_ids"][1, 3] += 1
    assert _key(batch=changed) != _key(batch=batch)


def test_the_thread_count_is_part_of_the_key() -> None:
    threads = torch.get_num_threads()
    one = _key()
    torch.set_num_threads(threads + 1)
    try:
        assert _key() != one
    finally:
        torch.set_num_threads(threads)


def test_a_config_that_does_not_pickle_has_no_key_and_is_computed_every_time() -> None:
    config = _config()
    config.unpicklable = lambda: None  # type: ignore[attr-defined]
    assert _key(config=config) is None
    steps = UpstreamSteps()
    assert [steps.get_or_compute(None, lambda: ({}, "step"))[2] for _ in range(2)] == [True, True]


def test_the_oldest_entry_goes_first_when_the_map_is_full() -> None:
    steps = UpstreamSteps(kept=2)
    for key in ("a", "b", "c"):
        steps.get_or_compute(key, lambda key=key: ({}, key))
    assert steps.get_or_compute("a", lambda: ({}, "again"))[1:] == ("again", True)
    assert steps.get_or_compute("c", lambda: ({}, "again"))[1:] == ("c", False)


def test_a_repeated_parity_run_reuses_upstreams_side_and_a_changed_one_does_not(
    counted_upstream_steps: list[bool],
) -> None:
    config = _config(tie_word_embeddings=False)
    ops = OpsConfig({"rms_norm": "eager"})
    check_parity(config, "LlamaForCausalLM", model_type="llama")
    check_parity(config, "LlamaForCausalLM", model_type="llama", ops=ops)
    check_parity(config, "LlamaForCausalLM", model_type="llama", dtype=torch.bfloat16)
    assert counted_upstream_steps == [True, False, True]


def test_a_reused_upstream_side_still_catches_a_wrong_kernel(counted_upstream_steps: list[bool]) -> None:
    config = _config()
    check_parity(config, "LlamaForCausalLM", model_type="llama")

    def norm_without_weight(
        hidden_states: torch.Tensor, weight: torch.Tensor, eps: float, **_: object
    ) -> torch.Tensor:
        variance = hidden_states.float().pow(2).mean(-1, keepdim=True)
        return (hidden_states.float() * torch.rsqrt(variance + eps)).to(hidden_states.dtype)

    with pytest.raises(AssertionError, match="exceeds"):
        check_parity(config, "LlamaForCausalLM", model_type="llama", kernels={"rms_norm": norm_without_weight})
    assert counted_upstream_steps == [True, False]
