"""What the omni recipe would keep and drop of an Omni model, read from upstream: the refusal's findings.

The omni and omni_moe choices have no template yet (docs/scaffolding.md, "Omni scaffolds"): a copy is refused
before writing. The refusal says what a hand-written config (the zoo's qwen2_5_omni and qwen3_omni_moe) would
pass the omni recipe, read from upstream's class tree (:mod:`modelgraft.generator.upstream.read_omni`): the
thinker it keeps, the speech attributes whose checkpoint keys its state-dict hook drops (``speech``) and the
classes only they build (``speech_classes``, for ``exclude_from_output``); or, for a model that is not
Qwen-Omni-like (an audio tower without a talker, no thinker), each way it differs.
"""

from __future__ import annotations

from modelgraft.generator.upstream.structure import ModelStructure

__all__ = ["OMNI_RECIPE", "omni_reasons"]

OMNI_RECIPE = "generator/recipes/omni.py"


def omni_reasons(structure: ModelStructure) -> tuple[tuple[str, str], ...]:
    """(where, reason) per finding: the differences from a Qwen-Omni-like model, or what the recipe would drop."""
    omni = structure.omni
    if omni is None:
        return ()
    where = omni.top_level or structure.model
    if omni.differences:
        return tuple((where, f"not Qwen-Omni-like: {difference}") for difference in omni.differences)
    prefixes = ", ".join(f"{attr}.*" for attr in omni.speech)
    shown = ", ".join(omni.speech_classes[:4]) + (", ..." if len(omni.speech_classes) > 4 else "")
    reason = (
        f"Qwen-Omni-like: a hand-written config calls the omni recipe ({OMNI_RECIPE}) on the thinker"
        f" {omni.thinker}, speech={omni.speech!r} (its state-dict hook drops {prefixes}) and speech_classes from"
        f" the {len(omni.speech_classes)} classes only the speech side builds ({shown})"
    )
    return ((where, reason),)
