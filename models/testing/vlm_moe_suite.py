"""The parity suite of a VLM whose text decoder routes over experts (Qwen3-VL-MoE), declared once per model.

It is the VLM suite (:class:`~modelgraft.models.testing.vlm_suite.VlmParitySuite`: processor batches, eager parity,
each slot's reference kernel, checkpoints both ways, ``dummy_forward``, position ids, the module tree) run with
router logits asked for in every batch, so the aux loss is part of every compared loss and the
``load_balancing_loss`` slot is reached, plus the MoE suite's pieces (docs/adding-a-model.md, "VLMs"):

- router logits and the aux loss ``torch.equal`` to upstream's on an image-and-video batch;
- the grouped experts kernel, and transformers' default experts path, against upstream;
- the experts, router and aux-loss slots each consulted as often as the model has sparse layers (or heads);
- the expert-parallel plan naming exactly the text stack's fused expert tensors;
- checkpoints: per-expert safetensors shards through the model's converter, and the hub's own layout
  (``[E, H, 2I]`` under the fused names), read by the converter as transformers' ``from_pretrained`` reads it,
  also where a square shape cannot tell the layout.

The tiny config runs upstream's experts with ``experts_implementation="eager"`` (the per-expert loop the
``moe_experts`` reference kernel implements), as the MoE suite does.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from transformers import PreTrainedConfig, PreTrainedModel

from modelgraft.models.checkpoint import load_checkpoint
from modelgraft.models.converters import converter_for
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.testing.dense_suite import reference_kernels_bound
from modelgraft.models.testing.layer_compile import check_layers_compiled_while_recording
from modelgraft.models.testing.moe_suite import GROUPED_EXPERTS, _write_sharded, per_expert_state_dict, plan_matches
from modelgraft.models.testing.parity import check_parity
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.vlm_suite import VlmModel, VlmParitySuite

__all__ = ["VlmMoeModel", "VlmMoeParitySuite", "hub_layout_state_dict"]

#: The fused expert tensors of a state_dict, by the end of their key.
_FUSED = (".experts.gate_up_proj", ".experts.down_proj")


@dataclass(frozen=True)
class VlmMoeModel(VlmModel):
    """A VLM declaration whose batches ask for router logits, and whose config runs upstream's eager experts."""

    #: The router class upstream's ``_can_record_outputs`` records router logits from (one per sparse layer).
    router: str = ""

    def config(self, **overrides: Any) -> PreTrainedConfig:
        return super().config(**{"experts_implementation": "eager", **overrides})

    def load_options(self) -> dict[str, Any]:
        return {**super().load_options(), "experts_implementation": "eager"}

    def batch(self, rows: list[tuple[str, list[Any], list[Any]]], *, labels: bool = True) -> dict[str, Any]:
        """The VLM batch with ``output_router_logits``: every step then computes (and compares) the aux loss."""
        return {**super().batch(rows, labels=labels), "output_router_logits": True}


