"""The sequence-parallel Gated DeltaNet kernels refuse what they cannot run before any collective (one process).

Their results are proven equal to one process on two gloo ranks in test_linear_attention_parallel.py; these
are their configuration errors.
"""

from __future__ import annotations

import pytest
import torch

from modelgraft.models.distributed.linear_attention import causal_conv1d, chunk_gated_delta_rule
from modelgraft.models.distributed.mesh import ParallelConfigError


def test_without_the_sp_group_the_conv_says_how_to_bind_it() -> None:
    with pytest.raises(ParallelConfigError, match="needs the sp process group.*parallel_ops"):
        causal_conv1d(torch.zeros(1, 6, 5), torch.zeros(6, 4), None, "silu")


def test_the_delta_rule_does_not_wrap_itself() -> None:
    q = torch.zeros(1, 5, 2, 8)
    with pytest.raises(ParallelConfigError, match="wraps one of .*not 'sp_linear'"):
        chunk_gated_delta_rule(q, q, q, q[..., 0], q[..., 0], group=object(), inner="sp_linear")
