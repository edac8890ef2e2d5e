"""The npu backend: the model's one generated class with the npu kernel family bound to every slot it serves.

Without torch_npu (every CI machine), binding is refused at bind time and the family's module is never
imported. With a stand-in for torch_npu (its three fused operators written in plain torch, counting their
calls), every zoo model built for backend "npu" runs the npu kernels in the slots it guards and computes
what the same model computes eagerly: the kernels pass each slot's arguments on as torch_npu expects them.
A causal LM runs on its batch with labels; a vision encoder (Pixtral: RMSNorm, RoPE) on its declaration's images.
Where a kernel refuses a model's formulation (a ``FormulationRefusedError`` naming the slot), that slot runs
eager, as the refusal tells a user to bind it: no list of models is kept here, so a new model is tested as is.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections import Counter
from collections.abc import Iterator

import pytest
import torch
from transformers import PreTrainedConfig
from transformers.utils import ModelOutput

from modelgraft.models import MODEL_PACKAGES
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.ops import (
    KERNEL_FAMILIES,
    SLOTS,
    FormulationRefusedError,
    KernelUnavailableError,
    OpsConfig,
    bind_ops,
)
from modelgraft.models.registry import BACKENDS, MODELING_REGISTRY
from modelgraft.models.testing import causal_lm_batch, seed_everything
from modelgraft.models.testing.declarations import parity_declaration
from modelgraft.models.testing.dense_suite import DenseModel
from modelgraft.models.testing.vision_encoder_suite import VisionEncoderModel

NPU_SLOTS = sorted(KERNEL_FAMILIES["npu"].slots)
NPU_MODULE = "modelgraft.models.ops.kernels.npu"

#: The torch_npu operator each npu kernel calls (gated_mlp goes through the family's GLU kernel).
OPERATOR_OF_SLOT = {
    "rms_norm": "npu_rms_norm",
    "glu_activation": "npu_swiglu",
    "gated_mlp": "npu_swiglu",
    "rope": "npu_rotary_mul",
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


def _architecture(model: DenseModel | VisionEncoderModel) -> str:
    """The class a package's declaration trains: its causal LM, or a vision encoder's own class (it has no head)."""
    return model.architecture if isinstance(model, VisionEncoderModel) else model.causal_lm


@pytest.mark.parametrize("package", MODEL_PACKAGES)
def test_a_backend_without_a_module_of_its_own_builds_the_gpu_class(package: str) -> None:
    model = parity_declaration(package)
    architecture = _architecture(model)
    shared = [backend for backend in BACKENDS if backend not in MODELING_REGISTRY.backends(model.model_type)]
    gpu_class = get_model_class(model.model_type, architecture, "gpu")
    assert "npu" in shared
    built = {backend: get_model_class(model.model_type, architecture, backend) for backend in shared}
    assert built == dict.fromkeys(shared, gpu_class)


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
@pytest.mark.parametrize(
    ("package", "slot", "refusal"),
    [
        ("deepseek_v4", "rms_norm", "needs a weight"),  # an unweighted RMSNorm: npu_rms_norm needs a weight
        ("gemma3", "glu_activation", "silu/swish"),  # a GELU GLU: npu_swiglu is SiLU only
        ("qwen3_5", "rope", "partial rotary"),  # npu_rotary_mul rotates the whole head
    ],
)
def test_a_formulation_the_npu_kernels_cannot_compute_is_refused_naming_the_slot_to_bind_eager(
    package: str, slot: str, refusal: str, torch_npu_stand_in: Counter[str]
) -> None:
    model = parity_declaration(package)
    config = model.config()
    built = build_model(config, architecture=model.causal_lm, backend="npu")

    with pytest.raises(
        FormulationRefusedError, match=f"{refusal}.*bind the 'eager' kernel to the {slot} slot"
    ) as raised:
        built(**causal_lm_batch(config))

    assert isinstance(raised.value, ValueError)
    assert (raised.value.slot, raised.value.kernel) == (slot, "npu")


def test_the_gated_mlp_kernel_refuses_a_non_silu_glu_naming_its_own_slot(torch_npu_stand_in: Counter[str]) -> None:
    """The whole-MLP kernel goes through the GLU kernel; binding eager to glu_activation would not help it."""
    from modelgraft.models.ops.kernels import npu

    x, weight = torch.ones(2, 4), torch.ones(4, 4)
    with pytest.raises(FormulationRefusedError) as raised:
        npu.gated_mlp(x, weight, weight, weight, "gelu_pytorch_tanh")

    assert raised.value.slot == "gated_mlp"
    assert torch_npu_stand_in["npu_swiglu"] == 0


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread, as the per-model suites run: reductions in one order on any machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _batch(model: DenseModel | VisionEncoderModel, config: PreTrainedConfig) -> dict[str, torch.Tensor]:
    """A causal LM's batch with labels, or a vision encoder's images (with their sizes, for Pixtral)."""
    return model.inputs(config) if isinstance(model, VisionEncoderModel) else causal_lm_batch(config)


def _compared(model: DenseModel | VisionEncoderModel, output: ModelOutput) -> dict[str, torch.Tensor]:
    """What the npu and eager runs must agree on: a causal LM's logits and loss, an encoder's hidden states."""
    if isinstance(model, VisionEncoderModel):
        return {"last_hidden_state": output.last_hidden_state}
    return {"logits": output.logits, "loss": output.loss}


def _loss(model: DenseModel | VisionEncoderModel, output: ModelOutput) -> torch.Tensor:
    """A causal LM's loss; for an encoder, which has none, a scalar of its hidden states to run the backward."""
    if isinstance(model, VisionEncoderModel):
        return output.last_hidden_state.float().square().mean()
    return output.loss


