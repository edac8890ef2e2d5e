"""NPU kernels: refused at bind time where torch_npu is missing; never imported on other machines."""

from __future__ import annotations

import sys

import pytest

from modelgraft.models.ops import KERNEL_FAMILIES, SLOTS, KernelUnavailableError, OpsConfig, bind_ops

NPU_SLOTS = sorted(KERNEL_FAMILIES["npu"].slots)


@pytest.mark.skipif(KERNEL_FAMILIES["npu"].unavailable_reason() is None, reason="torch_npu is installed here")
@pytest.mark.parametrize("slot", NPU_SLOTS)
def test_binding_npu_without_torch_npu_fails_at_bind_time(slot: str) -> None:
    with pytest.raises(KernelUnavailableError, match="torch_npu"):
        bind_ops(OpsConfig({slot: "npu"}))
    assert not SLOTS[slot].use_non_eager_impl
    assert "modelgraft.models.ops.kernels.npu" not in sys.modules


def test_npu_serves_the_device_slots_but_no_loss() -> None:
    assert set(NPU_SLOTS) == {"rms_norm", "glu_activation", "gated_mlp", "rope"}
