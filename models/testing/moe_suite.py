"""The parity suite every MoE text model runs (docs/design.md, "The parity contract"), declared once.

A MoE model's test file is a declaration, as for dense models: a :class:`MoeModel` and a
``Test<Model>Parity`` subclass of :class:`MoeParitySuite`. The suite runs every dense test
(:class:`~models.testing.dense_suite.DenseParitySuite`: registry, eager parity of both heads,
``logits_to_keep``, the chunked loss, slot guards, reference kernels) on the MoE model, plus what MoE
adds: the auxiliary loss and router logits against upstream, the grouped experts kernel, the
``moe_experts`` / ``load_balancing_loss`` guards, the int-0 aux loss of a model without sparse layers,
the expert-parallel plan, and a per-expert safetensors checkpoint loaded through the model's converter.

The tiny config runs upstream's experts with ``experts_implementation="eager"`` (the per-expert loop,
which is what the ``moe_experts`` reference kernel implements), the MoE analogue of eager attention;
``test_default_experts_implementation_matches_upstream`` covers transformers' default (``grouped_mm``).
Tolerances as in ``dense_suite``: eager parity is ``torch.equal`` on logits, router logits and aux loss
and ``EAGER_TOLERANCE`` on loss and gradients; CPU kernels within ``KERNEL_TOLERANCE``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from transformers import PreTrainedConfig

from modelgraft.models.checkpoint import INDEX_FILE, load_checkpoint
from modelgraft.models.converters import converter_for
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.ops import OpsConfig
from modelgraft.models.testing import (
    build_pair,
    causal_lm_batch,
    check_parity,
    seed_everything,
    tiny_config,
)
from modelgraft.models.testing.dense_suite import (
    CHUNKED_LOSS,
    DTYPES,
    DenseModel,
    DenseParitySuite,
    reference_kernels_bound,
    slot_visible_values,
)
from modelgraft.models.testing.layer_compile import check_layers_compiled_while_recording
from modelgraft.models.testing.tiny import tiny_config_for

__all__ = ["GROUPED_EXPERTS", "MoeModel", "MoeParitySuite", "per_expert_state_dict", "plan_matches"]

#: The grouped (sort-by-expert) experts kernel, a CPU-capable kernel of the moe_experts slot.
GROUPED_EXPERTS = OpsConfig({"moe_experts": "grouped"})


@dataclass(frozen=True)
class MoeModel(DenseModel):
    """A dense model declaration plus the MoE facts its checkpoint tests need."""

    #: Per-expert projection names of the model's hub checkpoints (gate, up, down), as upstream spells them.
    expert_projections: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")
    #: The config attribute holding the number of routed experts.
    num_experts_attr: str = "num_experts"
    #: transformers fuses this model's per-expert hub weights on load (an entry of conversion_mapping.py).
    hf_conversion: bool = True
    guarded: tuple[str, ...] = (
        "rms_norm",
        "glu_activation",
        "rope",
        "causal_lm_loss",
        "sequence_classification_loss",
        "moe_experts",
        "load_balancing_loss",
    )

    def config(self, **overrides: Any) -> PreTrainedConfig:
        """The tiny fp32 config, eager attention and the eager (per-expert loop) experts implementation."""
        if self.derived_sizes:
            return tiny_config_for(self.config_class, **{"experts_implementation": "eager", **self.sizes, **overrides})
        visible = slot_visible_values(self.config_class)
        return tiny_config(
            self.config_class, **{**visible, "experts_implementation": "eager", **self.sizes, **overrides}
        )


def per_expert_state_dict(
    state_dict: Mapping[str, torch.Tensor], projections: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")
) -> dict[str, torch.Tensor]:
    """``state_dict`` with every fused expert tensor split the way hub checkpoints store it.

    ``<m>.gate_up_proj [E, 2I, H]`` -> ``<m>.<i>.<gate>.weight [I, H]`` and ``<m>.<i>.<up>.weight [I, H]``;
    ``<m>.down_proj [E, H, I]`` -> ``<m>.<i>.<down>.weight [H, I]``; everything else unchanged.
    """
    gate, up, down = projections
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        module, _, name = key.rpartition(".")
        if module.endswith("experts") and name == "gate_up_proj":
            for expert, fused in enumerate(tensor):
                gate_rows, up_rows = fused.chunk(2, dim=0)
                out[f"{module}.{expert}.{gate}.weight"] = gate_rows.clone()
                out[f"{module}.{expert}.{up}.weight"] = up_rows.clone()
        elif module.endswith("experts") and name == "down_proj":
            for expert, fused in enumerate(tensor):
                out[f"{module}.{expert}.{down}.weight"] = fused.clone()
        else:
            out[key] = tensor.clone()
    return out


def plan_matches(pattern: str, names: list[str]) -> list[str]:
    """The names a parallel-plan pattern selects: ``*`` is exactly one dotted component."""
    regex = re.compile("^" + r"[^.]+".join(re.escape(part) for part in pattern.split("*")) + "$")
    return [name for name in names if regex.match(name)]


def _write_sharded(tensors: Mapping[str, torch.Tensor], folder: Path) -> None:
    """Two shards and an index, keys interleaved so every layer's experts straddle both shards."""
    folder.mkdir(parents=True, exist_ok=True)
    shards: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] = ({}, {})
    for position, (key, tensor) in enumerate(tensors.items()):
        shards[position % 2][key] = tensor.contiguous()
    weight_map = {}
    for number, shard in enumerate(shards, start=1):
        name = f"model-0000{number}-of-00002.safetensors"
        save_file(shard, str(folder / name))
        weight_map.update(dict.fromkeys(shard, name))
    (folder / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}), encoding="utf-8")


