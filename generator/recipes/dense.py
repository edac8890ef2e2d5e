"""The dense text-model recipe: slot guards for the norms, gated MLPs, RoPE and both loss heads, and what the
model's ``<Prefix>PreTrainedModel`` changes against upstream (checkpoint conversions, strict loading, attention
implementations on request).

Every guard keeps upstream's own code as the eager path (the snippets put the guard in front of, or
around, upstream's statements), so a dense config is one PatchConfig plus one :func:`dense_text` call
that lists what the model has; everything else comes from the shared snippets.
"""

from __future__ import annotations

from collections.abc import Sequence

from modelgraft.generator.dsl.call_site import call_site
from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.errors import PatchApiError
from modelgraft.generator.recipes.parts import CallSites, LossHead, Mlp, Norm, Rope


def _named(template: str, prefix: str) -> str:
    return template.format(prefix=prefix)


def apply_norms(config: PatchConfig, norms: Sequence[Norm], *, prefix: str) -> None:
    """Each norm's forward behind the rms_norm slot."""
    for norm in norms:
        config.apply_snippet(
            "rms_norm_guard",
            f"{_named(norm.cls, prefix)}.forward",
            formulation=norm.formulation,
            eps=norm.eps,
            weight=norm.weight,
            description="rms_norm slot guard",
        )


def apply_mlps(config: PatchConfig, mlps: Sequence[Mlp], *, prefix: str, description: str) -> None:
    """Each MLP's activation behind its slot (glu_activation for gated ones, activation for plain ones).

    An ``Mlp(whole=True)`` goes behind gated_mlp instead, as one unit; it does not also get the
    glu_activation guard, so a bound whole-MLP kernel is never bypassed and no slot of it goes unconsulted.
    """
    for mlp in mlps:
        cls = _named(mlp.cls, prefix)
        if mlp.init_activation:
            config.apply_snippet(
                "activation_name_init",
                cls,
                kind="modify_init",
                config_attr=mlp.init_activation,
                description="record the activation's name for the slot guard",
            )
        if mlp.kind == "plain":
            config.apply_snippet(
                "mlp_activation_guard",
                f"{cls}.forward",
                act=mlp.act,
                activation=mlp.activation,
                description="activation slot guard",
            )
            continue
        if mlp.whole:
            if mlp.kind != "gated":
                raise PatchApiError(
                    f"Mlp {cls}: whole=True needs kind='gated' (separate gate and up), got {mlp.kind!r}",
                    target=f"{cls}.forward",
                    location=call_site(),
                )
            config.apply_snippet(
                "gated_mlp_guard",
                f"{cls}.forward",
                gate=mlp.gate,
                up=mlp.up,
                down=mlp.down,
                activation=mlp.activation,
                description="the whole MLP behind the gated_mlp slot",
            )
            continue
        config.apply_snippet(
            "glu_mlp_guard",
            f"{cls}.forward",
            layout=mlp.kind,
            gate=mlp.gate,
            up=mlp.up,
            down=mlp.down,
            activation=mlp.activation,
            description=description,
        )


def apply_call_sites(config: PatchConfig, sites: Sequence[CallSites], *, prefix: str) -> None:
    """Each class's calls of nn.LayerNorm and ACT2FN modules behind the layer_norm and activation slots."""
    for site in sites:
        cls = _named(site.cls, prefix)
        if site.activation and not site.activation_name:
            config.apply_snippet(
                "activation_name_init",
                cls,
                kind="modify_init",
                config_attr=site.activation_config,
                description="record the activation's name for the slot guard",
            )
        config.apply_snippet(
            "call_sites_guard",
            f"{cls}.forward",
            layer_norms=list(site.layer_norms),
            chosen_layer_norms=list(site.chosen_layer_norms),
            activation=site.activation,
            activation_name=repr(site.activation_name) if site.activation_name else "self.activation_name",
            description="layer_norm and activation slot guards at the module calls",
        )


def apply_rope(config: PatchConfig, rope: str | Rope | None) -> None:
    """The module-level RoPE function behind the rope slot (None: the model has none to guard)."""
    if rope is None:
        return
    part = Rope(rope) if isinstance(rope, str) else rope
    config.apply_snippet("rope_guard", part.function, formulation=part.formulation, description="rope slot guard")


def apply_causal_lm(
    config: PatchConfig, head: LossHead, *, prefix: str, aux_loss: str = "", forward_kwargs: bool = False
) -> str:
    """The causal LM's logits and loss behind causal_lm_loss (and the aux loss behind its slot).

    ``forward_kwargs``: the kernel also gets the forward's ``**kwargs`` where upstream's loss call drops them
    (Qwen3-VL: a caller's ``shift_labels`` and ``num_items_in_batch``); upstream's eager path stays as it is.
    """
    cls = _named(head.cls, prefix)
    options = {"forward_kwargs": True} if forward_kwargs else {}
    if head.softcap_fp32:
        options["softcap_fp32"] = True
    if head.logits_fp32:
        options["logits_fp32"] = True
    config.apply_snippet(
        "causal_lm_loss_guard",
        f"{cls}.forward",
        softcap=head.softcap,
        scale=tuple(head.scale),
        head=head.head,
        bias=head.bias,
        router_logits=tuple(head.router_logits),
        aux_loss=aux_loss,
        **options,
        description="logits and loss behind the causal_lm_loss slot"
        + ("; aux loss behind the load_balancing_loss slot" if aux_loss else ""),
    )
    return cls


