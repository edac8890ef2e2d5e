"""What the upstream source of one model says about its structure: the report of ``modelgraft.generator.upstream.reader``.

Plain frozen dataclasses, no logic: the reader fills them from the pinned modeling and configuration
modules (by path, with ``ast``), ``patchgen-inspect`` prints them, and the scaffold's fit
(``modelgraft.generator.recipes.fit``) turns them into recipe arguments or a refusal. A ``kind`` of ``"unknown"``
always comes with a ``reason``: the reader recognises a formulation only when upstream's code has
exactly one of the shapes it knows, so a guard it enables can never compute something else.

Every ``line`` is the 1-based line of the class or function in the upstream modeling file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelgraft.generator.upstream.read_audio_lm import AudioLmInfo
    from modelgraft.generator.upstream.read_omni import OmniInfo
    from modelgraft.generator.upstream.vlm_structure import VlmInfo

#: Norm formulations, each with the slot call that recomputes it:
#: ``rms_weight``           llama: ``weight * normed.to(input_dtype)``            -> rms_norm_slot(x, w, eps)
#: ``rms_one_plus_weight``  gemma: ``(normed * (1 + weight.float())).type_as(x)`` -> rms_norm_slot(x, w, eps, offset=1.0)
#: ``rms_weight_cast_last`` olmo2: ``(weight * normed).to(input_dtype)``           -> rms_norm_slot(x, w, eps, cast_last=True)
#: ``rms_unweighted``       no weight: ``normed.to(input_dtype)``                  -> no guard (no weight to pass)
#: ``layer_norm``           ``F.layer_norm(x, shape, weight, bias, eps)`` or a subclass of nn.LayerNorm
#:                                                                                -> layer_norm_slot(x, w, b, eps)
NORM_KINDS = ("rms_weight", "rms_one_plus_weight", "rms_weight_cast_last", "rms_unweighted", "layer_norm", "unknown")

#: MLP kinds: ``gated`` down(act(gate(x)) * up(x)); ``fused_gate_up`` gate_up_proj(x).chunk(2) (phi3, glm);
#: ``plain`` down(act(up(x))) (arcee, starcoder2's c_fc/c_proj).
MLP_KINDS = ("gated", "fused_gate_up", "plain", "unknown")

#: Router kinds: ``softmax_topk`` (qwen/mixtral: softmax, top-k, optional renormalisation);
#: ``sigmoid_group_limited`` (deepseek_v3: sigmoid scores, e_score_correction_bias, group-limited top-k);
#: ``topk_softmax`` (gpt_oss: biased logits, top-k, softmax over the k values in their own dtype).
ROUTER_KINDS = ("softmax_topk", "sigmoid_group_limited", "topk_softmax", "unknown")

#: Fused expert layouts: ``gate_up`` gate_up_proj [E, 2I, H] gate rows first, down_proj [E, H, I];
#: ``gate_up_transposed`` [E, H, 2I] / [E, I, H]; ``interleaved`` gate/up rows alternate (gpt_oss).
EXPERT_LAYOUTS = ("gate_up", "gate_up_transposed", "interleaved", "unknown")


@dataclass(frozen=True)
class NormInfo:
    cls: str
    line: int
    kind: str  # one of NORM_KINDS
    param: str | None = None  # forward's input parameter name ("hidden_states", "x")
    weight_attr: str | None = None  # "weight"
    bias_attr: str | None = None  # "bias" for a LayerNorm with bias
    eps_attr: str | None = None  # "variance_epsilon", "eps", "epsilon"
    reason: str = ""
    #: Source text of a literal eps written into forward (olmo's ``eps=1e-05``) when no attribute holds it.
    eps_value: str | None = None
    #: A layer_norm that computes in float32 and casts back to the input dtype (olmo).
    upcast: bool = False


@dataclass(frozen=True)
class MlpInfo:
    cls: str
    line: int
    kind: str  # one of MLP_KINDS
    param: str | None = None  # forward's input parameter name
    gate_attr: str | None = None  # "gate_proj" (gated), "gate_up_proj" (fused_gate_up)
    up_attr: str | None = None  # "up_proj", "c_fc", "w3" (lfm2); None for fused_gate_up
    down_attr: str | None = None  # "down_proj", "c_proj", "w2"
    act_attr: str | None = None  # "act_fn", "activation_fn"
    #: The config attribute the activation is read from in __init__ ("hidden_act", "hidden_activation").
    activation_config_attr: str | None = None
    #: An expression valid inside forward that names the activation ("self.config.hidden_act"); None when the
    #: module keeps no handle on it (then no slot can be told which activation to run).
    activation_expr: str | None = None
    #: The forward ends in a dropout of the MLP output (seed_oss's residual dropout).
    residual_dropout: bool = False
    reason: str = ""
    #: Source text of that trailing dropout call when residual_dropout ("nn.functional.dropout(x, p=..., ...)",
    #: "self.dropout(hidden_states)").
    dropout_expr: str | None = None


@dataclass(frozen=True)
class CallSites:
    """Torch modules a class of the model calls in its own forward (see ``read_calls``)."""

    cls: str
    line: int
    #: Attributes holding an ``nn.LayerNorm``, each called once in forward, or in several assignments of its own
    #: (OPT's, before or after a block as ``do_layer_norm_before`` says).
    layer_norms: tuple[str, ...] = ()
    #: Attributes whose module a config switch chooses, ``nn.LayerNorm`` among the choices (InternViT's
    #: ``NORM2FN[config.norm_type](...)``, ``nn.Identity() if ... else nn.LayerNorm(...)``), each called once in
    #: forward: guarded only while the module built is an ``nn.LayerNorm``.
    chosen_layer_norms: tuple[str, ...] = ()
    #: The attribute holding ``ACT2FN[config.<activation_config_attr>]``, called once in forward on one input.
    activation: str | None = None
    activation_config_attr: str | None = None
    #: For a torch activation module (``nn.GELU(approximate="tanh")``): the ACT2FN name computing the same.
    activation_name: str | None = None


@dataclass(frozen=True)
class RopeInfo:
    kind: str  # "function" (module-level), "method" (on a class), "none"
    name: str | None = None  # "apply_rotary_pos_emb"
    owner: str | None = None  # the class, for kind "method"
    line: int = 0
    params: tuple[str, ...] = ()  # ("q", "k", "cos", "sin", "unsqueeze_dim") or with "position_ids"
    #: "rotate_half" (llama), "rotate_half_partial" (gpt_neox), "rotate_half_cast_back" (olmo), "interleaved"
    #: (helium), "interleaved_partial" (glm), "interleaved_upcast" (ernie4_5), "interleaved_pairs_upcast"
    #: (cohere), or "unknown" (complex multiplication, other bodies).
    formulation: str = "unknown"
    reason: str = ""


@dataclass(frozen=True)
class CausalLmInfo:
    cls: str
    line: int
    params: tuple[str, ...] = ()
    #: Where forward is defined when inherited (a base class name), else None.
    inherited_from: str | None = None
    output_class: str | None = None  # "CausalLMOutputWithPast", "MoeCausalLMOutputWithPast"
    lm_head_bias: bool = False
    #: The output projection's attribute ("lm_head"; biogpt "output_projection", gpt_neox "embed_out").
    head_attr: str = "lm_head"
    #: Source text of the lm_head call's argument ("hidden_states[:, slice_indices, :]").
    hidden_arg: str | None = None
    logits_var: str | None = None  # "logits", "lm_logits"
    #: The vocabulary expression the loss call passes ("self.config.vocab_size", "self.vocab_size").
    vocab_size_expr: str | None = None
    #: Recognised steps between the lm_head call and the loss, in order, as (op, expression):
    #: ("softcap", "self.config.final_logit_softcapping"), ("scale_div", "self.config.logits_scaling"),
    #: ("scale_mul", "self.logit_scale"); "softcap_fp32" is a soft-cap of logits upcast to fp32 first; ("upcast", "")
    #: the head call's own ``.float()`` (mllama), which makes the returned logits fp32.
    postprocess: tuple[tuple[str, str], ...] = ()
    #: The forward computes the MoE aux loss with a call of this module-level function (MoE models).
    aux_loss_function: str | None = None
    #: Empty when the loss head can be guarded; else why not.
    reason: str = ""


@dataclass(frozen=True)
class SequenceClassificationInfo:
    cls: str
    line: int
    #: forward is GenericForSequenceClassification's (the usual case), not the model's own.
    generic: bool = True
    reason: str = ""


@dataclass(frozen=True)
class RouterInfo:
    cls: str
    line: int
    kind: str  # one of ROUTER_KINDS
    reason: str = ""
    #: For a body a router slot recomputes: the router's attributes the matched shape reads, by role, as the
    #: slot needs them ("weight", "top_k", and "n_group", "topk_group", "norm_topk_prob",
    #: "routed_scaling_factor" for ``sigmoid_group_limited``; "norm_topk_prob" for Qwen3-MoE's
    #: ``softmax_topk`` behind a flag; "bias" for ``topk_softmax``). Empty for a shape no slot recomputes.
    attributes: dict[str, str] = field(default_factory=dict)
    #: For a ``softmax_topk`` body the slot recomputes: the slot's keyword options that follow that body,
    #: all of them, defaults included: "upcast" ("dtype_arg": ``softmax(x, dtype=torch.float)``, "float_call":
    #: ``softmax(x.float())``), "cast_back" (weights back to the logits' dtype) and "always_renormalize"
    #: (no norm_topk_prob flag: mixtral, qwen3_5_moe). Empty otherwise.
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExpertsInfo:
    cls: str
    line: int
    layout: str  # one of EXPERT_LAYOUTS
    has_bias: bool = False
    #: An expression valid inside the sparse block's forward naming the experts' activation.
    activation_expr: str | None = None
    #: Source text of the experts' activation function when it is not a plain ACT2FN one (gpt_oss's clamped GLU).
    custom_activation: bool = False
    reason: str = ""
    #: The weights are stored ``[E, H, 2I]`` / ``[E, I, H]`` and applied as ``x @ W[e]`` (gpt_oss).
    transposed: bool = False
    #: Attributes of the experts holding the biases added after each matmul ("" for none).
    gate_up_bias: str = ""
    down_bias: str = ""
    #: A gated unit other than ``ACT(gate) * up`` that the reader recognised exactly ("" for none):
    #: "clamped_swiglu" is gpt_oss's ``(up.clamp(-l, l) + 1) * g * sigmoid(alpha * g)``, ``g = gate.clamp(max=l)``;
    #: "clamped" DeepSeek-V4's ``ACT(gate.clamp(max=l)) * up.clamp(-l, l)``; "activation_first" Step-3.7's
    #: ``ACT(gate).clamp(max=l) * up.clamp(-l, l)``, no clamp where ``l`` is None.
    gated_unit: str = ""
    #: The experts' attributes holding the clamp limit and alpha, and their values: the constants upstream
    #: assigns them, or the defaults of the config fields they are read from (None when not a number).
    limit_attr: str = ""
    limit: float | None = None
    alpha_attr: str = ""
    alpha: float | None = None
    #: The config fields ``__init__`` reads the limit and alpha from ("" when it assigns a constant).
    limit_config: str = ""
    alpha_config: str = ""


@dataclass(frozen=True)
class SharedExpertsInfo:
    attr: str  # "shared_expert", "shared_experts"
    cls: str | None = None
    gated: bool = False  # a sigmoid shared_expert_gate scales it (qwen2_moe)
    #: Attributes of ``cls`` that its ``__init__`` assigns a plain ``nn.Linear(...)``: what a slot can take as
    #: (weight, bias) pairs, so the whole shared-experts MLP can go behind gated_mlp_slot.
    linear_attrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class MoeInfo:
    sparse_block: str
    sparse_block_line: int
    #: The sparse block's forward calls ``self.experts(hidden, top_k_index, top_k_weights)`` exactly once.
    experts_call: bool = False
    router: RouterInfo | None = None
    experts: ExpertsInfo | None = None
    shared_experts: SharedExpertsInfo | None = None
    num_experts_attr: str | None = None  # "num_experts", "num_local_experts", "n_routed_experts"
    top_k_attr: str | None = None  # "num_experts_per_tok"
    intermediate_attr: str | None = None  # "moe_intermediate_size", "intermediate_size"
    #: How the config marks dense layers: "mlp_only_layers", "first_k_dense_replace", "decoder_sparse_step",
    #: "layer_types"-like lists, or None when every layer is sparse.
    dense_layers: str | None = None
    dense_mlp: str | None = None  # the MLP class of the dense layers
    reason: str = ""
    #: The conversion_mapping.py entry transformers loads hub checkpoints of this model_type with, and the
    #: per-expert projection names (gate, up, down) it fuses; empty when it fuses none.
    hf_conversion: str | None = None
    hub_projections: tuple[str, ...] = ()
    #: The decoder layer's attribute holding the sparse block ("mlp"; granitemoe "block_sparse_moe"); "" where the
    #: decoder layer is the sparse block and holds ``self.experts`` itself (gemma4).
    block_attr: str = "mlp"


@dataclass(frozen=True)
class GatedDeltaNetInfo:
    """A Gated DeltaNet mixer (``read_linear_attention``): the class calling both gated delta rules, and the
    module-level functions and gated norm class around it that the hybrid recipe's guards take."""

    mixer: str  # "Qwen3NextGatedDeltaNet"
    line: int
    chunk: str  # "torch_chunk_gated_delta_rule"
    recurrent: str  # "torch_recurrent_gated_delta_rule"
    #: The whole-sequence and decode-step causal conv the mixer calls (None: none of the slots' signature).
    conv: str | None = None
    conv_update: str | None = None
    #: The module-level functions through which the mixer's forward reaches each conv, outermost first: () when
    #: the forward calls it itself (transformers 5.16), ("causal_conv1d_forward",) in 5.25, whose body reads
    #: the cache's conv state and calls both convs. The guards stay on ``conv`` and ``conv_update``.
    conv_via: tuple[str, ...] = ()
    conv_update_via: tuple[str, ...] = ()
    #: The gated output norm, when its forward is the formulation rms_norm_gated recomputes (else None), with
    #: the attribute holding eps and the expression naming the gate's activation.
    norm: str | None = None
    norm_line: int = 0
    norm_eps_attr: str | None = None
    norm_activation: str | None = None
    #: The whole-sequence path honours packed documents: the mixer hands ``cu_seq_lens_q`` on to every call of
    #: the chunked delta rule (as ``cu_seqlens``) and its ``**kwargs``, still holding it, to the whole-sequence
    #: conv (through ``conv_via``), and its decoder layer hands the mixer its ``**kwargs``: kernels that honour
    #: the boundaries keep the documents apart.
    packed: bool = False
    #: Why a piece cannot be guarded ("" when all can).
    reason: str = ""