#: Whether upstream's causal LM of a declaration computes an aux loss, by (model_type, causal_lm).
_UPSTREAM_AUX: dict[tuple[str, str], bool] = {}


class MoeParitySuite(DenseParitySuite):
    """Generated vs upstream ``transformers`` for one MoE text model; subclasses set ``model``."""

    def _causal_lm_batch(self, config: PreTrainedConfig) -> dict[str, Any]:
        """The slot tests of the causal LM ask for router logits, so the aux loss goes through its slot too."""
        return self._batch(config)

    def _unreachable(self, slot: str) -> str | None:
        if slot == "load_balancing_loss" and not self._upstream_computes_an_aux_loss():
            return (
                f"upstream {self.model.causal_lm} records no router logits, so no training step reaches the "
                "load_balancing_loss slot (test_no_router_logits_gives_the_int_zero_aux_loss covers it)"
            )
        return None

    def _requires(self, slot: str, what: str) -> None:
        """Skip, naming the reason, a test of a structure this model's upstream does not have."""
        if slot not in self.model.guarded:
            pytest.skip(f"upstream {self.model.causal_lm} has no {what} (its scaffold guards no {slot} slot)")
        reason = self._unreachable(slot)
        if reason is not None:
            pytest.skip(reason)

    def _batch(self, config: PreTrainedConfig) -> dict[str, Any]:
        """The router batch where upstream computes an aux loss, else the plain one."""
        aux = "load_balancing_loss" in self.model.guarded and self._upstream_computes_an_aux_loss()
        return self._router_batch(config) if aux else causal_lm_batch(config)

    def _upstream_computes_an_aux_loss(self) -> bool:
        key = (self.model.model_type, self.model.causal_lm)
        if key not in _UPSTREAM_AUX:
            _UPSTREAM_AUX[key] = self._ask_upstream_for_an_aux_loss()
        return _UPSTREAM_AUX[key]

    def _ask_upstream_for_an_aux_loss(self) -> bool:
        config = self.model.config()
        upstream = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)(config)
        with torch.no_grad():
            try:
                out = upstream(**self._router_batch(config))
            except AttributeError as error:  # aux_loss.to() on the int 0
                if "'int' object has no attribute 'to'" in str(error):
                    return False
                raise
        return isinstance(out.aux_loss, torch.Tensor)

    def test_no_router_logits_gives_the_int_zero_aux_loss(self, backend: str) -> None:
        """Where upstream records no router logits its forward raises; the patched head adds nothing instead."""
        if "load_balancing_loss" not in self.model.guarded:
            pytest.skip(f"{self.model.causal_lm} guards no load_balancing_loss (upstream computes no aux loss)")
        if self._upstream_computes_an_aux_loss():
            pytest.skip(f"upstream {self.model.causal_lm} records router logits (the aux-loss tests cover it)")
        config = self.model.config()
        model = build_model(config, architecture=self.model.causal_lm, backend=backend)
        batch = causal_lm_batch(config)
        with torch.no_grad():
            plain = model(**batch).loss
            routed = model(**batch, output_router_logits=True)
        assert routed.aux_loss == 0 and not isinstance(routed.aux_loss, torch.Tensor)
        assert torch.equal(routed.loss, plain)

    # -- compiled with every layer, in a step that records router logits for the aux loss ----------------
    def test_decoder_layers_compiled_by_compile_layers_record_router_logits_and_train_as_eagerly(self) -> None:
        """``layer_compile.check_layers_compiled_while_recording``, on the model's first backend."""
        config = self.model.config()
        model = build_model(config, architecture=self.model.causal_lm, backend=self.model.backends[0])
        check_layers_compiled_while_recording(model, causal_lm_batch(config))

    def _router_batch(self, config: PreTrainedConfig) -> dict[str, Any]:
        batch: dict[str, Any] = causal_lm_batch(config)
        batch["output_router_logits"] = True
        return batch

    def _num_sparse_layers(self, config: PreTrainedConfig) -> int:
        model = build_model(config, architecture=self.model.causal_lm)
        return sum(name.endswith(".experts.gate_up_proj") for name, _ in model.named_parameters())

    def _num_recorded_routers(self, config: PreTrainedConfig) -> int:
        """How many modules upstream's ``_can_record_outputs`` records router logits from.

        One per sparse layer for most models; fewer where some routers record none (DeepSeek-V4 records
        its top-k routers, not its hash routers).
        """
        model = build_model(config, architecture=self.model.causal_lm)
        recorder = type(model)._can_record_outputs["router_logits"]
        target = getattr(recorder, "target_class", recorder)
        return sum(isinstance(module, target) for module in model.modules())

    # -- the auxiliary loss and router logits, eager ------------------------------------------------
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_aux_loss_logits_loss_and_gradients_match_upstream(self, backend: str, dtype: torch.dtype) -> None:
        self._requires("load_balancing_loss", "auxiliary loss")
        config = self.model.config()
        upstream, _ = check_parity(
            config, self.model.causal_lm, backend=backend, batch=self._router_batch(config), dtype=dtype
        )
        assert upstream.aux_loss is not None

    def test_router_logits_and_aux_loss_equal_upstreams(self, backend: str) -> None:
        self._requires("load_balancing_loss", "auxiliary loss")
        config = self.model.config()
        pair = build_pair(
            config,
            get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True),
            get_model_class(self.model.model_type, self.model.causal_lm, backend),
        )
        batch = self._router_batch(config)
        with torch.no_grad():
            expected, actual = pair.upstream(**batch), pair.generated(**batch)
        assert len(actual.router_logits) == len(expected.router_logits)
        if "moe_experts" in self.model.guarded:
            assert len(actual.router_logits) == self._num_recorded_routers(config)
        for layer, (want, got) in enumerate(zip(expected.router_logits, actual.router_logits)):
            assert torch.equal(got, want), f"router logits of sparse layer {layer} differ from upstream"
        assert torch.equal(actual.aux_loss, expected.aux_loss)

    def test_default_experts_implementation_matches_upstream(self, backend: str) -> None:
        """transformers' default experts path (grouped_mm) runs unchanged when the slot is unbound."""
        config = self.model.config(experts_implementation=None)
        check_parity(config, self.model.causal_lm, backend=backend, batch=self._batch(config))

    def test_no_sparse_layer_gives_the_int_zero_aux_loss_and_the_plain_loss(self, backend: str) -> None:
        """Upstream raises here (it indexes an empty tuple); the patched head adds nothing instead."""
        self._requires("load_balancing_loss", "auxiliary loss")
        base = self.model.config()
        if not hasattr(base, "mlp_only_layers"):
            pytest.skip(f"{type(base).__name__} has no mlp_only_layers to make every layer dense")
        config = self.model.config(mlp_only_layers=list(range(base.num_hidden_layers)))
        model = build_model(config, architecture=self.model.causal_lm, backend=backend)
        batch = causal_lm_batch(config)
        with torch.no_grad():
            plain = model(**batch).loss
            routed = model(**batch, output_router_logits=True)
        assert routed.router_logits == ()
        assert routed.aux_loss == 0 and not isinstance(routed.aux_loss, torch.Tensor)
        assert torch.equal(routed.loss, plain)

    # -- kernels ----------------------------------------------------------------------------------
    def test_grouped_experts_kernel_matches_upstream(self, backend: str) -> None:
        self._requires("moe_experts", "fused experts in the [E, 2I, H] layout")
        config = self.model.config()
        check_parity(config, self.model.causal_lm, backend=backend, ops=GROUPED_EXPERTS, batch=self._batch(config))

    def test_chunked_loss_with_the_aux_loss_matches_upstream(self, backend: str) -> None:
        self._requires("load_balancing_loss", "auxiliary loss")
        config = self.model.config()
        check_parity(config, self.model.causal_lm, backend=backend, ops=CHUNKED_LOSS, batch=self._router_batch(config))

    def test_causal_lm_consults_the_experts_and_aux_loss_slots(self, backend: str) -> None:
        config = self.model.config()
        model = build_model(config, architecture=self.model.causal_lm, backend=backend)
        calls: Counter[str] = Counter()
        with reference_kernels_bound(calls):
            model(**self._batch(config))
        if "moe_experts" in self.model.guarded:
            assert calls["moe_experts"] == self._num_sparse_layers(config)
        aux = "load_balancing_loss" in self.model.guarded and self._upstream_computes_an_aux_loss()
        assert calls["load_balancing_loss"] == (1 if aux else 0)

    def test_a_bound_experts_kernel_runs_whatever_the_experts_implementation(self, backend: str) -> None:
        """upstream's @use_experts_implementation dispatch cannot route around a bound kernel."""
        self._requires("moe_experts", "fused experts in the [E, 2I, H] layout")
        config = self.model.config(experts_implementation="grouped_mm")
        model = build_model(config, architecture=self.model.causal_lm, backend=backend)
        calls: Counter[str] = Counter()
        with reference_kernels_bound(calls):
            model(**causal_lm_batch(config))
        assert calls["moe_experts"] == self._num_sparse_layers(config)

    # -- expert parallelism -------------------------------------------------------------------------
    def test_parallel_plan_shards_every_fused_expert_tensor_by_expert(self, backend: str) -> None:
        self._requires("moe_experts", "fused experts in the [E, 2I, H] layout")
        config = self.model.config()
        model = build_model(config, architecture=self.model.causal_lm, backend=backend)
        state = model.state_dict()
        names = list(state)
        plan = model.get_parallel_plan()
        selected: set[str] = set()
        for pattern, placement in plan.items():
            matched = plan_matches(pattern, names)
            assert matched, f"parallel plan pattern {pattern!r} names no parameter of {type(model).__name__}"
            assert placement == "shard(0)"
            assert all(state[name].shape[0] == getattr(config, self.model.num_experts_attr) for name in matched)
            selected.update(matched)
        experts = {name for name in names if ".experts." in name}
        assert experts and experts == selected

    # -- checkpoints ----------------------------------------------------------------------------------
    def test_per_expert_checkpoint_loads_to_upstream_logits(self, backend: str, tmp_path: Path) -> None:
        """Hub-style per-expert shards -> the model's converter -> the generated model == upstream."""
        self._requires("moe_experts", "fused experts in the [E, 2I, H] layout")
        config = self.model.config()
        upstream_cls = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)
        seed_everything(0)
        upstream = upstream_cls(config).float().eval()
        _write_sharded(per_expert_state_dict(upstream.state_dict(), self.model.expert_projections), tmp_path)

        seed_everything(1)  # different initial weights: everything must come from the checkpoint
        generated = build_model(config, architecture=self.model.causal_lm, backend=backend).float().eval()
        load_checkpoint(generated, tmp_path)
        batch = causal_lm_batch(config)
        del batch["labels"]
        with torch.no_grad():
            assert torch.equal(generated(**batch).logits, upstream(**batch).logits)

    def test_converter_agrees_with_transformers_own_checkpoint_conversion(self, backend: str, tmp_path: Path) -> None:
        """The real upstream layout: transformers' from_pretrained reads the same per-expert file the same way."""
        self._requires("moe_experts", "fused experts in the [E, 2I, H] layout")
        if not self.model.hf_conversion:
            pytest.skip(f"transformers fuses no per-expert weights of {self.model.model_type} on load")
        config = self.model.config()
        upstream_cls = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)
        seed_everything(0)
        source = upstream_cls(config).float()
        config.save_pretrained(tmp_path)
        save_file(
            per_expert_state_dict(source.state_dict(), self.model.expert_projections),
            str(tmp_path / "model.safetensors"),
        )

        by_transformers = upstream_cls.from_pretrained(tmp_path, experts_implementation="eager").state_dict()
        seed_everything(1)
        ours = build_model(config, architecture=self.model.causal_lm, backend=backend)
        load_checkpoint(ours, tmp_path / "model.safetensors")
        for name, tensor in ours.state_dict().items():
            assert torch.equal(tensor, by_transformers[name]), f"{name} differs from transformers' own loading"

    def test_the_model_type_has_a_checkpoint_converter(self) -> None:
        self._requires("moe_experts", "fused experts in the [E, 2I, H] layout")
        config = self.model.config()
        converter = converter_for(config)
        assert converter is not None
        gate, _, down = self.model.expert_projections
        assert converter.can_handle(f"model.layers.0.mlp.experts.0.{gate}.weight")
        assert converter.can_handle(f"model.layers.0.mlp.experts.0.{down}.weight")
        assert converter.can_handle("model.layers.0.mlp.experts.down_proj")
        assert not converter.can_handle("model.layers.0.mlp.gate.weight")