def hub_layout_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` as the hub stores this model: fused expert tensors transposed (``[E, H, 2I]``, ``[E, I, H]``)."""
    return {
        key: tensor.transpose(-2, -1).contiguous() if key.endswith(_FUSED) else tensor.clone()
        for key, tensor in state_dict.items()
    }


class VlmMoeParitySuite(VlmParitySuite):
    """Generated vs upstream ``transformers`` for one VLM with a MoE text decoder; subclasses set ``model``."""

    model: VlmMoeModel  # type: ignore[assignment]

    def _sparse_layers(self, model: PreTrainedModel) -> int:
        return sum(name.endswith(".experts.gate_up_proj") for name, _ in model.named_parameters())

    # -- compiled with every text layer, in a step that records router logits for the aux loss ---------
    def test_text_decoder_layers_compiled_by_compile_layers_record_router_logits_and_train_as_eagerly(self) -> None:
        """``layer_compile.check_layers_compiled_while_recording`` on the text decoder, on the multimodal batch,
        on the model's first backend."""
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=self.model.backends[0])
        check_layers_compiled_while_recording(model, self.model.multimodal_batch())

    # -- router logits and the aux loss --------------------------------------------------------------
    def test_router_logits_and_aux_loss_equal_upstreams(self, backend: str) -> None:
        pair = self._pair(backend)
        batch = self.model.multimodal_batch()
        with torch.no_grad():
            expected, actual = pair.upstream(**batch), pair.generated(**batch)
        assert len(actual.router_logits) == len(expected.router_logits) == self._sparse_layers(pair.generated)
        for layer, (want, got) in enumerate(zip(expected.router_logits, actual.router_logits, strict=True)):
            assert torch.equal(got, want), f"router logits of sparse layer {layer} differ from upstream"
        if "load_balancing_loss" in self.model.guarded:
            assert torch.equal(actual.aux_loss, expected.aux_loss)
        else:  # upstream's head computes no aux loss (HY-V4-VL): neither does the generated one
            assert actual.aux_loss is None and expected.aux_loss is None
        assert torch.equal(actual.loss, expected.loss)

    def test_router_logits_cover_every_text_token_of_the_batch(self, backend: str) -> None:
        """One row per token of the padded batch, vision placeholders included: the aux loss balances them all."""
        batch = self.model.multimodal_batch(labels=False)
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        with torch.no_grad():
            out = model(**batch)
        experts = self.model.config().text_config.num_experts
        assert {tuple(logits.shape) for logits in out.router_logits} == {(batch["input_ids"].numel(), experts)}

    # -- kernels ----------------------------------------------------------------------------------
    def test_grouped_experts_kernel_matches_upstream(self, backend: str) -> None:
        self._parity(backend, self.model.multimodal_batch(), ops=GROUPED_EXPERTS)

    def test_default_experts_implementation_matches_upstream(self, backend: str) -> None:
        """transformers' default experts path (grouped_mm) runs unchanged when the slot is unbound."""
        config = self.model.config(experts_implementation=None)
        check_parity(config, self.model.causal_lm, backend=backend, batch=self.model.multimodal_batch())

    def test_experts_router_and_aux_loss_slots_are_consulted_once_per_sparse_layer_and_head(
        self, backend: str
    ) -> None:
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        calls: Counter[str] = Counter()
        with reference_kernels_bound(calls):
            model(**self.model.multimodal_batch())
        sparse = self._sparse_layers(model)
        assert sparse > 0
        assert calls["moe_experts"] == calls["softmax_topk_router"] == sparse
        assert calls["load_balancing_loss"] == int("load_balancing_loss" in self.model.guarded)

    def test_a_bound_experts_kernel_runs_whatever_the_experts_implementation(self, backend: str) -> None:
        """upstream's @use_experts_implementation dispatch cannot route around a bound kernel."""
        model = build_model(
            self.model.config(experts_implementation="grouped_mm"), architecture=self.model.causal_lm, backend=backend
        )
        calls: Counter[str] = Counter()
        with reference_kernels_bound(calls):
            model(**self.model.multimodal_batch())
        assert calls["moe_experts"] == self._sparse_layers(model)

    # -- expert parallelism -------------------------------------------------------------------------
    def test_parallel_plan_shards_every_fused_expert_tensor_by_expert(self, backend: str) -> None:
        config = self.model.config()
        model = build_model(config, architecture=self.model.causal_lm, backend=backend)
        state = model.state_dict()
        names = list(state)
        selected: set[str] = set()
        for pattern, placement in model.get_parallel_plan().items():
            matched = plan_matches(pattern, names)
            assert matched, f"parallel plan pattern {pattern!r} names no parameter of {type(model).__name__}"
            assert placement == "shard(0)"
            assert all(state[name].shape[0] == config.text_config.num_experts for name in matched)
            selected.update(matched)
        experts = {name for name in names if ".experts." in name}
        assert experts and experts == selected

    # -- checkpoints ----------------------------------------------------------------------------------
    def _upstream(self, seed: int = 0, **overrides: Any) -> PreTrainedModel:
        seed_everything(seed)
        config = self.model.config(**overrides)
        return get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)(config).float().eval()

    def _generated_from(self, path: Path, backend: str, **overrides: Any) -> PreTrainedModel:
        seed_everything(1)  # other initial weights than the source: everything must come from the checkpoint
        model = build_model(self.model.config(**overrides), architecture=self.model.causal_lm, backend=backend)
        load_checkpoint(model.float().eval(), path)
        return model

    def test_per_expert_checkpoint_loads_to_upstream_logits(self, backend: str, tmp_path: Path) -> None:
        """Per-expert shards (experts straddling both) -> the model's converter -> the generated model == upstream."""
        upstream = self._upstream()
        _write_sharded(per_expert_state_dict(upstream.state_dict()), tmp_path)
        generated = self._generated_from(tmp_path, backend)
        assert torch.equal(self._logits(generated), self._logits(upstream))

    def test_hub_layout_checkpoint_loads_as_transformers_loads_it(self, backend: str, tmp_path: Path) -> None:
        """The hub's layout, fused tensors ``[E, H, 2I]`` / ``[E, I, H]``: transformers transposes them on load
        (conversion_mapping.py, "qwen3_vl_moe"), and the converter must read the same file to the same weights."""
        self._hub_layout_loads_as_transformers_loads_it(backend, tmp_path)

    def test_hub_layout_is_told_from_the_other_projection_where_gate_up_is_square(
        self, backend: str, tmp_path: Path
    ) -> None:
        """hidden_size == 2 * moe_intermediate_size: ``gate_up_proj`` reads the same both ways round, so only
        ``down_proj`` shows the layout; the converter waits for it instead of guessing from the shape.

        transformers' own loading decides by the shape alone (``Transpose(check_dims=True)`` keeps a tensor whose
        shape already fits), so it leaves the square ``gate_up_proj`` of a hub checkpoint untransposed: here the
        converter is held to the saved model, and to transformers only where transformers can tell.
        """
        text = self.model.config().text_config.to_dict()
        square = {"text_config": {**text, "moe_intermediate_size": text["hidden_size"] // 2}}
        source = self._upstream(**square)
        ours, by_transformers = self._hub_layout_round_trip(source, backend, tmp_path, **square)
        for name, tensor in ours.items():
            assert torch.equal(tensor, source.state_dict()[name]), f"{name} differs from the saved model"
            if not name.endswith(".experts.gate_up_proj"):
                assert torch.equal(tensor, by_transformers[name]), f"{name} differs from transformers' own loading"

    def _hub_layout_loads_as_transformers_loads_it(self, backend: str, folder: Path) -> None:
        source = self._upstream()
        ours, by_transformers = self._hub_layout_round_trip(source, backend, folder)
        for name, tensor in ours.items():
            assert torch.equal(tensor, by_transformers[name]), f"{name} differs from transformers' own loading"
            assert torch.equal(tensor, source.state_dict()[name]), f"{name} differs from the saved model"

    def _hub_layout_round_trip(
        self, source: PreTrainedModel, backend: str, folder: Path, **overrides: Any
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """``source`` saved in the hub's layout; the state loaded by the converter and by transformers."""
        source.config.save_pretrained(folder)
        save_file(hub_layout_state_dict(source.state_dict()), str(folder / "model.safetensors"))
        upstream_cls = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)
        by_transformers = upstream_cls.from_pretrained(folder, experts_implementation="eager").state_dict()
        ours = self._generated_from(folder / "model.safetensors", backend, **overrides).state_dict()
        return ours, by_transformers

    def test_the_model_type_has_a_checkpoint_converter_for_its_expert_keys(self) -> None:
        converter = converter_for(self.model.config())
        assert converter is not None
        prefix = "model.language_model.layers.0.mlp.experts"
        assert converter.can_handle(f"{prefix}.gate_up_proj") and converter.can_handle(f"{prefix}.down_proj")
        assert converter.can_handle(f"{prefix}.0.gate_proj.weight")
        assert converter.can_handle(f"{prefix}.0.down_proj.weight")
        assert not converter.can_handle("model.language_model.layers.0.mlp.gate.weight")
        assert not converter.can_handle("model.visual.blocks.0.mlp.linear_fc1.weight")

    def test_model_holds_upstreams_experts_layout(self) -> None:
        """The generated modeling keeps upstream's ``[E, 2I, H]`` / ``[E, H, I]`` (what the converter fuses into)."""
        config = self.model.config()
        text = config.text_config
        model = build_model(config, architecture=self.model.causal_lm)
        shapes = {
            name.rsplit(".", 1)[1]: tuple(p.shape) for name, p in model.named_parameters() if ".experts." in name
        }
        e, h, i = text.num_experts, text.hidden_size, text.moe_intermediate_size
        assert shapes == {"gate_up_proj": (e, 2 * i, h), "down_proj": (e, h, i)}
