"""The parity suite of an Omni thinker whose text decoder routes over experts (Qwen3-Omni-MoE), declared once.

It is the Omni suite (:class:`~modelgraft.models.testing.omni_suite.OmniParitySuite`: image, 2-frame video and audio
batches through the model's own processor, eager parity, each slot's reference kernel, both ``dummy_forward``
methods, position ids, the thinker-only top-level class) with the VLM + MoE suite's MoE tests
(:class:`~modelgraft.models.testing.vlm_moe_suite.VlmMoeParitySuite`: router logits and the aux loss, the grouped
experts kernel, the slots consulted per sparse layer, the expert-parallel plan, the per-expert checkpoint through
the converter), every batch asking for router logits.

The VLM + MoE suite's two hub-layout tests do not apply: that layout (fused, transposed) is Qwen3-VL-MoE's hub
format, and Qwen3-Omni-MoE's hub checkpoints store one ``nn.Linear`` per expert under the thinker's hub names
(``model.layers``, ``audio_tower``, ``visual``), which is what transformers' ``save_pretrained`` writes for it too (the
"qwen2_moe" and thinker conversions, reversed). What this suite checks instead is that real layout: upstream's own
``save_pretrained`` of the thinker and of the whole model, speech side included (whose talker has experts of other
sizes), read by ``load_checkpoint`` through the model's converter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from transformers import PreTrainedConfig

from modelgraft.models.checkpoint import load_checkpoint
from modelgraft.models.testing.omni_suite import OmniModel, OmniParitySuite, Row
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.vlm_moe_suite import VlmMoeParitySuite

__all__ = ["OmniMoeModel", "OmniMoeParitySuite"]


@dataclass(frozen=True)
class OmniMoeModel(OmniModel):
    """An Omni declaration whose batches ask for router logits, and whose config runs upstream's eager experts."""

    #: The router class upstream's ``_can_record_outputs`` records router logits from (one per sparse layer).
    router: str = ""

    def config(self, **overrides: Any) -> PreTrainedConfig:
        return super().config(**{"experts_implementation": "eager", **overrides})

    def load_options(self) -> dict[str, Any]:
        return {**super().load_options(), "experts_implementation": "eager"}

    def omni_batch(self, rows: list[Row], *, labels: bool = True, use_audio_in_video: bool = False) -> dict[str, Any]:
        """The Omni batch with ``output_router_logits``: every step then computes (and compares) the aux loss."""
        batch = super().omni_batch(rows, labels=labels, use_audio_in_video=use_audio_in_video)
        return {**batch, "output_router_logits": True}


def _saved(folder: Path) -> set[str]:
    keys: set[str] = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as handle:
            keys.update(handle.keys())
    return keys


class OmniMoeParitySuite(OmniParitySuite, VlmMoeParitySuite):
    """Generated vs upstream ``transformers`` for one Omni + MoE thinker; subclasses set ``model``."""

    model: Any  # OmniMoeModel

    # No fused transposed hub layout exists for this model (see the module docstring); its real layout is
    # checked by the two tests below.
    test_hub_layout_checkpoint_loads_as_transformers_loads_it = None
    test_hub_layout_is_told_from_the_other_projection_where_gate_up_is_square = None

    # -- router logits: the thinker's output holds them (transformers 5.16's left them out) ---------------------
    def _upstream_router_logits(self, upstream: Any, batch: Mapping[str, Any]) -> tuple[Any, list[torch.Tensor]]:
        """Upstream's output on ``batch`` and the logits each of its routers returned (first output)."""
        recorded: list[torch.Tensor] = []
        routers = [m for m in upstream.modules() if type(m).__name__ == self.model.router]
        hooks = [m.register_forward_hook(lambda _m, _i, out: recorded.append(out[0])) for m in routers]
        try:
            with torch.no_grad():
                output = upstream(**batch)
        finally:
            for hook in hooks:
                hook.remove()
        return output, recorded

    def test_router_logits_and_aux_loss_equal_upstreams(self, backend: str) -> None:
        pair = self._pair(backend)
        batch = self.model.multimodal_batch()
        expected, routers = self._upstream_router_logits(pair.upstream, batch)
        with torch.no_grad():
            actual = pair.generated(**batch)
        assert len(actual.router_logits) == len(routers) == self._sparse_layers(pair.generated)
        for layer, (want, got) in enumerate(zip(routers, actual.router_logits, strict=True)):
            assert torch.equal(got, want), f"router logits of sparse layer {layer} differ from upstream's routers"
        assert torch.equal(actual.aux_loss, expected.aux_loss)
        assert torch.equal(actual.loss, expected.loss)

    def test_output_holds_the_router_logits_as_upstreams_does(self, backend: str) -> None:
        pair = self._pair(backend)
        batch = self.model.multimodal_batch(labels=False)
        with torch.no_grad():
            expected, actual = pair.upstream(**batch).router_logits, pair.generated(**batch).router_logits
        assert expected is not None and actual is not None and len(actual) == len(expected)
        assert all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))

    # -- checkpoints: the real upstream layout ---------------------------------------------------------------
    def test_upstream_save_pretrained_writes_per_expert_weights_that_load_through_the_converter(
        self, backend: str, tmp_path: Path
    ) -> None:
        """transformers saves this model's experts one ``nn.Linear`` per expert under the hub's names (the text
        decoder's ``model.layers``, not the thinker model's ``model.language_model.layers``), as its hub checkpoints
        are."""
        upstream = self._noisy(self._upstream())
        upstream.save_pretrained(tmp_path)
        saved = _saved(tmp_path)
        assert "model.layers.0.mlp.experts.0.gate_proj.weight" in saved
        assert not any(key.endswith((".experts.gate_up_proj", ".experts.down_proj")) for key in saved)
        generated = self._generated_from(tmp_path, backend)
        assert torch.equal(self._logits(generated), self._logits(upstream))

    def test_whole_upstream_checkpoint_loads_through_the_converter_without_the_talkers_experts(
        self, backend: str, tmp_path: Path
    ) -> None:
        """The talker's experts (other sizes) are left to the top-level class, which drops the speech side."""
        upstream = self._whole_upstream()
        upstream.save_pretrained(tmp_path)
        assert any(key.startswith("talker.") and ".experts.0." in key for key in _saved(tmp_path))
        seed_everything(1)  # other initial weights than the source: everything must come from the checkpoint
        model = self._top_level(backend)(self.model.whole_config()).eval()
        load_checkpoint(model, tmp_path)
        self._assert_thinker_equal(model, upstream)
