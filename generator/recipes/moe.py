"""The MoE text-model recipe: the dense slot guards plus the routed experts, the aux loss and the expert plan.

A MoE config is then one PatchConfig plus one :func:`moe_text` call. What a MoE model of the pinned
transformers has upstream is kept: fused experts (``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``), its
router (softmax top-k or sigmoid group-limited, whatever upstream computes), shared experts and their
gates, and ``_can_record_outputs`` recording the router logits. The recipe adds:

- the dense pieces, same snippets as :func:`modelgraft.generator.recipes.dense_text` (norms, the MLPs of dense
  layers and shared experts, RoPE, the classification head);
- ``moe_experts_guard``: the sparse block's call of its routed experts behind ``moe_experts_slot``;
- ``<kind>_router_guard`` for a ``router``: its forward behind the router slot of its kind, DeepSeek-V3's
  sigmoid, group-limited router behind ``group_limited_router_slot``, Qwen3-MoE's softmax-then-top-k one
  behind ``softmax_topk_router_slot``, gpt_oss's top-k-then-softmax one behind ``topk_softmax_router_slot``
  (the routing stays in the router, as upstream has it);
- ``causal_lm_loss_guard`` with ``aux_loss``: the fused-loss head plus upstream's aux-loss call behind
  ``load_balancing_loss_slot``;
- ``moe_parallel_plan``: an added ``get_parallel_plan`` sharding the fused expert tensors by expert;
- the base class's checkpoint conversions, strict loading and attention on request, as for a dense model
  (:func:`modelgraft.generator.recipes.dense.apply_pretrained_model`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modelgraft.generator.dsl.call_site import call_site
from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.errors import PatchApiError
from modelgraft.generator.recipes.dense import (
    _named,
    apply_call_sites,
    apply_causal_lm,
    apply_mlps,
    apply_norms,
    apply_pretrained_model,
    apply_rope,
    apply_sequence_classification,
    apply_upstream_version_check,
)
from modelgraft.generator.recipes.parts import (
    ROUTER_OPTIONS,
    ROUTER_ROLES,
    CallSites,
    Experts,
    LossHead,
    Mlp,
    Norm,
    Rope,
    Router,
    router_roles,
)


def moe_text(
    config: PatchConfig,
    *,
    prefix: str,
    norms: Sequence[Norm] = (Norm(),),
    mlps: Sequence[Mlp] = (Mlp(),),
    call_sites: Sequence[CallSites] = (),
    rope: str | Rope | None = "apply_rotary_pos_emb",
    causal_lm: LossHead = LossHead(),
    experts: Experts | None = Experts(),
    router: Router | None = None,
    aux_loss: str = "load_balancing_loss_func",
    layers: str = "model.layers",
    sparse_block_attr: str = "mlp",
    sequence_classification: str | None = "{prefix}ForSequenceClassification",
    base_model: str = "{prefix}Model",
    pretrained_model: str | None = "{prefix}PreTrainedModel",
    indexer: str | None = None,
) -> PatchConfig:
    """Apply the MoE snippets to ``config`` for the model whose classes start with ``prefix``.

    The defaults are qwen3_moe's. ``aux_loss`` names the module-level function upstream's causal LM
    calls for the router's auxiliary loss ("" when it has none); ``layers`` is the state_dict prefix of
    the decoder layers and ``sparse_block_attr`` the layer attribute holding the sparse block, for the
    parallel plan; ``experts=None`` leaves the routed experts unguarded (a layout no kernel reads).
    ``router`` puts the router's forward behind its slot (None, the default: the router stays upstream's).
    ``pretrained_model`` is the base class of every model class, as for :func:`dense_text`.
    ``indexer`` names a DeepSeek sparse attention indexer class (DeepSeek-V3.2's), whose scoring, mask and top-k
    go behind the ``dsa_indexer`` slot, where sequence parallelism binds its whole-sequence kernel.
    """
    apply_upstream_version_check(config)
    apply_norms(config, norms, prefix=prefix)
    apply_mlps(config, mlps, prefix=prefix, description="glu_activation slot guard (dense layers, shared experts)")
    apply_call_sites(config, call_sites, prefix=prefix)
    apply_rope(config, rope)
    if experts is not None:
        config.apply_snippet(
            "moe_experts_guard",
            f"{_named(experts.sparse_block, prefix)}.forward",
            activation=experts.activation,
            layout=experts.layout,
            interleaved=experts.interleaved,
            gate_up_bias=experts.gate_up_bias,
            down_bias=experts.down_bias,
            limit=experts.limit,
            alpha=experts.alpha,
            activation_first=experts.activation_first,
            description="routed experts behind the moe_experts slot",
        )
    if router is not None:
        apply_router(config, router, prefix=prefix)
    if indexer is not None:
        config.apply_snippet(
            "dsa_indexer_guard",
            f"{_named(indexer, prefix)}.forward",
            description="DSA indexer's scores, mask and top-k behind the dsa_indexer slot",
        )
    causal_lm_cls = apply_causal_lm(config, causal_lm, prefix=prefix, aux_loss=aux_loss)
    if experts is not None:
        config.apply_snippet(
            "moe_parallel_plan",
            f"{causal_lm_cls}.get_parallel_plan",
            add=True,
            prefix=prefix,
            layers=layers,
            block=sparse_block_attr,
            biases=[bias for bias in (experts.gate_up_bias, experts.down_bias) if bias],
            description="expert-parallel plan of the fused expert tensors",
        )
    apply_sequence_classification(config, sequence_classification, prefix=prefix, base_model=base_model)
    apply_pretrained_model(config, pretrained_model, prefix=prefix)
    return config


#: Router kinds a recipe can guard, with the snippet that does it (``<kind>_router_guard``, one per slot).
ROUTER_SNIPPETS = {kind: f"{kind}_router_guard" for kind in ROUTER_ROLES}


def _router_variables(router: Router) -> dict[str, Any]:
    """The snippet variables for ``router``: its roles' attributes, then its non-default options."""
    defaults = Router()
    options = {
        name: getattr(router, name)
        for name in ROUTER_OPTIONS[router.kind]
        if getattr(router, name) != getattr(defaults, name)
    }
    roles = router_roles(router.kind, options)
    return {**{role: getattr(router, role) for role in roles}, **options}


def apply_router(config: PatchConfig, router: Router, *, prefix: str) -> None:
    """The router's forward behind the slot of its kind, reading the attributes ``router`` names.

    Only the fields the kind's slot reads are handed to its snippet (:data:`ROUTER_ROLES`, less a flag an
    always-renormalising router lacks), so a snippet checks exactly the attributes it passes; its options
    (:data:`ROUTER_OPTIONS`) only where they differ from the Router defaults.
    """
    cls = _named(router.cls, prefix)
    snippet = ROUTER_SNIPPETS.get(router.kind)
    if snippet is None:
        raise PatchApiError(
            f"Router {cls}: kind must be one of {', '.join(sorted(ROUTER_SNIPPETS))}, got {router.kind!r}",
            target=f"{cls}.forward",
            location=call_site(),
        )
    variables = _router_variables(router)
    config.apply_snippet(
        snippet,
        f"{cls}.forward",
        **variables,
        description=f"routing behind the {router.kind}_router slot",
    )
