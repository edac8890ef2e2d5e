"""The ``shared_keys`` indexer kernels: the reference's keys and scores bit for bit, without its per-query key copy.

Both indexers feed a top-k, so a kernel is held to the eager reference exactly (``torch.equal``): the DSA
kernel's indices, and the lightning kernel's scores (its caller takes the top-k). Cases with ``index_topk``
at least ``T`` return every key, ordered by score, so they compare the whole ranking, not only the winners.
The per-query copy that the kernel exists to avoid is checked by the shapes the profiler records, not by time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from modelgraft.models.ops import SLOTS, OpsConfig, bound_ops, current_ops
from modelgraft.models.ops.kernels import eager, indexers

HIDDEN = 24


@dataclass(frozen=True)
class Case:
    """One indexer call: sizes, the dtype the model runs in, and how the queries and the mask arrive."""

    batch: int = 2
    queries: int = 9
    keys: int = 9
    heads: int = 4
    head_dim: int = 16
    index_topk: int = 5
    dtype: torch.dtype = torch.float32
    additive_mask: bool = False
    strided_q: bool = False  # q a transposed view of [B, h, S, d], as a head-major projection would give
    shared_keys: bool = False  # one key tensor expanded over the batch (batch stride 0)
    first_position: int = 0  # position of the first query; the keys before it are cached ones (T > S)


DSA_CASES = {
    "causal-no-mask": Case(),
    "one-head": Case(heads=1),
    "decode-more-keys-than-queries": Case(queries=3, keys=12, first_position=9),
    "additive-mask": Case(additive_mask=True),
    "strided-q": Case(strided_q=True),
    "bf16": Case(dtype=torch.bfloat16),
    "bf16-additive-mask": Case(dtype=torch.bfloat16, additive_mask=True),
    "whole-ranking": Case(queries=6, keys=10, first_position=4, index_topk=10),
    "fewer-keys-than-topk": Case(queries=4, keys=4, index_topk=7),
    "one-batch-row": Case(batch=1),
    "one-query": Case(queries=1, keys=12, first_position=11),
    "keys-shared-across-batch": Case(shared_keys=True),
}

LIGHTNING_CASES = {
    "square": Case(),
    "one-head": Case(heads=1),
    "more-queries-than-keys": Case(queries=11, keys=5),
    "more-keys-than-queries": Case(queries=3, keys=12),
    "strided-q": Case(strided_q=True),
    "bf16": Case(dtype=torch.bfloat16),
    "one-key": Case(keys=1),
    "one-batch-row": Case(batch=1),
    "one-query": Case(queries=1),
    "keys-shared-across-batch": Case(shared_keys=True),
}


def _q(case: Case, generator: torch.Generator) -> torch.Tensor:
    if case.strided_q:
        heads_first = torch.randn(case.batch, case.heads, case.queries, case.head_dim, generator=generator)
        q = heads_first.to(case.dtype).transpose(1, 2)
        assert not q.is_contiguous()
        return q
    return torch.randn(case.batch, case.queries, case.heads, case.head_dim, generator=generator).to(case.dtype)


def _keys(case: Case, generator: torch.Generator) -> torch.Tensor:
    if case.shared_keys:
        return torch.randn(1, case.keys, case.head_dim, generator=generator).to(case.dtype).expand(case.batch, -1, -1)
    return torch.randn(case.batch, case.keys, case.head_dim, generator=generator).to(case.dtype)


def _position_ids(case: Case) -> torch.Tensor:
    positions = torch.arange(case.first_position, case.first_position + case.queries)
    return positions.unsqueeze(0).expand(case.batch, -1)


def _additive_mask(case: Case) -> torch.Tensor:
    """Causal ``[B, S, T]`` mask, the last row left-padded by two keys, ``finfo.min`` where masked."""
    keys = torch.arange(case.keys)
    allowed = keys[None, None, :] <= _position_ids(case)[:, :, None]
    allowed[-1, :, :2] = False
    return torch.zeros(allowed.shape, dtype=case.dtype).masked_fill(~allowed, torch.finfo(case.dtype).min)


def dsa_arguments(case: Case, seed: int = 0) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments of a ``dsa_indexer`` call as GLM-MoE-DSA makes it: the gate weight stays fp32."""
    generator = torch.Generator().manual_seed(seed)
    q = _q(case, generator)
    k = _keys(case, generator)
    hidden_states = torch.randn(case.batch, case.queries, HIDDEN, generator=generator).to(case.dtype)
    weights_proj = torch.randn(case.heads, HIDDEN, generator=generator)
    mask = _additive_mask(case) if case.additive_mask else None
    kwargs = {"softmax_scale": case.head_dim**-0.5, "weights_scaling": case.heads**-0.5, "index_topk": case.index_topk}
    return (q, k, hidden_states, weights_proj, mask, _position_ids(case)), kwargs


def lightning_arguments(case: Case, seed: int = 0) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments of a ``lightning_indexer`` call as DeepSeek-V4 makes it: every weight in the model's dtype."""
    generator = torch.Generator().manual_seed(seed)
    q = _q(case, generator)
    compressed_kv = _keys(case, generator)
    hidden_states = torch.randn(case.batch, case.queries, HIDDEN, generator=generator).to(case.dtype)
    weights_proj = torch.randn(case.heads, HIDDEN, generator=generator).to(case.dtype)
    kwargs = {"softmax_scale": case.head_dim**-0.5, "weights_scaling": case.heads**-0.5}
    return (q, compressed_kv, hidden_states, weights_proj), kwargs


