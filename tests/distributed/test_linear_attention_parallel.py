"""Qwen3.5's hybrid layers on two gloo ranks, each mode equal to one process: Ulysses sequence parallelism
through its Gated DeltaNet layers (``modelgraft.models.distributed.linear_attention``), packed documents
included, and expert parallelism on Qwen3.5-MoE. The scenarios are in ``linear_attention_scenarios.py``; the
test starts its two ranks once for all of them (``launch.spawn``)."""

from __future__ import annotations

from modelgraft.models.distributed.launch import spawn

from . import linear_attention_scenarios

TIMEOUT = 150.0


def test_sp2_qwen3_5_packed_documents_included_and_ep2_qwen3_5_moe_match_one_process() -> None:
    spawn(linear_attention_scenarios.two_rank_hybrid_cases, 2, timeout=TIMEOUT)
