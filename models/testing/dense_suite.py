"""The parity suite every dense text model runs (docs/design.md, "The parity contract"), declared once.

A model's test file is a declaration: a :class:`DenseModel` naming its config class, its two heads,
its backends and the tiny sizes that make its differences matter, plus a ``Test<Model>Parity`` subclass
of :class:`DenseParitySuite` carrying that declaration. Every test below then runs for every backend
of the model (``backend`` is parametrized per subclass).

Tolerances (``modelgraft.models.testing.parity``): all slots eager, logits are ``torch.equal`` to upstream in fp32
and in bf16, loss and gradients within ``EAGER_TOLERANCE`` (fp32: rtol 1e-5, atol 1e-6) or
``BF16_TOLERANCE`` (bf16: two ulps); a CPU kernel bound, within ``KERNEL_TOLERANCE`` (fp32) or
``BF16_KERNEL_TOLERANCE`` (bf16, norm-wise), and ``check_parity`` fails when a bound kernel was never
called. The slot path is checked argument by argument: each slot the model guards gets its reference
kernel (``modelgraft.models.testing.reference``) bound alone, for each head, in fp32 and bf16, and must reproduce
upstream within the eager tolerances. Every test runs on one torch thread (tiny models run several
times faster so, and pytest-xdist already spreads tests over the cores). GPU-only kernels (Liger) are
not exercised here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import pytest
import torch
import transformers
from transformers import PreTrainedConfig

from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.ops import SLOTS, OpsConfig, bound_ops
from modelgraft.models.registry import MODEL_CONFIG_REGISTRY, MODELING_REGISTRY
from modelgraft.models.testing import (
    IGNORE_INDEX,
    build_pair,
    causal_lm_batch,
    check_parity,
    seed_everything,
    sequence_classification_batch,
    tiny_config,
)
from modelgraft.models.testing.layer_compile import check_first_layers_compile
from modelgraft.models.testing.parity import eager_slots_on_one_thread, tolerance_for
from modelgraft.models.testing.reference import HEADS, Head, consulted_slots, reference_kernel, reference_kernels
from modelgraft.models.testing.tiny import AUX_NAMES, EPS_NAMES, tiny_config_for, tiny_overrides_for

__all__ = ["CHUNKED_LOSS", "DTYPES", "DenseModel", "DenseParitySuite", "slot_cases", "slot_visible_values"]

#: The chunked fused loss with a chunk size that splits the 4 x 11 test batch raggedly (6 chunks, last of 2).
CHUNKED_LOSS = OpsConfig({"causal_lm_loss": "chunked"}, kernel_options={"causal_lm_loss": {"chunk_size": 7}})

CLASSIFIER_SLOT = "sequence_classification_loss"

#: The upstream base model a generated classifier runs (None: the generated one), by (model_type, class, backend).
_CLASSIFIER_BASE: dict[tuple[str, str, str], str | None] = {}

#: The dtypes every parity run is made in: fp32, and bf16, the dtype people train in.
DTYPES = (pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16"))


def slot_visible_values(config_class: type[PreTrainedConfig]) -> dict[str, Any]:
    """The non-default values :func:`tiny_config_for` gives what a slot receives (norm eps, aux-loss weights).

    For declarations on llama's fixed sizes (``derived_sizes=False``): their configs get the same
    non-default epsilons and aux-loss coefficients as derived ones, so a guard that drops or hard-codes
    one (``eps=1e-6``) changes the result.
    """
    return {name: value for name, value in tiny_overrides_for(config_class).items() if name in EPS_NAMES + AUX_NAMES}


def slot_cases(model: DenseModel) -> list[tuple[Head, str, torch.dtype, str]]:
    """The (head, slot, dtype, dtype id) runs of the one-slot reference test for ``model``: only what it has.

    Every slot the causal LM's step calls, and the classifier's loss slot, each in fp32 and bf16. The body
    slots (norms, MLPs, RoPE, experts) are the same modules under both heads: the classifier's reach to
    them is checked with all reference kernels at once (``test_reference_kernels_in_every_slot_match_upstream``).
    """
    dtypes = ((torch.float32, "fp32"), (torch.bfloat16, "bf16"))
    cases: list[tuple[Head, str, torch.dtype, str]] = [
        ("causal_lm", slot, dtype, dtype_id)
        for slot in consulted_slots(model.guarded, "causal_lm")
        for dtype, dtype_id in dtypes
    ]
    if model.sequence_classification is not None and CLASSIFIER_SLOT in model.guarded:
        cases += [("sequence_classification", CLASSIFIER_SLOT, dtype, dtype_id) for dtype, dtype_id in dtypes]
    return cases


@dataclass(frozen=True)
class DenseModel:
    """What differs between dense text models, as far as their tests are concerned."""

    model_type: str
    config_class: type[PreTrainedConfig]
    causal_lm: str
    #: None when upstream has no sequence classification head.
    sequence_classification: str | None
    backends: tuple[str, ...] = ("gpu",)
    #: Config values on top of the tiny sizes (sliding windows, soft-capping, dropout...).
    sizes: Mapping[str, Any] = field(default_factory=dict)
    #: The slots the model's patches guard (a scaffold guards what upstream has; see generator/recipes/fit.py).
    guarded: tuple[str, ...] = ("rms_norm", "glu_activation", "rope", "causal_lm_loss", CLASSIFIER_SLOT)
    #: Derive the tiny sizes from the config class itself (models.testing.tiny) instead of llama's TINY_SIZES.
    derived_sizes: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", MappingProxyType(dict(self.sizes)))

    def config(self, **overrides: Any) -> PreTrainedConfig:
        """The tiny fp32 eager-attention config of this model."""
        if self.derived_sizes:
            return tiny_config_for(self.config_class, **{**self.sizes, **overrides})
        visible = slot_visible_values(self.config_class)
        return tiny_config(self.config_class, **{**visible, **self.sizes, **overrides})

    def classifier(self) -> str:
        """The sequence classification head; a test of it skips, with the reason, when upstream has none."""
        if self.sequence_classification is None:
            pytest.skip(f"upstream {self.config_class.__name__} has no sequence classification head")
        return self.sequence_classification


@contextmanager
def reference_kernels_bound(calls: Counter[str] | None = None) -> Iterator[None]:
    """Every slot bound to its reference kernel (``modelgraft.models.ops.kernels.eager``), counting calls per slot.

    Unlike an eager ``OpsConfig`` (which leaves slots unbound, so upstream code runs), this sends every
    guarded call through its slot, which proves the guard passes the right arguments.
    """

    def counted(slot: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if calls is not None:
                calls[slot] += 1
            return kernel(*args, **kwargs)

        return call

    with bound_ops(OpsConfig()):  # restores whatever was bound on exit
        for name, slot in SLOTS.items():
            slot.bind(counted(name, reference_kernel(name)), name=f"reference.{name}")
        yield


class DenseParitySuite:
    """Generated vs upstream ``transformers`` for one dense model; subclasses set ``model``."""

    model: ClassVar[DenseModel]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "model" not in cls.__dict__:
            return  # an intermediate suite (e.g. the MoE one): its own subclasses declare the model
        backends = cls.model.backends

        @pytest.fixture(params=backends, ids=backends)
        def backend(self: DenseParitySuite, request: pytest.FixtureRequest) -> str:
            return request.param

        cls.backend = backend

        cases = slot_cases(cls.model)
        ids = [f"{head}-{slot}-{dtype_id}" for head, slot, _, dtype_id in cases]

        @pytest.fixture(params=[case[:3] for case in cases], ids=ids)
        def slot_case(self: DenseParitySuite, request: pytest.FixtureRequest) -> tuple[Head, str, torch.dtype]:
            return request.param

        cls.slot_case = slot_case

    @pytest.fixture(autouse=True)
    def _eager_slots(self) -> Iterator[None]:
        """Each test starts with every slot eager, on one torch thread, and leaks neither into the next."""
        with eager_slots_on_one_thread():
            yield

    # -- hooks the MoE suite overrides ----------------------------------------------------------
    def _causal_lm_batch(self, config: PreTrainedConfig) -> dict[str, Any]:
        """The batch of the causal-LM slot tests (MoE: with router logits, where upstream computes an aux loss)."""
        return causal_lm_batch(config)

    def _unreachable(self, slot: str) -> str | None:
        """Why a guarded slot cannot be reached by a training step of this model, or None."""
        return None

    def _head(self, head: Head, config: PreTrainedConfig) -> tuple[str, dict[str, Any]]:
        """The architecture and the batch of ``head`` (skips, with the reason, a head upstream lacks)."""
        if head == "causal_lm":
            return self.model.causal_lm, self._causal_lm_batch(config)
        return self.model.classifier(), sequence_classification_batch(config)

    def _reachable(self, head: Head) -> tuple[str, ...]:
        """The guarded slots a training step of ``head`` calls."""
        return tuple(slot for slot in consulted_slots(self.model.guarded, head) if self._unreachable(slot) is None)

    def _upstream_base_in_classifier(self, backend: str) -> str | None:
        """The upstream module of the generated classifier's base model, None when it is the generated one.

        ``GenericForSequenceClassification.__init__`` builds its base model with ``AutoModel.from_config``,
        which resolves to upstream's class: a generated classifier that inherits that ``__init__`` runs
        upstream's decoder, so no body slot (norm, MLP, RoPE, experts) is reached from it.
        """
        key = (self.model.model_type, self.model.classifier(), backend)
        if key not in _CLASSIFIER_BASE:
            model = build_model(self.model.config(), architecture=key[1], backend=backend)
            base = type(getattr(model, model.base_model_prefix))
            generated = MODELING_REGISTRY.module_path(self.model.model_type, backend)
            _CLASSIFIER_BASE[key] = None if base.__module__ == generated else f"{base.__module__}.{base.__name__}"
        return _CLASSIFIER_BASE[key]

    def _assert_classifier_runs_the_generated_base_model(self, backend: str) -> None:
        upstream = self._upstream_base_in_classifier(backend)
        assert upstream is None, (
            f"{self.model.classifier()} runs upstream's {upstream} (AutoModel.from_config in "
            "GenericForSequenceClassification.__init__), not the generated base model: no norm, MLP, RoPE or "
            "experts kernel bound for training is reached from the classifier"
        )

    # -- registration and loading -----------------------------------------------------------
    def test_registry_returns_the_generated_class(self, backend: str) -> None:
        cls = MODELING_REGISTRY.get_class(self.model.model_type, self.model.causal_lm, backend)
        assert cls.__module__ == MODELING_REGISTRY.module_path(self.model.model_type, backend)
        assert cls.__module__.rsplit(".", 1)[-1].startswith("patched_modeling_")
        assert cls is not getattr(transformers, self.model.causal_lm)

    def test_registry_config_class_is_upstreams(self) -> None:
        assert MODEL_CONFIG_REGISTRY[self.model.model_type] is self.model.config_class

    def test_loader_builds_the_generated_class(self, backend: str) -> None:
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        assert type(model) is get_model_class(self.model.model_type, self.model.causal_lm, backend)

    # -- compiled, as a training user compiles each decoder layer ----------------------------------
    def test_first_decoder_layers_trace_as_upstreams_do_and_train_compiled_as_eagerly(self) -> None:
        """``layer_compile.check_first_layers_compile``, on the model's first backend: slots unbound, with the
        reference kernels and with the CPU kernel families its layers call."""
        config = self.model.config()
        upstream_cls = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)
        generated_cls = get_model_class(self.model.model_type, self.model.causal_lm, self.model.backends[0])
        pair = build_pair(config, upstream_cls, generated_cls)
        check_first_layers_compile(pair.upstream, pair.generated, causal_lm_batch(config))

    # -- eager parity, fp32 and bf16 -------------------------------------------------------------
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_causal_lm_logits_loss_and_gradients_match_upstream(self, backend: str, dtype: torch.dtype) -> None:
        check_parity(self.model.config(), self.model.causal_lm, backend=backend, dtype=dtype)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_sequence_classification_logits_loss_and_gradients_match_upstream(
        self, backend: str, dtype: torch.dtype
    ) -> None:
        config = self.model.config()
        check_parity(
            config, self.model.classifier(), backend=backend, batch=sequence_classification_batch(config), dtype=dtype
        )

    @pytest.mark.parametrize(
        "logits_to_keep", [1, 4, torch.tensor([0, 5, 10])], ids=["last-1", "last-4", "index-tensor"]
    )
    def test_logits_to_keep_selects_the_same_positions_as_upstream(
        self, backend: str, logits_to_keep: int | torch.Tensor
    ) -> None:
        config = self.model.config()
        pair = build_pair(
            config,
            get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True),
            get_model_class(self.model.model_type, self.model.causal_lm, backend),
        )
        batch = causal_lm_batch(config)
        del batch["labels"]
        kept = logits_to_keep if isinstance(logits_to_keep, int) else len(logits_to_keep)
        with torch.no_grad():
            seed_everything(0)  # the same dropout masks on both sides (seed_oss trains with dropout on)
            expected = pair.upstream(**batch, logits_to_keep=logits_to_keep).logits
            seed_everything(0)
            actual = pair.generated(**batch, logits_to_keep=logits_to_keep).logits
        assert actual.shape == (batch["input_ids"].shape[0], kept, config.vocab_size)
        assert torch.equal(actual, expected)

    # -- the chunked fused loss (a CPU kernel) ------------------------------------------------
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_chunked_loss_and_gradients_match_upstream(self, backend: str, dtype: torch.dtype) -> None:
        """The default batch ignores padding and a prompt (-100 labels); the kernel must ignore them too."""
        check_parity(self.model.config(), self.model.causal_lm, backend=backend, ops=CHUNKED_LOSS, dtype=dtype)

    def test_chunked_loss_with_a_fully_ignored_row_matches_upstream(self, backend: str) -> None:
        config = self.model.config()
        batch = causal_lm_batch(config)
        batch["labels"][1] = IGNORE_INDEX
        check_parity(config, self.model.causal_lm, backend=backend, ops=CHUNKED_LOSS, batch=batch)

    def test_chunked_loss_sees_only_the_positions_logits_to_keep_keeps(self, backend: str) -> None:
        """``logits_to_keep`` slices the hidden states before the loss, so labels cover only kept positions."""
        config = self.model.config()
        batch = causal_lm_batch(config)
        batch["labels"] = batch["labels"][:, -5:].contiguous()
        batch["logits_to_keep"] = 5
        check_parity(config, self.model.causal_lm, backend=backend, ops=CHUNKED_LOSS, batch=batch)

    def test_chunked_loss_returns_no_logits(self, backend: str) -> None:
        config = self.model.config()
        model = build_model(config, architecture=self.model.causal_lm, backend=backend, ops=CHUNKED_LOSS)
        assert model(**causal_lm_batch(config)).logits is None

    # -- the slot guards ----------------------------------------------------------------------
    def test_causal_lm_consults_every_slot_it_guards(self, backend: str) -> None:
        config = self.model.config()
        model = build_model(config, architecture=self.model.causal_lm, backend=backend)
        calls: Counter[str] = Counter()
        with reference_kernels_bound(calls):
            model(**self._causal_lm_batch(config))
        assert {slot for slot in self._reachable("causal_lm") if calls[slot] == 0} == set()

    def test_sequence_classification_runs_the_generated_base_model(self, backend: str) -> None:
        """The classifier's decoder is the generated one, so the kernels bound for training reach it too."""
        self._assert_classifier_runs_the_generated_base_model(backend)

    def test_sequence_classification_consults_its_loss_slot(self, backend: str) -> None:
        if CLASSIFIER_SLOT not in self.model.guarded:
            pytest.skip(f"{self.model.classifier()}'s patches guard no {CLASSIFIER_SLOT} slot")
        config = self.model.config()
        model = build_model(config, architecture=self.model.classifier(), backend=backend)
        calls: Counter[str] = Counter()
        with reference_kernels_bound(calls):
            model(**sequence_classification_batch(config))
        assert calls[CLASSIFIER_SLOT] == 1

    def test_reference_kernel_in_one_slot_matches_upstream(
        self, backend: str, slot_case: tuple[Head, str, torch.dtype]
    ) -> None:
        """The slot's reference kernel, bound alone, recomputes upstream from what the guard hands it.

        Logits, loss, aux loss and every gradient within the eager tolerance of ``dtype``, and the kernel
        was called (``check_parity``): a dropped, hard-coded or swapped argument (eps, offset, activation,
        gate and up, mask, labels, logits) changes the result. One run per slot the model guards and head
        that calls it (:func:`slot_cases`), in fp32 and bf16.
        """
        head, slot, dtype = slot_case
        why = self._unreachable(slot)
        if why is not None:
            pytest.skip(why)
        config = self.model.config()
        architecture, batch = self._head(head, config)
        check_parity(
            config,
            architecture,
            backend=backend,
            kernels={slot: reference_kernel(slot)},
            batch=batch,
            dtype=dtype,
            tolerance=tolerance_for(dtype, kernels=False),
            logits="close",
        )

    @pytest.mark.parametrize("head", HEADS)
    def test_reference_kernels_in_every_slot_match_upstream(self, backend: str, head: Head) -> None:
        """Each guard hands its kernel what the upstream code it skips would have used (eps, offset, act)."""
        config = self.model.config()
        architecture, batch = self._head(head, config)
        slots = self._reachable(head)
        if not slots:
            pytest.skip(f"the {head} head of {architecture} calls no slot")
        if head == "sequence_classification" and set(slots) - {CLASSIFIER_SLOT}:
            self._assert_classifier_runs_the_generated_base_model(backend)
        check_parity(
            config,
            architecture,
            backend=backend,
            kernels=reference_kernels(slots),
            batch=batch,
            tolerance=tolerance_for(torch.float32, kernels=False),
            logits="close",
        )
