"""The sparse-attention indexers' scores without copying the keys once per query (family ``shared_keys``).

Upstream scores ``q [B, S, h, d]`` against the keys ``[B, T, d]`` with ``torch.matmul(q, keys^T.unsqueeze(1))``.
The broadcast makes ``matmul`` expand the keys to ``[B, S, d, T]`` and copy them into a contiguous buffer
before running ``B * S`` matmuls of ``[h, d] @ [d, T]``: ``S`` copies of the keys (8 GB per layer in fp32 at
S = T = 4096, d = 128), and most of the indexer's time on CPU.

Both slots end in a top-k (the DSA indexer's own, the lightning indexer's in its caller), which turns any
rounding difference into another key set, so the kernels must reproduce the reference bit for bit. One
matmul per batch row with the heads flattened into its rows (``[B, S * h, d] @ [B, d, T]``) does not: the
BLAS picks its kernel, and with it the order of the sums over ``d``, by the matrix shape, and on CPU a
quarter of the shapes tried came out different in the last bit (h = 1, or T much smaller than S, among
them). So these kernels keep the reference's ``B * S`` matmuls of ``[h, d] @ [d, T]`` with the same
operand layouts, and drop only the copy: the keys are laid out as the reference's copy lays them out once
per batch row, and each query reads its batch row's keys through a stride-0 view. Everything else is the
reference's operation for operation (``modelgraft.models.ops.kernels.eager``): the same fp32 casts, the scale inside
the relu for DSA and after it for the lightning indexer, the heads reduced by a matmul for DSA and by a sum
over dim 2 for the lightning indexer. tests/runtime/test_indexer_kernels.py holds both to the reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["dsa_indexer", "lightning_indexer"]


def _scores_per_head(q: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``torch.matmul(q [B, S, h, d], keys [B, d, T].unsqueeze(1))`` bit for bit, ``[B, S, h, T]``, without
    the ``[B, S, d, T]`` copy of the keys that the broadcast makes."""
    batch, seq_len, heads, dim = q.shape
    if batch == 1 or seq_len == 1 or keys.stride(0) == 0:
        # matmul's broadcast reshape is a view here, so the reference copies nothing.
        return torch.matmul(q, keys.unsqueeze(1))
    # The reference's operands: q folded as matmul folds it, the keys contiguous as its copy is.
    rows = q.reshape(batch * seq_len, heads, dim).view(batch, seq_len, heads, dim)
    keys = keys.clone(memory_format=torch.contiguous_format)
    n_keys = keys.shape[-1]
    if torch.is_grad_enabled() and (q.requires_grad or keys.requires_grad):
        return torch.stack([torch.bmm(rows[b], keys[b].expand(seq_len, dim, n_keys)) for b in range(batch)])
    scores = rows.new_empty(batch, seq_len, heads, n_keys)
    for b in range(batch):
        torch.bmm(rows[b], keys[b].expand(seq_len, dim, n_keys), out=scores[b])
    return scores


def lightning_indexer(
    q: torch.Tensor,
    compressed_kv: torch.Tensor,
    hidden_states: torch.Tensor,
    weights_proj: torch.Tensor,
    *,
    softmax_scale: float,
    weights_scaling: float,
) -> torch.Tensor:
    """``lightning_indexer`` slot contract (see ``modelgraft.models.ops.kernels.eager.lightning_indexer``), keys read in place.

    Out of place and under autograd like the reference: the contract returns scores, which a caller may
    differentiate.
    """
    scores = _scores_per_head(q.float(), compressed_kv.float().transpose(-1, -2))
    gates = F.linear(hidden_states, weights_proj).float() * weights_scaling
    return (F.relu(scores) * softmax_scale * gates.unsqueeze(-1)).sum(dim=2)


@torch.no_grad()
def dsa_indexer(
    q: torch.Tensor,
    k: torch.Tensor,
    hidden_states: torch.Tensor,
    weights_proj: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor,
    *,
    softmax_scale: float,
    weights_scaling: float,
    index_topk: int,
) -> torch.Tensor:
    """``dsa_indexer`` slot contract (see ``modelgraft.models.ops.kernels.eager.dsa_indexer``), keys read in place.

    The result is integer indices, which carry no gradient, so no autograd graph is recorded and the scale,
    relu and causal fill run in place on buffers this function owns: the same operations on the same values,
    without an extra ``[B, S, h, T]`` and ``[B, S, T]`` buffer each.
    """
    scores = _scores_per_head(q.float(), k.transpose(-1, -2).float()).mul_(softmax_scale).relu_()
    gates = F.linear(hidden_states.to(weights_proj.dtype), weights_proj).float() * weights_scaling
    index_scores = torch.matmul(gates.unsqueeze(-2), scores).squeeze(-2)
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        index_scores = index_scores.masked_fill(~attention_mask, float("-inf"))
    elif attention_mask is not None:
        # Out of place: the sum takes the shape and dtype the mask broadcasts and promotes to, as the reference's.
        index_scores = index_scores + attention_mask
    else:
        keys = torch.arange(index_scores.shape[-1], device=index_scores.device)
        index_scores.masked_fill_(keys[None, None, :] > position_ids[:, :, None], float("-inf"))
    return index_scores.topk(min(index_topk, index_scores.shape[-1]), dim=-1).indices.to(torch.int32)