@pytest.mark.parametrize("case", DSA_CASES.values(), ids=DSA_CASES.keys())
def test_dsa_kernel_selects_the_references_keys_in_the_references_order(case: Case) -> None:
    args, kwargs = dsa_arguments(case)
    expected = eager.dsa_indexer(*args, **kwargs)
    actual = indexers.dsa_indexer(*args, **kwargs)
    assert actual.dtype == torch.int32
    assert actual.shape == (case.batch, case.queries, min(case.index_topk, case.keys))
    assert torch.equal(actual, expected)


@pytest.mark.parametrize("case", LIGHTNING_CASES.values(), ids=LIGHTNING_CASES.keys())
def test_lightning_kernel_scores_equal_the_references(case: Case) -> None:
    args, kwargs = lightning_arguments(case)
    expected = eager.lightning_indexer(*args, **kwargs)
    actual = indexers.lightning_indexer(*args, **kwargs)
    assert actual.dtype == torch.float32 and actual.shape == (case.batch, case.queries, case.keys)
    assert torch.equal(actual, expected)


@pytest.mark.parametrize("case", LIGHTNING_CASES.values(), ids=LIGHTNING_CASES.keys())
def test_lightning_kernel_gradients_equal_the_references(case: Case) -> None:
    """The contract returns scores, so the kernel stays differentiable; each key's gradient sums the same
    per-query products over the queries as the reference's."""
    args, kwargs = lightning_arguments(case)
    weights = torch.linspace(-1, 1, case.batch * case.queries * case.keys).view(case.batch, case.queries, case.keys)
    grads = []
    for kernel in (eager.lightning_indexer, indexers.lightning_indexer):
        leaves = [tensor.detach().clone().requires_grad_(True) for tensor in args]
        (kernel(*leaves, **kwargs) * weights).sum().backward()
        grads.append([leaf.grad for leaf in leaves])
    for name, want, got in zip(("q", "compressed_kv", "hidden_states", "weights_proj"), *grads):
        assert torch.equal(got, want), name


def test_dsa_kernel_records_no_autograd_graph_for_its_indices() -> None:
    args, kwargs = dsa_arguments(Case())
    q, k, hidden_states, weights_proj, *rest = args
    leaves = [tensor.clone().requires_grad_(True) for tensor in (q, k, hidden_states, weights_proj)]
    indices = indexers.dsa_indexer(*leaves, *rest, **kwargs)
    assert not indices.requires_grad and indices.grad_fn is None
    assert torch.equal(indices, eager.dsa_indexer(*leaves, *rest, **kwargs))


def test_shared_keys_binds_through_ops_config_and_is_restored() -> None:
    ops = OpsConfig({"dsa_indexer": "shared_keys", "lightning_indexer": "shared_keys"})
    with bound_ops(ops):
        assert current_ops() == {"dsa_indexer": "shared_keys", "lightning_indexer": "shared_keys"}
        assert SLOTS["dsa_indexer"].bound.fn is indexers.dsa_indexer
        assert SLOTS["lightning_indexer"].bound.fn is indexers.lightning_indexer
        dsa_args, dsa_kwargs = dsa_arguments(Case())
        assert torch.equal(SLOTS["dsa_indexer"](*dsa_args, **dsa_kwargs), eager.dsa_indexer(*dsa_args, **dsa_kwargs))
    assert current_ops() == {}


def test_everywhere_shared_keys_selects_exactly_the_two_indexer_slots() -> None:
    assert dict(OpsConfig.everywhere("shared_keys").kernels) == {
        "dsa_indexer": "shared_keys",
        "lightning_indexer": "shared_keys",
    }


#: Sizes all distinct, so a tensor of ``B * S * d * T`` elements can only be the keys copied per query.
PROBE = Case(batch=2, queries=5, keys=7, heads=3, head_dim=11, index_topk=4)
PER_QUERY_KEYS = PROBE.batch * PROBE.queries * PROBE.head_dim * PROBE.keys

CALLS: dict[str, Callable[[Callable[..., torch.Tensor]], torch.Tensor]] = {
    "dsa_indexer": lambda kernel: kernel(*dsa_arguments(PROBE)[0], **dsa_arguments(PROBE)[1]),
    "lightning_indexer": lambda kernel: kernel(*lightning_arguments(PROBE)[0], **lightning_arguments(PROBE)[1]),
}


def _op_input_sizes(call: Callable[[], torch.Tensor]) -> set[int]:
    """The element count of every tensor any aten op received during ``call``."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        call()
    sizes = set()
    for event in profiler.events():
        for shape in event.input_shapes:
            if shape:
                sizes.add(torch.Size(shape).numel())
    return sizes


@pytest.mark.parametrize("slot", sorted(CALLS))
def test_kernel_never_copies_the_keys_once_per_query(slot: str) -> None:
    assert PER_QUERY_KEYS not in _op_input_sizes(lambda: CALLS[slot](getattr(indexers, slot)))


@pytest.mark.parametrize("slot", sorted(CALLS))
def test_the_copy_probe_sees_the_references_per_query_keys(slot: str) -> None:
    """The reference's broadcast matmul expands and copies the keys to ``[B, S, d, T]``: the probe catches it."""
    assert PER_QUERY_KEYS in _op_input_sizes(lambda: CALLS[slot](getattr(eager, slot)))
