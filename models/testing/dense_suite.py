"""The parity suite every dense text model runs (design.md section 5), declared once.

A model's test file is a declaration: a :class:`DenseModel` naming its config class, its two heads,
its backends and the tiny sizes that make its differences matter, plus a ``Test<Model>Parity`` subclass
of :class:`DenseParitySuite` carrying that declaration. Every test below then runs for every backend
of the model (``backend`` is parametrized per subclass).

Tolerances (from ``models.testing``): all slots eager, logits are ``torch.equal`` to upstream and loss
and gradients within ``EAGER_TOLERANCE`` (rtol 1e-5, atol 1e-6); a CPU kernel bound, within
``KERNEL_TOLERANCE`` (rtol 1e-4, atol 1e-5). GPU-only kernels (Liger) are not exercised here.
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

from models.loader import build_model, get_model_class
from models.ops import SLOTS, OpsConfig, bound_ops
from models.ops.kernels import eager as reference
from models.registry import MODEL_CONFIG_REGISTRY, MODELING_REGISTRY
from models.testing.tiny import tiny_config_for
from models.testing import (
    EAGER_TOLERANCE,
    IGNORE_INDEX,
    assert_step_parity,
    build_pair,
    causal_lm_batch,
    check_parity,
    run_step,
    seed_everything,
    sequence_classification_batch,
    tiny_config,
)

__all__ = ["CHUNKED_LOSS", "DenseModel", "DenseParitySuite"]

#: The chunked fused loss with a chunk size that splits the 4 x 11 test batch raggedly (6 chunks, last of 2).
CHUNKED_LOSS = OpsConfig({"causal_lm_loss": "chunked"}, kernel_options={"causal_lm_loss": {"chunk_size": 7}})

#: Slots a dense causal LM consults on every training step, and the one its classifier consults.
CAUSAL_LM_SLOTS = ("rms_norm", "glu_activation", "activation", "rope", "causal_lm_loss")
CLASSIFIER_SLOT = "sequence_classification_loss"


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
        return tiny_config(self.config_class, **{**self.sizes, **overrides})

    def classifier(self) -> str:
        """The sequence classification head; a test of it skips, with the reason, when upstream has none."""
        if self.sequence_classification is None:
            pytest.skip(f"upstream {self.config_class.__name__} has no sequence classification head")
        return self.sequence_classification


@contextmanager
def reference_kernels_bound(calls: Counter[str] | None = None) -> Iterator[None]:
    """Every slot bound to its reference kernel (``models.ops.kernels.eager``), counting calls per slot.

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
            slot.bind(counted(name, getattr(reference, name)), name=f"reference.{name}")
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

    @pytest.fixture(autouse=True)
    def _eager_slots(self) -> Iterator[None]:
        """Each test starts with every slot eager and leaks no binding into the next."""
        with bound_ops(OpsConfig()):
            yield

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

    # -- eager parity -------------------------------------------------------------------------
    def test_causal_lm_logits_loss_and_gradients_match_upstream(self, backend: str) -> None:
        check_parity(self.model.config(), self.model.causal_lm, backend=backend)

    def test_sequence_classification_logits_loss_and_gradients_match_upstream(self, backend: str) -> None:
        config = self.model.config()
        check_parity(config, self.model.classifier(), backend=backend, batch=sequence_classification_batch(config))

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
    def test_chunked_loss_and_gradients_match_upstream(self, backend: str) -> None:
        """The default batch ignores padding and a prompt (-100 labels); the kernel must ignore them too."""
        check_parity(self.model.config(), self.model.causal_lm, backend=backend, ops=CHUNKED_LOSS)

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
            model(**causal_lm_batch(config))
        expected = {slot for slot in CAUSAL_LM_SLOTS if slot in self.model.guarded}
        assert {slot for slot in expected if calls[slot] == 0} == set()

    def test_sequence_classification_consults_its_loss_slot(self, backend: str) -> None:
        config = self.model.config()
        model = build_model(config, architecture=self.model.classifier(), backend=backend)
        calls: Counter[str] = Counter()
        with reference_kernels_bound(calls):
            model(**sequence_classification_batch(config))
        assert calls[CLASSIFIER_SLOT] == 1

    def test_reference_kernels_in_every_slot_match_upstream(self, backend: str) -> None:
        """Each guard hands its kernel what the upstream code it skips would have used (eps, offset, act)."""
        config = self.model.config()
        pair = build_pair(
            config,
            get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True),
            get_model_class(self.model.model_type, self.model.causal_lm, backend),
        )
        batch = causal_lm_batch(config)
        upstream = run_step(pair.upstream, batch)
        with reference_kernels_bound():
            candidate = run_step(pair.generated, batch)
        assert_step_parity(upstream, candidate, tolerance=EAGER_TOLERANCE, logits="close")