@dataclass(frozen=True)
class ShortConvolutionInfo:
    """A short-convolution mixer (``read_linear_attention``, lfm2's ``Lfm2ShortConv``): a gated depthwise causal
    conv and no recurrence of its own, whose convs the hybrid recipe's conv guards take as they take a Gated
    DeltaNet's."""

    mixer: str  # "Lfm2ShortConv"
    line: int
    #: The whole-sequence and decode-step causal conv the mixer reaches (None: none of the slots' signature), and
    #: the module-level functions in between (transformers 5.25: ``causal_conv1d_forward``).
    conv: str | None = None
    conv_update: str | None = None
    conv_via: tuple[str, ...] = ()
    conv_update_via: tuple[str, ...] = ()
    #: The mixer's ``**kwargs``, ``cu_seq_lens_q`` still in them, reach the whole-sequence conv, and its decoder
    #: layer hands the mixer its ``**kwargs``: a conv kernel that honours the boundaries keeps documents apart.
    packed: bool = False
    #: Why a conv cannot be guarded ("" when both can).
    reason: str = ""


@dataclass(frozen=True)
class Multipliers:
    """Scalars some models apply around the decoder (granite, minicpm, gemma): expressions as in upstream."""

    embedding: str | None = None  # "self.config.embedding_multiplier", gemma's "self.normalizer"
    residual: str | None = None  # "self.residual_multiplier"
    logits: str | None = None  # "self.config.logits_scaling"
    final_logit_softcapping: bool = False


