"""The sequence-parallel DSA indexer refuses what it cannot run before any collective (one process).

Its results are proven equal to one process on two gloo ranks in test_multiprocess.py (GLM-MoE-DSA under
Ulysses); these are its configuration errors.
"""

from __future__ import annotations

import pytest
import torch

from modelgraft.models.distributed.mesh import ParallelConfigError
from modelgraft.models.distributed.sparse_indexer import dsa_indexer


def _call(**options: object) -> torch.Tensor:
    q, k = torch.zeros(1, 4, 2, 8), torch.zeros(1, 4, 8)
    return dsa_indexer(
        q,
        k,
        torch.zeros(1, 4, 16),
        torch.zeros(2, 16),
        None,
        torch.arange(4)[None],
        softmax_scale=1.0,
        weights_scaling=1.0,
        index_topk=2,
        **options,
    )


def test_without_the_sp_group_it_says_how_to_bind_it():
    with pytest.raises(ParallelConfigError, match="needs the sp process group.*parallel_ops"):
        _call()


def test_an_inner_kernel_it_cannot_wrap_is_refused():
    with pytest.raises(ParallelConfigError, match="wraps one of .*not 'grouped'"):
        _call(group=object(), inner="grouped")
