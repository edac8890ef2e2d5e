"""export_hub_checkpoint: a sharded run written as one hub checkpoint that upstream's from_pretrained loads with
the trained model's logits. Scenarios in ``tests/distributed/export_scenarios.py``."""

from __future__ import annotations

from pathlib import Path

from modelgraft.models.distributed.launch import spawn

from . import export_scenarios

TIMEOUT = 180.0


def test_fsdp_x_ep_moe_and_fsdp_dense_exports_load_upstream_with_the_trained_logits_and_errors_raise_on_all(
    tmp_path: Path,
) -> None:
    spawn(export_scenarios.export_fsdp_x_ep_and_dense, 2, tmp_path, timeout=TIMEOUT)
