"""``copier copy -d category=<c>``: an answer that contradicts upstream's structure stops the copy before it writes.

A user who answers the category question wrongly must never get a model that looks done and is not: a
VLM copied as dense used to generate, pass its smoke check and then fail its own tests. Each wrong answer
is refused while Copier asks, with the category upstream's structure shows, and nothing is written, whether
or not the zoo holds the model (the refusals are facts of upstream); the accepted answer is copied into a
model outside the zoo (repos.py's ``outside_zoo``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .repos import copy_model, outside_zoo, writes_nothing

#: (model, wrong answer, what the refusal says was detected).
WRONG_ANSWERS = [
    # Each a model of the category the refusal names; the zoo may hold it or not (writes_nothing checks either).
    ("glm4v", "dense", "upstream's structure is vlm: a vision tower (Glm4VisionMlp)"),
    ("glm4v", "moe", "upstream's structure is vlm: a vision tower (Glm4VisionMlp)"),
    ("qwen2_moe", "dense", "upstream's structure is moe: routed experts"),
    ("mistral", "moe", "upstream's structure is dense: decoder-only text model; upstream has no routed experts"),
    ("mistral", "vlm", "upstream's structure is dense: decoder-only text model"),
]


@pytest.mark.parametrize(
    ("model", "answer", "detected"), WRONG_ANSWERS, ids=[f"{m}-as-{a}" for m, a, _ in WRONG_ANSWERS]
)
def test_a_category_answer_that_contradicts_upstream_is_refused_and_writes_nothing(
    repo: Path, model: str, answer: str, detected: str
) -> None:
    with writes_nothing(repo, model), pytest.raises(ValueError) as refused:
        copy_model(repo, model, generate=False, record=False, category=answer)

    assert f"answered {answer}, but {detected}" in str(refused.value)


def test_the_detected_category_answered_explicitly_is_accepted(repo: Path) -> None:
    model = outside_zoo("dense")
    model_dir = copy_model(repo, model, generate=False, record=False, category="dense")

    assert (model_dir / f"{model}_gpu_patch_gen_config.py").is_file()
