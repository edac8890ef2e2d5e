"""Gemma3 (dense text, and its composed VLM), GPU backend: op-slot guards and the fused-loss heads.

The text path, model_type "gemma3_text": ``Gemma3ForCausalLM`` and ``Gemma3TextForSequenceClassification`` on
``Gemma3TextConfig``. Differences from llama handled by the recipe: the (1 + weight) RMSNorm,
``hidden_activation``, and final logit softcapping (also passed to a fused loss kernel).

The VLM, model_type "gemma3": ``Gemma3ForConditionalGeneration`` on ``Gemma3Config``, through the composed-VLM
recipe. ``Gemma3Model`` builds its SigLIP tower and its ``Gemma3TextModel`` as generated classes (the library's
SigLIP, this module's text model), its ``dummy_forward`` runs the tower and the projector on a blank image, and
the head's logits and loss go behind the causal_lm_loss slot. The projector's norm is a ``Gemma3RMSNorm``, guarded
with the text model's. ``Gemma3Model.forward`` stays upstream's (no sequence-parallel branches): its image tokens
attend to each other both ways, which a slice of the sequence per rank would cut. ``Gemma3ForSequenceClassification`` has its own forward and stays upstream's.
"""

from modelgraft.generator import PatchConfig
from modelgraft.generator.recipes import LossHead, Mlp, Norm, composed_vlm, dense_text

config = PatchConfig(
    source_module="transformers.models.gemma3.modeling_gemma3",
    target_file="patched_modeling_gemma3_gpu.py",
    description="Gemma3 text and VLM with op-slot guards (RMSNorm, gated MLP, RoPE), generated towers and slot-backed losses",
)
dense_text(
    config,
    prefix="Gemma3",
    norms=[Norm(formulation="rms_one_plus_weight", eps="eps")],
    mlps=[Mlp(activation="self.config.hidden_activation")],
    causal_lm=LossHead(softcap="self.config.final_logit_softcapping"),
    sequence_classification="Gemma3TextForSequenceClassification",
    base_model="Gemma3TextModel",
)
composed_vlm(config, prefix="Gemma3", pretrained_model=None, sequence_parallel=False)