def _step_on_npu(
    model: DenseModel | VisionEncoderModel,
    config: PreTrainedConfig,
    batch: dict[str, torch.Tensor],
    calls: Counter[str],
) -> tuple[torch.nn.Module, ModelOutput, list[str]]:
    """``model`` built for npu (seeded), one forward and backward: (the model, its output, the slots left eager).

    Where an npu kernel refuses the model's formulation, the refused slot is bound eager, as the refusal says,
    and the model is built and stepped again, its operator calls counted afresh. Each retry leaves one more npu
    slot eager and a slot is never refused twice, so there are at most as many retries as npu slots.
    """
    eager: list[str] = []
    while True:
        calls.clear()
        seed_everything(0)
        ops = OpsConfig(dict.fromkeys(eager, "eager"))
        on_npu = build_model(config, architecture=_architecture(model), backend="npu", ops=ops)
        on_npu.eval()  # no dropout (seed_oss's tiny config has some): the npu and eager runs must agree
        try:
            output = on_npu(**batch)
            _loss(model, output).backward()
        except FormulationRefusedError as refusal:
            assert refusal.slot in NPU_SLOTS and refusal.slot not in eager, f"refused with {eager} eager: {refusal}"
            eager.append(refusal.slot)
            continue
        return on_npu, output, eager


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("package", MODEL_PACKAGES)
def test_npu_kernels_run_in_every_slot_a_zoo_model_guards_unless_refused_and_match_eager(
    package: str, torch_npu_stand_in: Counter[str]
) -> None:
    model = parity_declaration(package)
    if not set(model.guarded) & set(NPU_SLOTS):
        pytest.skip(f"{package} guards no slot the npu family serves ({', '.join(model.guarded)})")
    config = model.config()
    batch = _batch(model, config)

    on_npu, npu_out, eager_slots = _step_on_npu(model, config, batch, torch_npu_stand_in)
    on_gpu = build_model(config, architecture=_architecture(model), backend="gpu", ops=OpsConfig())  # every slot eager
    on_gpu.load_state_dict(on_npu.state_dict())
    on_gpu.eval()
    gpu_out = on_gpu(**batch)

    npu_slots = sorted(set(model.guarded) & set(NPU_SLOTS) - set(eager_slots))
    assert {slot: torch_npu_stand_in[OPERATOR_OF_SLOT[slot]] > 0 for slot in npu_slots} == dict.fromkeys(
        npu_slots, True
    )
    torch.testing.assert_close(_compared(model, npu_out), _compared(model, gpu_out), rtol=1e-4, atol=1e-5)