@dataclass(frozen=True)
class ModelStructure:
    model: str  # the package under transformers/models/
    modeling_module: str  # "transformers.models.llama.modeling_llama"
    config_module: str | None
    prefix: str  # "Llama", "SmolLM3", "HunYuanDenseV1"
    model_type: str | None  # the config class's model_type ("gemma3_text")
    config_class: str | None  # "LlamaConfig"
    category: str  # a name of the category table (modelgraft.generator.categories), out_of_category included
    category_reason: str = ""
    #: Head kind -> class: "causal_lm", "sequence_classification", "token_classification", "question_answering".
    heads: dict[str, str] = field(default_factory=dict)
    causal_lm: CausalLmInfo | None = None
    sequence_classification: SequenceClassificationInfo | None = None
    norms: tuple[NormInfo, ...] = ()
    mlps: tuple[MlpInfo, ...] = ()
    rope: RopeInfo | None = None
    multipliers: Multipliers = field(default_factory=Multipliers)
    vocab_size_expr: str | None = None
    moe: MoeInfo | None = None
    #: Config attributes the model's config class defines with their defaults, as source text
    #: ("hidden_size": "4096", "layer_types": "None"): what a tiny test config has to satisfy.
    config_defaults: dict[str, str] = field(default_factory=dict)
    #: The decoder layer class the base model stacks, and the (dense) MLP class its ``self.mlp`` holds.
    decoder_layer: str | None = None
    decoder_mlp: str | None = None
    #: The base model class the causal LM builds ("LlamaModel", gemma3's "Gemma3TextModel").
    base_model: str | None = None
    #: Classes of the module that some other class of it instantiates (``Name(...)``): a norm or MLP class
    #: outside this set is dead code upstream, which no test could reach through its slot.
    instantiated: tuple[str, ...] = ()
    #: Module calls (nn.LayerNorm, ACT2FN activations) in the forward of classes that are not norm/MLP classes.
    call_sites: tuple[CallSites, ...] = ()
    #: Of those, the classes instantiated only in a branch (``RMSNorm(...) if config.rms_norm_eps else ...``).
    conditional: tuple[str, ...] = ()
    #: For a VLM (categories vlm, vlm_moe): its towers, mergers, get_rope_index, placeholder masks, processors
    #: and the Qwen-VL contract (``read_vlm``); None for every other category.
    vlm: VlmInfo | None = None
    #: For a Gated DeltaNet hybrid (qwen3_next, olmo_hybrid): its mixer (``read_linear_attention``); else None.
    linear_attention: GatedDeltaNetInfo | None = None
    #: For a short-convolution hybrid (lfm2, lfm2_moe): its mixer (``read_linear_attention``); else None.
    short_convolution: ShortConvolutionInfo | None = None
    #: For an Omni model (categories omni, omni_moe): the thinker, the speech side's attributes and the classes
    #: only they reach (``read_omni``); None for every other category.
    omni: OmniInfo | None = None
    #: For an Omni model that is not Qwen-Omni-like: its composed audio structure (an audio tower, a projector and
    #: a language model built from the sub-configs, ``read_audio_lm``); None for every other model.
    audio_lm: AudioLmInfo | None = None
    #: For a VLM that also defines a text-only ``*ForCausalLM`` (cohere_compass, aria): its conditional-generation
    #: head, and that head's config module, class and model_type. The fields above keep the text head's, which
    #: a text answer scaffolds (gemma3's ``Gemma3ForCausalLM``); :meth:`for_vlm` reads these instead.
    #: The DeepSeek sparse attention indexer class (``read_indexer``), whatever the category; None without one.
    dsa_indexer: str | None = None
    vlm_head: CausalLmInfo | None = None
    vlm_config: tuple[str | None, str | None, str | None] | None = None

    def for_vlm(self) -> ModelStructure:
        """The structure as a VLM answer scaffolds it: the conditional-generation head and its config, where the
        text head read first is a text-only causal LM; else itself."""
        if self.vlm_head is None or self.vlm_config is None:
            return self
        module, cls, model_type = self.vlm_config
        return replace(self, causal_lm=self.vlm_head, config_module=module, config_class=cls, model_type=model_type)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (patchgen-inspect --json, Copier answers)."""
        return asdict(self)
