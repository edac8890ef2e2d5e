"""``patchgen-inspect <model>``: print what the upstream reader sees in one model's pinned source.

The scaffolder's defaults come from this report; printing it lets a user check the detected category,
norm and MLP kinds and the reasons behind any refusal before scaffolding. ``--json`` gives the same
data as ``ModelStructure.to_dict()``. Exit statuses are those of every console script
(``modelgraft.generator.entrypoint``): 0 ok, 2 bad input (an unknown model), 3 a bug in the reader (a traceback is
printed).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from modelgraft.generator.entrypoint import ExitStatus, run_script
from modelgraft.generator.upstream.reader import read_model
from modelgraft.generator.upstream.structure import ModelStructure
from modelgraft.generator.upstream.vlm_structure import VlmInfo


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="patchgen-inspect",
        description="Report the structure of a transformers model as read from its pinned source (no import).",
    )
    parser.add_argument("model", help="package name under transformers/models (qwen3, llama, gemma3...)")
    parser.add_argument("--json", action="store_true", help="print ModelStructure.to_dict() as JSON")
    parser.add_argument("--root", type=Path, default=None, help="read an unpacked transformers tree instead")
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """``patchgen-inspect argv``: print the report of one model."""
    args = build_parser().parse_args(argv)
    structure = read_model(args.model, root=args.root)
    if args.json:
        print(json.dumps(structure.to_dict(), indent=2))
    else:
        print(render(structure))
    return ExitStatus.OK


def main(argv: Sequence[str] | None = None) -> int:
    """The ``patchgen-inspect`` console script: :func:`run` under the shared exit-status handler."""
    return run_script("patchgen-inspect", lambda: run(argv))


def render(s: ModelStructure) -> str:
    """The human-readable report: one section per part, unknown kinds with their reasons."""
    out: list[str] = []
    add = out.append
    add(f"model            {s.model}  ({s.modeling_module})")
    add(f"prefix           {s.prefix}")
    add(f"config           {s.config_class}  model_type={s.model_type}  ({s.config_module})")
    add(f"category         {s.category}  -- {s.category_reason}")
    add(f"decoder layer    {s.decoder_layer}  mlp={s.decoder_mlp}")
    add("heads            " + (", ".join(f"{k}={v}" for k, v in s.heads.items()) or "none"))
    lm = s.causal_lm
    if lm is not None:
        add(
            f"causal lm        {lm.cls} (line {lm.line})"
            + (f", forward from {lm.inherited_from}" if lm.inherited_from else "")
        )
        add(f"  output         {lm.output_class}   lm_head bias={lm.lm_head_bias}")
        add(f"  logits         {lm.logits_var} = self.lm_head({lm.hidden_arg})")
        add(f"  vocab size     {lm.vocab_size_expr}")
        add("  postprocess    " + (", ".join(f"{op}({expr})" for op, expr in lm.postprocess) or "none"))
        add(f"  aux loss       {lm.aux_loss_function}")
        add(f"  guardable      {'yes' if not lm.reason else 'no: ' + lm.reason}")
    sc = s.sequence_classification
    if sc is not None:
        add(f"seq classif.     {sc.cls}: " + ("generic" if sc.generic else f"not generic ({sc.reason})"))
    add("norms")
    for n in s.norms:
        detail = f"param={n.param} weight={n.weight_attr} bias={n.bias_attr} eps={n.eps_attr or n.eps_value}"
        add(f"  {n.cls:32} {n.kind:22} " + (detail if n.kind != "unknown" else n.reason))
    add("mlps")
    for m in s.mlps:
        detail = (
            f"gate={m.gate_attr} up={m.up_attr} down={m.down_attr} act={m.act_attr or m.activation_expr}"
            f" ({m.activation_expr})" + (f" dropout={m.dropout_expr}" if m.residual_dropout else "")
        )
        add(f"  {m.cls:32} {m.kind:22} " + (detail if m.kind != "unknown" else m.reason))
    r = s.rope
    if r is not None:
        where = f"{r.owner + '.' if r.owner else ''}{r.name} (line {r.line}) {r.params}" if r.name else ""
        add(
            f"rope             {r.kind} {where} formulation={r.formulation}" + (f"  -- {r.reason}" if r.reason else "")
        )
    mu = s.multipliers
    add(
        f"multipliers      embedding={mu.embedding} residual={mu.residual} logits={mu.logits}"
        f" softcapping={mu.final_logit_softcapping}"
    )
    moe = s.moe
    if moe is not None:
        add(
            f"moe              block={moe.sparse_block} (line {moe.sparse_block_line}) experts_call={moe.experts_call}"
        )
        if moe.router:
            add(
                f"  router         {moe.router.cls} {moe.router.kind}"
                + (f" -- {moe.router.reason}" if moe.router.reason else "")
            )
        if moe.experts:
            e = moe.experts
            add(
                f"  experts        {e.cls} layout={e.layout} bias={e.has_bias} activation={e.activation_expr}"
                f" custom_activation={e.custom_activation}" + (f" -- {e.reason}" if e.reason else "")
            )
        if moe.shared_experts:
            sh = moe.shared_experts
            add(f"  shared         self.{sh.attr} = {sh.cls} gated={sh.gated}")
        add(
            f"  config         experts={moe.num_experts_attr} top_k={moe.top_k_attr}"
            f" intermediate={moe.intermediate_attr} dense_layers={moe.dense_layers} dense_mlp={moe.dense_mlp}"
        )
        projections = "/".join(moe.hub_projections) or "none"
        add(f"  hub weights    conversion={moe.hf_conversion or 'none'} gate/up/down={projections}")
        if moe.reason:
            add(f"  note           {moe.reason}")
    gdn = s.linear_attention
    if gdn is not None:
        add(f"gated deltanet   {gdn.mixer} (line {gdn.line}) calls {gdn.chunk}, {gdn.recurrent}")
        via = f"  (through {' -> '.join(gdn.conv_via)})" if gdn.conv_via else ""
        add(f"  conv           {gdn.conv} / decode step {gdn.conv_update}{via}  packed={gdn.packed}")
        norm = f"{gdn.norm} (line {gdn.norm_line}) eps={gdn.norm_eps_attr}" if gdn.norm else "none guardable"
        add(f"  gated norm     {norm}" + (f"  -- {gdn.reason}" if gdn.reason else ""))
    conv = s.short_convolution
    if conv is not None:
        via = f"  (through {' -> '.join(conv.conv_via)})" if conv.conv_via else ""
        add(f"short conv       {conv.mixer} (line {conv.line})" + (f"  -- {conv.reason}" if conv.reason else ""))
        add(f"  conv           {conv.conv} / decode step {conv.conv_update}{via}  packed={conv.packed}")
    if s.vlm is not None:
        out.extend(render_vlm(s.vlm))
    if s.omni is not None:
        omni = s.omni
        add(f"omni             top level={omni.top_level} thinker={omni.thinker}")
        add(f"  speech side    {', '.join(f'self.{attr}' for attr in omni.speech) or 'none'}")
        add(f"  speech classes {len(omni.speech_classes)} built by the speech side only")
        for difference in omni.differences:
            add(f"  not qwen-omni  {difference}")
    add(f"config defaults  {len(s.config_defaults)} fields")
    return "\n".join(out)


def render_vlm(v: VlmInfo) -> list[str]:
    """The VLM section: the Model and its towers, mergers, methods, compositions, processors, the contract."""
    out = [f"vlm              model={v.model_class} (line {v.model_line})"]
    for role, tower in (("vision tower", v.vision), ("language model", v.language_model)):
        if tower is not None:
            built = tower.cls or "chosen by the checkpoint's config"
            out.append(f"  {role:20} self.{tower.attr} = {tower.built_by} -> {built}  config={tower.config_attr}")
    for m in v.mergers:
        kind = "deepstack mergers" if m.deepstack else "merger"
        out.append(f"  {kind:20} {m.owner}.{m.attr} = {m.cls} (in the {m.place})")
    for method in (v.rope_index, v.placeholder_mask, v.placeholder_merger):
        if method is not None:
            masks = f"  returns {method.returns} mask(s)" if method.name == "get_placeholder_mask" else ""
            out.append(
                f"  {method.name:20} {method.owner} (line {method.line}) {method.params}"
                f" required={method.required}{masks}"
            )
    for c in v.compositions:
        out.append(
            f"  composition          {c.owner}.{c.attr} = AutoModel.from_config(config.{c.config_attr})"
            f" -> {c.config_class} -> {c.builds or _elsewhere(c.config_class)}"
        )
    for p in v.processors:
        out.append(f"  {p.kind:20} {p.cls}  ({p.module})")
    if not v.processors:
        out.append("  processors           none: neither the package nor the Auto tables name one")
    if v.vision_rope is not None:
        out.append(f"  vision rope          {v.vision_rope.name} (line {v.vision_rope.line}) {v.vision_rope.params}")
    for name, title, differences in (
        ("qwen-vl", "Qwen-VL", v.contract_differences),
        ("composed", "composed-VLM", v.composed_differences),
    ):
        held = " (the one its structure shows)" if v.contract == name.replace("-", "_") else ""
        if not differences:
            out.append(f"  {name:20} fits the {title} contract{held}")
        else:
            out.append(f"  {name:20} differs from the {title} contract{held}:")
            out.extend(f"    - {d}" for d in differences)
    return out


def _elsewhere(config_class: str | None) -> str:
    """What builds a composed sub-model no class of the module declares: the checkpoint, or another package."""
    if config_class in (None, "AutoConfig"):
        return "chosen by the checkpoint's config"
    return f"the model another package declares for {config_class}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
