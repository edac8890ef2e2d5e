"""The patches a hand-written config would apply, named from a fit's recipe arguments.

A refused copy sends the user to write the config by hand (docs/adding-a-model.md, "Hand-written
patches"). The refusal is only useful if it says which patches that config needs: each structure the
reader recognised exactly gets the snippet a recipe would have applied to it, on the same target and
behind the same slot, so the hand-written config starts from what is known to fit.
"""

from __future__ import annotations

from typing import Any


def _mlp(mlp: dict[str, Any]) -> list[str]:
    cls = mlp["cls"]
    lines = []
    if mlp.get("init_activation"):
        lines.append(f"{cls}.__init__: activation_name_init (config_attr={mlp['init_activation']})")
    if mlp["kind"] == "plain":
        lines.append(f"{cls}.forward: mlp_activation_guard, behind the activation slot")
    elif mlp.get("whole"):
        lines.append(f"{cls}.forward: gated_mlp_guard, the whole MLP behind the gated_mlp slot")
    else:
        lines.append(f"{cls}.forward: glu_mlp_guard (layout={mlp['kind']}), behind the glu_activation slot")
    return lines


def _call_site(site: dict[str, Any]) -> str:
    norms = site["layer_norms"] or site.get("chosen_layer_norms")
    slots = [slot for slot, used in (("layer_norm", norms), ("activation", site["activation"])) if used]
    return f"{site['cls']}.forward: call_sites_guard, behind the {' and '.join(slots)} slot{'s' * (len(slots) > 1)}"


def hand_written_patches(arguments: dict[str, Any]) -> tuple[str, ...]:
    """One line per patch (``<target>: <snippet> (<options>), behind <slot>``) for ``arguments`` of a fit.

    The same snippets, targets and slots as ``dense_text`` / ``moe_text`` would apply for these arguments;
    empty when the fit recognised nothing a snippet guards.
    """
    lines: list[str] = []
    for norm in arguments.get("norms") or []:
        lines.append(
            f"{norm['cls']}.forward: rms_norm_guard (formulation={norm['formulation']}), behind the rms_norm slot"
        )
    for mlp in arguments.get("mlps") or []:
        lines += _mlp(mlp)
    lines += [
        _call_site(site)
        for site in arguments.get("call_sites") or []
        if site["layer_norms"] or site.get("chosen_layer_norms") or site["activation"]
    ]
    rope = arguments.get("rope")
    if rope:
        function, formulation = (
            (rope, "") if isinstance(rope, str) else (rope["function"], rope.get("formulation", ""))
        )
        option = f" (formulation={formulation})" if formulation else ""
        lines.append(f"{function}: rope_guard{option}, behind the rope slot")
    mixer = arguments.get("gated_delta_net")
    if mixer:
        lines.append(
            f"{mixer['mixer']}'s gated norm, causal convs and gated delta rules: apply_gated_delta_net "
            "(generator/recipes/hybrid.py), behind the rms_norm_gated, causal_conv1d(_update) and "
            "chunk/recurrent_gated_delta_rule slots"
        )
    short_convolution = arguments.get("short_convolution")
    if short_convolution:
        lines.append(
            f"{short_convolution['mixer']}'s causal convs ({short_convolution['conv']}, "
            f"{short_convolution['conv_update']}): apply_causal_conv1d (generator/recipes/hybrid.py), behind the "
            "causal_conv1d(_update) slots"
        )
    experts = arguments.get("experts")
    if experts:
        lines.append(f"{experts['sparse_block']}.forward: moe_experts_guard, behind the moe_experts slot")
    router = arguments.get("router")
    if router:
        kind = router["kind"]
        lines.append(f"{router['cls']}.forward: {kind}_router_guard, behind the {kind}_router slot")
    indexer = arguments.get("indexer")
    if indexer:
        lines.append(f"{indexer}.forward: dsa_indexer_guard, behind the dsa_indexer slot")
    head = arguments.get("causal_lm")
    if head:
        aux = arguments.get("aux_loss")
        also = f", and {aux}(...) behind the load_balancing_loss slot" if aux else ""
        lines.append(f"{head['cls']}.forward: causal_lm_loss_guard, behind the causal_lm_loss slot{also}")
    classifier = arguments.get("sequence_classification")
    if classifier:
        lines.append(
            f"{classifier}.__init__ and .forward: sequence_classification_init and sequence_classification_forward, "
            "behind the sequence_classification_loss slot"
        )
    return tuple(lines)
