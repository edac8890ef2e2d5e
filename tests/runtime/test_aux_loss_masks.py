"""The MoE aux loss over real tokens, whatever form the attention mask takes.

transformers 5 lets a caller pass masks already prepared for attention: a 4-D mask, or a dict of them by
attention type. Upstream's ``load_balancing_loss_func`` fails on both; the slot's reference kernel
(``modelgraft.models.ops.kernels.eager.load_balancing_loss``) reads the real tokens off the masks' diagonal
(``modelgraft.models.ops.kernels.token_mask``). Where upstream is defined (None, a 2-D mask) the kernel stays equal to
it bit for bit.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

from modelgraft.models.ops import load_balancing_loss_slot
from modelgraft.models.ops.binding import restore_bindings
from modelgraft.models.ops.kernels import eager
from modelgraft.models.ops.kernels.token_mask import real_token_mask

#: One layer, one sequence of three tokens, three experts; the third token is padding. Router probabilities
#: per token (logits are their logs, so the softmax gives them back), top-1 choice in brackets:
PROBS = [[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]]  # [expert 0], [expert 1], [expert 2]
REAL = [True, True, False]


def _router_logits() -> tuple[torch.Tensor, ...]:
    return (torch.tensor(PROBS).log(),)


def _hand_computed() -> float:
    """Switch-Transformer loss over the two real tokens: E * sum_e f_e * P_e.

    f_e: the share of real tokens whose top-1 is e: expert 0 one of two, expert 1 one of two, expert 2 none.
    P_e: the mean router probability of e over the real tokens.
    """
    num_experts = 3
    f = [1 / 2, 1 / 2, 0 / 2]
    p = [(0.5 + 0.1) / 2, (0.3 + 0.6) / 2, (0.2 + 0.3) / 2]
    return num_experts * sum(fe * pe for fe, pe in zip(f, p, strict=True))  # 3 * (0.15 + 0.225) = 1.125


def _causal_bool(real: list[bool], window: int | None = None) -> torch.Tensor:
    """``[1, 1, S, S]``: query i attends key j <= i (within ``window``) when key j is real."""
    size = len(real)
    rows = []
    for i in range(size):
        rows.append([j <= i and (window is None or i - j < window) and real[j] for j in range(size)])
    return torch.tensor(rows).view(1, 1, size, size)


def _additive(mask: torch.Tensor) -> torch.Tensor:
    """The eager-attention form of a boolean mask: 0 where it attends, the dtype's minimum elsewhere."""
    return torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)


def test_the_hand_computed_value_is_what_upstream_gives_for_the_2d_mask() -> None:
    mask = torch.tensor([REAL], dtype=torch.long)
    assert math.isclose(float(load_balancing_loss_func(_router_logits(), 3, 1, mask)), 1.125, rel_tol=1e-6)
    assert math.isclose(_hand_computed(), 1.125, rel_tol=1e-12)


@pytest.mark.parametrize("form", ["bool", "additive"])
def test_a_dict_of_4d_masks_counts_only_the_real_tokens(form: str) -> None:
    full, sliding = _causal_bool(REAL), _causal_bool(REAL, window=2)
    if form == "additive":
        full, sliding = _additive(full), _additive(sliding)
    masks = {"full_attention": full, "sliding_attention": sliding}
    loss = eager.load_balancing_loss(_router_logits(), 3, 1, masks)
    assert math.isclose(float(loss), _hand_computed(), rel_tol=1e-6)
    # The padding token's own choice (expert 2) would change it: all three tokens give 3 * (1/3) * (0.8/3 + 1.1/3 + 1.1/3).
    assert not math.isclose(float(eager.load_balancing_loss(_router_logits(), 3, 1, None)), _hand_computed())


def test_a_bare_4d_mask_and_a_cached_prefix() -> None:
    # Two cached positions in front: [1, 1, 3 queries, 5 keys]; the queries are the last three keys.
    mask = torch.zeros(1, 1, 3, 5, dtype=torch.bool)
    mask[..., :2] = True
    mask[..., 2:] = _causal_bool(REAL)
    loss = eager.load_balancing_loss(_router_logits(), 3, 1, mask)
    assert math.isclose(float(loss), _hand_computed(), rel_tol=1e-6)


def _random_case(seed: int) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    batch, seq, experts = 3, 7, 6
    logits = tuple(torch.randn(batch * seq, experts, generator=generator) for _ in range(2))
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, :3] = 0  # left padding
    mask[2, 5:] = 0  # right padding
    return logits, mask


