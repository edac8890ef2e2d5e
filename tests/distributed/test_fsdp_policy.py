"""What ``apply_fsdp`` decides before any rank communicates: the precision policy and which modules are routers."""

from __future__ import annotations

import pytest
import torch

from modelgraft.models.distributed import mixed_precision, router_modules

from .scenarios import config_of, fresh_model


def test_mixed_precision_reduces_gradients_in_fp32_unless_told_otherwise() -> None:
    assert mixed_precision(torch.bfloat16).reduce_dtype == torch.float32
    assert mixed_precision(torch.bfloat16, reduce_dtype=None).reduce_dtype is None


@pytest.mark.parametrize(
    ("name", "sparse_layers"),
    [("qwen3_moe", 2), ("gpt_oss", 3), ("llama", 0)],  # qwen3_moe's layer 1 is dense (mlp_only_layers)
)
def test_router_modules_are_the_modules_the_model_records_router_logits_from(name: str, sparse_layers: int) -> None:
    model = fresh_model(name, config_of(name))
    routers = router_modules(model)
    assert len(routers) == sparse_layers
    recorded = getattr(model, "_can_record_outputs", {}).get("router_logits")
    assert all(isinstance(router, recorded.target_class) for router in routers)
