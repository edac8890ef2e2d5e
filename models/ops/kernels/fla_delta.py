"""The ``fla`` kernel family: flash-linear-attention's Triton gated delta rule (GPU only, imported when bound).

Upstream binds these at import time whenever ``fla`` is importable (and runs them on the devices FLA supports);
here they run only when the family is bound to the delta-rule slots, so an installed ``fla`` never changes what
an unbound model computes. The slots' contracts are FLA's own (q, k, v [B, T, H, *], g and beta [B, T, H], the
same scale and L2 norm), but for grouped value attention: the slots get q and k with the key heads, fewer than
the value heads, as upstream's torch functions do. The wrappers repeat them to the value heads first
(:func:`~modelgraft.models.ops.kernels.linear_attention_reference.grouped_query_key`, upstream's grouping), so
FLA always sees one q/k head per value head, whatever grouping its own version handles. FLA honours
``cu_seqlens`` (a batch of one, initial states [N, H, K, V]).
"""

from __future__ import annotations

from typing import Any

import torch
from fla.ops.gated_delta_rule import chunk_gated_delta_rule as _fla_chunk
from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as _fla_recurrent

from modelgraft.models.ops.kernels.linear_attention_reference import grouped_query_key

__all__ = ["chunk_gated_delta_rule", "recurrent_gated_delta_rule"]


def chunk_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    chunk_size: int = 64,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """FLA's chunked kernel (its chunk size is its own: 64, upstream's default)."""
    del chunk_size
    query, key = grouped_query_key(query, key, value)
    return _fla_chunk(
        query,
        key,
        value,
        g=g,
        beta=beta,
        initial_state=initial_state,
        output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )


def recurrent_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any]:
    """FLA's fused recurrent kernel (decode steps)."""
    query, key = grouped_query_key(query, key, value)
    return _fla_recurrent(
        query,
        key,
        value,
        g=g,
        beta=beta,
        initial_state=initial_state,
        output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
    )