def apply_sequence_classification(
    config: PatchConfig, head: str | None, *, prefix: str, base_model: str = "{prefix}Model"
) -> None:
    """``<head>`` (upstream's generic head): its loss behind a slot, its base model this module's; None: no head.

    The generic head builds its base model with ``AutoModel``, which would be upstream's class, so the
    classifier would run none of the generated module's slot guards; its ``__init__`` builds ``base_model``.
    """
    if head is None:
        return
    cls = _named(head, prefix)
    config.apply_snippet(
        "sequence_classification_init",
        f"{cls}.__init__",
        base_model=_named(base_model, prefix),
        description="the base model is this module's, not AutoModel's",
    )
    config.apply_snippet(
        "sequence_classification_forward",
        f"{cls}.forward",
        description="sequence_classification_loss slot",
    )


#: The snippets every model's ``<Prefix>PreTrainedModel`` gets, by method (docs/design.md, "What a generated
#: class changes against upstream"). ``from_pretrained`` passes upstream's keyword parameters on through
#: ``**kwargs``, so its signature check is off (the snippet's comment says why).
PRETRAINED_MODEL_SNIPPETS: tuple[tuple[str, str, str, bool], ...] = (
    ("is_custom_code", "upstream_checkpoint_layout", "upstream's checkpoint conversions apply, both ways", True),
    ("from_pretrained", "strict_from_pretrained", "strict loading by default; strict=False is upstream's", False),
    (
        "get_correct_attn_implementation",
        "register_attention_on_request",
        "fused_attention registered when a model asks for it",
        True,
    ),
)


def apply_pretrained_model(config: PatchConfig, pretrained_model: str | None, *, prefix: str) -> None:
    """What the model's base class changes against upstream, written into it so the generated file says so.

    Every model class of the module derives from ``pretrained_model`` (None: the model has none; nothing is
    added), so its overrides of ``is_custom_code``, ``from_pretrained`` and ``get_correct_attn_implementation``
    reach every class, and nothing has to patch a class at run time.
    """
    if pretrained_model is None:
        return
    cls = _named(pretrained_model, prefix)
    for method, snippet, description, check_signature in PRETRAINED_MODEL_SNIPPETS:
        config.apply_snippet(snippet, f"{cls}.{method}", description=description, check_signature=check_signature)


#: The run-time check every recipe's output calls after its imports (docs/design.md, "Generated from one upstream
#: version"); a dotted string, so generation never imports the run time.
UPSTREAM_VERSION_CHECK = "modelgraft.models.upstream_version.require_generated_from"


def apply_upstream_version_check(config: PatchConfig) -> None:
    """The output refuses to import under another upstream version than the one it is generated from.

    Every category recipe calls it, so every model config and every scaffold gets the check; a recipe that
    calls another (``vlm_moe`` calls ``vlm``) asks twice, which the primitive allows.
    """
    config.require_upstream_version(check=UPSTREAM_VERSION_CHECK)


def dense_text(
    config: PatchConfig,
    *,
    prefix: str,
    norms: Sequence[Norm] = (Norm(),),
    mlps: Sequence[Mlp] = (Mlp(),),
    call_sites: Sequence[CallSites] = (),
    rope: str | Rope | None = "apply_rotary_pos_emb",
    causal_lm: LossHead = LossHead(),
    sequence_classification: str | None = "{prefix}ForSequenceClassification",
    base_model: str = "{prefix}Model",
    pretrained_model: str | None = "{prefix}PreTrainedModel",
) -> PatchConfig:
    """Apply the dense snippets to ``config`` for the model whose classes start with ``prefix``.

    The defaults are llama's; a model passes what it has instead (``norms=()`` when no norm fits a
    slot, ``rope=None`` without a module-level RoPE function, ``sequence_classification=None`` without
    that head; ``base_model`` is the class that head builds). ``call_sites`` names classes whose forward calls nn.LayerNorm / ACT2FN modules directly.
    ``pretrained_model`` is the base class of every model class (:func:`apply_pretrained_model`). The output
    refuses to import under another upstream version (:func:`apply_upstream_version_check`).
    """
    apply_upstream_version_check(config)
    apply_norms(config, norms, prefix=prefix)
    apply_mlps(config, mlps, prefix=prefix, description="glu_activation slot guard")
    apply_call_sites(config, call_sites, prefix=prefix)
    apply_rope(config, rope)
    apply_causal_lm(config, causal_lm, prefix=prefix)
    apply_sequence_classification(config, sequence_classification, prefix=prefix, base_model=base_model)
    apply_pretrained_model(config, pretrained_model, prefix=prefix)
    return config
