"""The npu backend: the model's one generated class with the npu kernel family bound to every slot it serves.

Without torch_npu (every CI machine), binding is refused at bind time and the family's module is never
imported. With a stand-in for torch_npu (its three fused operators written in plain torch, counting their
calls), every zoo model built for backend "npu" runs the npu kernels in the slots it guards and computes
what the same model computes eagerly: the kernels pass each slot's arguments on as torch_npu expects them.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections import Counter
from collections.abc import Iterator

import pytest
import torch

from modelgraft.models import MODEL_PACKAGES
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.ops import KERNEL_FAMILIES, SLOTS, KernelUnavailableError, OpsConfig, bind_ops
from modelgraft.models.registry import BACKENDS, MODELING_REGISTRY
from modelgraft.models.testing import causal_lm_batch, seed_everything
from modelgraft.models.testing.declarations import parity_declaration

NPU_SLOTS = sorted(KERNEL_FAMILIES["npu"].slots)
NPU_MODULE = "modelgraft.models.ops.kernels.npu"

#: The torch_npu operator each npu kernel calls (gated_mlp goes through the family's GLU kernel).
OPERATOR_OF_SLOT = {
    "rms_norm": "npu_rms_norm",
    "glu_activation": "npu_swiglu",
    "gated_mlp": "npu_swiglu",
    "rope": "npu_rotary_mul",
}

#: Formulations the npu kernels refuse (they raise, naming the slot to run eager): the slot runs eager there.
EAGER_WHERE_NPU_CANNOT = {
    "deepseek_v4": {"rms_norm": "eager"},  # an unweighted RMSNorm: npu_rms_norm needs a weight
    "gemma3": {"glu_activation": "eager"},  # a GELU GLU: npu_swiglu is SiLU only
    "qwen3_5": {"rope": "eager"},  # partial rotary: npu_rotary_mul rotates the whole head
    "qwen3_5_moe": {"rope": "eager"},  # the same partial rotary
}


@pytest.fixture
def torch_npu_stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """``torch_npu`` with ``npu_rms_norm``, ``npu_swiglu`` and ``npu_rotary_mul`` in plain torch; counts calls."""
    calls: Counter[str] = Counter()

    def npu_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
        calls["npu_rms_norm"] += 1
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
        return x * rstd * gamma, rstd

    def npu_swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        calls["npu_swiglu"] += 1
        gate, up = x.chunk(2, dim=dim)
        return torch.nn.functional.silu(gate) * up

    def npu_rotary_mul(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        calls["npu_rotary_mul"] += 1
        first, second = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-second, first), dim=-1) * sin

    module = types.ModuleType("torch_npu")
    module.__spec__ = importlib.machinery.ModuleSpec("torch_npu", loader=None)
    module.npu_rms_norm, module.npu_swiglu, module.npu_rotary_mul = npu_rms_norm, npu_swiglu, npu_rotary_mul
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    try:
        yield calls
    finally:
        # The family's module was imported against the stand-in: no later test may reuse it.
        sys.modules.pop(NPU_MODULE, None)
        package = sys.modules[NPU_MODULE.rpartition(".")[0]]
        if "npu" in vars(package):
            delattr(package, "npu")


@pytest.mark.skipif(KERNEL_FAMILIES["npu"].unavailable_reason() is None, reason="torch_npu is installed here")
@pytest.mark.parametrize("slot", NPU_SLOTS)
def test_binding_npu_without_torch_npu_fails_at_bind_time(slot: str) -> None:
    with pytest.raises(KernelUnavailableError, match="torch_npu"):
        bind_ops(OpsConfig({slot: "npu"}))
    assert not SLOTS[slot].use_non_eager_impl
    assert NPU_MODULE not in sys.modules


def test_npu_serves_the_device_slots_but_no_loss() -> None:
    assert set(NPU_SLOTS) == {"rms_norm", "glu_activation", "gated_mlp", "rope"}


@pytest.mark.parametrize("package", MODEL_PACKAGES)
def test_a_backend_without_a_module_of_its_own_builds_the_gpu_class(package: str) -> None:
    model = parity_declaration(package)
    shared = [backend for backend in BACKENDS if backend not in MODELING_REGISTRY.backends(model.model_type)]
    gpu_class = get_model_class(model.model_type, model.causal_lm, "gpu")
    assert "npu" in shared
    assert {
        backend: get_model_class(model.model_type, model.causal_lm, backend) for backend in shared
    } == dict.fromkeys(shared, gpu_class)


@pytest.mark.skipif(KERNEL_FAMILIES["npu"].unavailable_reason() is None, reason="torch_npu is installed here")
def test_building_for_npu_without_torch_npu_fails_and_binds_nothing() -> None:
    model = parity_declaration("qwen3")
    with pytest.raises(KernelUnavailableError, match="torch_npu"):
        build_model(model.config(), architecture=model.causal_lm, backend="npu")
    assert not any(SLOTS[slot].use_non_eager_impl for slot in NPU_SLOTS)


def test_building_for_npu_binds_the_npu_family_to_every_slot_it_serves(torch_npu_stand_in: Counter[str]) -> None:
    model = parity_declaration("qwen3")

    built = build_model(model.config(), architecture=model.causal_lm, backend="npu")

    assert built.ops_config == OpsConfig.everywhere("npu")
    assert {slot: SLOTS[slot].bound_kernel_name for slot in NPU_SLOTS} == dict.fromkeys(NPU_SLOTS, "npu")


def test_ops_given_with_the_npu_backend_win_on_the_slots_they_name(torch_npu_stand_in: Counter[str]) -> None:
    model = parity_declaration("qwen3")
    ops = OpsConfig({"rope": "eager", "causal_lm_loss": "chunked"})

    built = build_model(model.config(), architecture=model.causal_lm, backend="npu", ops=ops)

    assert dict(built.ops_config.kernels) == {
        "rms_norm": "npu",
        "glu_activation": "npu",
        "gated_mlp": "npu",
        "rope": "eager",
        "causal_lm_loss": "chunked",
    }


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(("package", "refusal"), [("deepseek_v4", "needs a weight"), ("gemma3", "silu/swish")])
def test_a_formulation_the_npu_kernels_cannot_compute_is_refused_naming_what_to_bind(
    package: str, refusal: str, torch_npu_stand_in: Counter[str]
) -> None:
    model = parity_declaration(package)
    config = model.config()
    built = build_model(config, architecture=model.causal_lm, backend="npu")

    with pytest.raises(ValueError, match=f"{refusal}.*bind.*'eager'"):
        built(**causal_lm_batch(config))


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread, as the per-model suites run: reductions in one order on any machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("package", MODEL_PACKAGES)
def test_npu_kernels_run_in_every_slot_a_zoo_model_guards_and_match_eager(
    package: str, torch_npu_stand_in: Counter[str]
) -> None:
    model = parity_declaration(package)
    eager_slots = EAGER_WHERE_NPU_CANNOT.get(package, {})
    config = model.config()
    batch = causal_lm_batch(config)
    seed_everything(0)
    on_npu = build_model(config, architecture=model.causal_lm, backend="npu", ops=OpsConfig(eager_slots))
    on_gpu = build_model(config, architecture=model.causal_lm, backend="gpu", ops=OpsConfig())  # every slot eager
    on_gpu.load_state_dict(on_npu.state_dict())
    on_npu.eval(), on_gpu.eval()  # no dropout (seed_oss's tiny config has some): the two runs must agree

    npu_out = on_npu(**batch)
    npu_out.loss.backward()
    gpu_out = on_gpu(**batch)

    npu_slots = sorted(set(model.guarded) & set(NPU_SLOTS) - set(eager_slots))
    assert {slot: torch_npu_stand_in[OPERATOR_OF_SLOT[slot]] > 0 for slot in npu_slots} == dict.fromkeys(
        npu_slots, True
    )
    torch.testing.assert_close(npu_out.logits, gpu_out.logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(npu_out.loss, gpu_out.loss, rtol=1e-4, atol=1e-5)