@pytest.mark.parametrize("with_mask", [False, True], ids=["no-mask", "2d-mask"])
def test_where_upstream_is_defined_the_reference_is_upstream_bit_for_bit(with_mask: bool) -> None:
    logits, mask = _random_case(0)
    mask = mask if with_mask else None
    assert torch.equal(eager.load_balancing_loss(logits, 6, 2, mask), load_balancing_loss_func(logits, 6, 2, mask))


def test_a_dict_gives_upstreams_loss_on_the_2d_mask_it_was_built_from() -> None:
    logits, mask = _random_case(1)
    real = [[bool(v) for v in row] for row in mask.tolist()]
    full = torch.cat([_causal_bool(row) for row in real])
    sliding = _additive(torch.cat([_causal_bool(row, window=3) for row in real]))
    masks = {"full_attention": full, "sliding_attention": sliding}
    assert torch.equal(eager.load_balancing_loss(logits, 6, 2, masks), load_balancing_loss_func(logits, 6, 2, mask))


def test_upstream_fails_on_a_dict() -> None:
    """Why the dict case is the reference kernel's own: upstream's function has no behaviour to keep there."""
    with pytest.raises(AttributeError, match="reshape"):
        load_balancing_loss_func(_router_logits(), 3, 1, {"full_attention": _causal_bool(REAL)})


def test_a_dict_without_masks_means_no_padding() -> None:
    masks = {"full_attention": None, "sliding_attention": None}
    assert real_token_mask(masks) is None
    assert torch.equal(
        eager.load_balancing_loss(_router_logits(), 3, 1, masks), load_balancing_loss_func(_router_logits(), 3, 1)
    )


def test_masks_that_disagree_on_padding_are_refused() -> None:
    masks = {"full_attention": _causal_bool(REAL), "sliding_attention": _causal_bool([True, True, True])}
    with pytest.raises(ValueError, match="disagree on which tokens are padding"):
        real_token_mask(masks)


def test_a_mask_without_per_token_padding_is_refused() -> None:
    with pytest.raises(TypeError, match="BlockMask"):
        real_token_mask({"full_attention": object()})


def _gpt_oss_with_padding_and_its_mask_dict():
    """A gpt_oss pair (upstream, generated), a padded batch, and the dict of 4-D masks built from its 2-D mask."""
    from transformers import GptOssConfig
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    from modelgraft.models.loader import get_model_class
    from modelgraft.models.testing import build_pair, causal_lm_batch, tiny_config

    config = tiny_config(GptOssConfig, sliding_window=3)
    classes = [get_model_class("gpt_oss", "GptOssForCausalLM", use_hf=use_hf) for use_hf in (True, False)]
    pair = build_pair(config, *classes, seed=0)
    batch = causal_lm_batch(config, seed=0)
    mask = batch["attention_mask"]
    assert not mask.all(), "the batch must hold padding"
    embeds = pair.upstream.get_input_embeddings()(batch["input_ids"])
    kwargs = {"config": config, "inputs_embeds": embeds, "attention_mask": mask, "cache": None}
    masks = {
        "full_attention": create_causal_mask(**kwargs),
        "sliding_attention": create_sliding_window_causal_mask(**kwargs),
    }
    assert all(m is not None and m.dim() == 4 for m in masks.values())
    return pair, batch, masks


def test_gpt_oss_with_a_dict_of_masks_gets_upstreams_aux_loss_of_the_2d_mask() -> None:
    """A model that takes a dict of masks (gpt_oss): through its slot, the aux loss of the padded batch."""
    pair, batch, masks = _gpt_oss_with_padding_and_its_mask_dict()
    with torch.no_grad():
        want = pair.upstream(**batch, output_router_logits=True)
        saved = load_balancing_loss_slot.bound
        load_balancing_loss_slot.bind(eager.load_balancing_loss)
        try:
            got = pair.generated(**{**batch, "attention_mask": masks}, output_router_logits=True)
        finally:
            restore_bindings({"load_balancing_loss": saved})
    assert torch.equal(got.logits, want.logits)
    assert torch.equal(got.aux_loss, want.aux_loss)


def test_gpt_oss_unbound_with_a_dict_of_masks_gets_upstreams_aux_loss_of_the_2d_mask() -> None:
    """Without a kernel bound, the generated guard hands upstream's own function the real tokens of the dict."""
    pair, batch, masks = _gpt_oss_with_padding_and_its_mask_dict()
    assert not load_balancing_loss_slot.use_non_eager_impl
    with torch.no_grad():
        want = pair.upstream(**batch, output_router_logits=True)
        got = pair.generated(**{**batch, "attention_mask": masks}, output_router_logits=True)
        with pytest.raises(AttributeError):
            pair.upstream(**{**batch, "attention_mask": masks}, output_router_logits=True)
    assert torch.equal(got.logits, want.logits)
    assert torch.equal(got.aux_loss, want.aux_loss)
