"""GPU parity: every text model of the zoo on a CUDA device against upstream, eager and with Liger in every slot;
every multimodal head eager.

Selected by the ``gpu`` marker (``pip install -e '.[test,gpu]' && python -m pytest -m gpu``). Without a
CUDA device every test here skips, naming the reason; the Liger tests skip too where ``liger_kernel``
(the ``gpu`` extra) is not installed. Nothing is mocked: where they skip, these kernels are not exercised.

Tolerances on the device: eager logits within ``EAGER_TOLERANCE`` (CUDA's backward of the embedding and
of ``index_add_`` accumulates with atomics, so two runs of the same code may differ in the last bits of a
gradient); Liger in fp32 within ``LIGER_FP32`` (its Triton kernels reassociate the norm and the fused
loss; test_liger.py checks each one at 1e-5 against eager), in bf16 within ``BF16_KERNEL_TOLERANCE``.
Liger is bound on the slots it serves that the model guards, and ``check_parity`` fails when a bound kernel was never
called. Where a Liger kernel refuses a model's formulation
(a ``ValueError`` beginning "liger ": a GELU other than the tanh one, a weightless norm, partial or interleaved
rotary), the case skips naming the refusal: the model's run must bind the eager kernel to that slot.
"""

from __future__ import annotations

import pytest
import torch

from modelgraft.models import MODEL_PACKAGES
from modelgraft.models.loader import get_model_class
from modelgraft.models.ops import KERNEL_FAMILIES, OpsConfig
from modelgraft.models.testing import causal_lm_batch, check_parity, seed_everything
from modelgraft.models.testing.declarations import MultimodalRun, multimodal_run, parity_declaration
from modelgraft.models.testing.dense_suite import DenseModel
from modelgraft.models.testing.parity import BF16_TOLERANCE, EAGER_TOLERANCE, Tolerance, tolerance_for
from modelgraft.models.testing.reference import DECODE_SLOTS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch.cuda.is_available() is False"),
]

WHY_LIGER_CANNOT_RUN = KERNEL_FAMILIES["liger"].unavailable_reason()
needs_liger = pytest.mark.skipif(
    WHY_LIGER_CANNOT_RUN is not None, reason=f"liger not exercised: {WHY_LIGER_CANNOT_RUN}"
)

#: fp32 with Liger's Triton kernels in the norm, GLU, RoPE and fused-loss slots, through a whole model.
LIGER_FP32 = Tolerance(rtol=1e-3, atol=1e-4)

#: Every text decoder of the zoo, dense and MoE: the packages whose parity declaration is a ``DenseModel``.
TEXT_MODELS = [
    declaration for declaration in map(parity_declaration, MODEL_PACKAGES) if isinstance(declaration, DenseModel)
]
MODELS = [pytest.param(model, id=model.model_type) for model in TEXT_MODELS]
#: Every multimodal head of the zoo (a VLM, an Omni thinker) as its package's tests declare it.
MULTIMODAL = [pytest.param(package, run, id=package) for package in MODEL_PACKAGES if (run := multimodal_run(package))]

#: GPU families whose packages upstream's own modules run whenever installed (transformers' hub decorator on the
#: Gated DeltaNet's conv and delta rule), where the generated model runs them only bound.
UPSTREAM_BINDS_WHEN_INSTALLED = ("fla", "causal_conv1d")


def upstreams_kernels(package: str) -> OpsConfig:
    """The families of :data:`UPSTREAM_BINDS_WHEN_INSTALLED` installed here, on the slots the package guards that a
    training step calls: bound on the generated side, both sides run the same kernels."""
    guarded = set(parity_declaration(package).guarded) - set(DECODE_SLOTS)
    return OpsConfig(
        {
            slot: family
            for family in UPSTREAM_BINDS_WHEN_INSTALLED
            if KERNEL_FAMILIES[family].unavailable_reason() is None
            for slot in KERNEL_FAMILIES[family].slots & guarded
        }
    )


DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


def _batch(model: DenseModel) -> dict:
    batch: dict = causal_lm_batch(model.config())
    if "load_balancing_loss" in model.guarded:
        batch["output_router_logits"] = True
    return batch


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", MODELS)
def test_eager_parity_on_the_device(model: DenseModel, dtype: torch.dtype) -> None:
    tolerance = EAGER_TOLERANCE if dtype == torch.float32 else BF16_TOLERANCE
    check_parity(
        model.config(),
        model.causal_lm,
        batch=_batch(model),
        dtype=dtype,
        device="cuda",
        tolerance=tolerance,
        logits="close",
    )


@needs_liger
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model", MODELS)
def test_liger_in_every_slot_it_has_matches_upstream(model: DenseModel, dtype: torch.dtype) -> None:
    # Liger on every slot it serves that the model guards: check_parity fails a bound kernel that is never called.
    liger = OpsConfig({slot: "liger" for slot in KERNEL_FAMILIES["liger"].slots & set(model.guarded)})
    tolerance = LIGER_FP32 if dtype == torch.float32 else tolerance_for(dtype, kernels=True)
    try:
        check_parity(
            model.config(),
            model.causal_lm,
            ops=liger,
            batch=_batch(model),
            dtype=dtype,
            device="cuda",
            tolerance=tolerance,
        )
    except ValueError as refusal:
        if not str(refusal).startswith("liger "):
            raise
        pytest.skip(f"liger not exercised on {model.model_type}: its kernel refuses the formulation ({refusal})")


@pytest.mark.parametrize(("package", "run"), MULTIMODAL)
def test_multimodal_parity_on_the_device(package: str, run: MultimodalRun) -> None:
    """A multimodal head on its tests' tiny config and processor batch, fp32: what the generated code adds around the
    towers (placeholder scatter, position ids, dummy inputs, vision metadata) builds its tensors on the device.
    Eager, but for the kernels upstream runs whenever their package is installed (:func:`upstreams_kernels`), which
    the generated side then binds: within the kernel tolerance, each bound kernel called."""
    ops = upstreams_kernels(package)
    check_parity(
        run.config,
        run.architecture,
        model_type=run.model_type,
        ops=ops,
        batch=run.make_batch(),
        device="cuda",
        tolerance=None if ops.kernels else EAGER_TOLERANCE,
        logits="close",
    )


@pytest.mark.parametrize(("package", "run"), MULTIMODAL)
def test_every_dummy_forward_of_a_multimodal_head_is_zero_on_the_device_and_reaches_its_tower(
    package: str, run: MultimodalRun
) -> None:
    """The zero loss term a batch without images (or audio) adds: built on the device of the tower's weights."""
    seed_everything(0)
    model = get_model_class(run.model_type, run.architecture)(run.config).to("cuda").train()
    dummies = [module for module in model.modules() if callable(getattr(type(module), "dummy_forward", None))]
    assert dummies, f"{package}: no module of {run.architecture} has a dummy_forward"
    total = sum(module.dummy_forward() for module in dummies)
    assert total.device.type == "cuda" and total.item() == 0.0
    total.backward()
    assert any(param.grad is not None for param in model.parameters())
