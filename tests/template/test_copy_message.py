"""The message after ``copier copy`` says what happened: with ``--skip-tasks`` nothing was generated or checked."""

from __future__ import annotations

import yaml
from jinja2 import Environment, StrictUndefined

from modelgraft.scaffold.jinja_extension import ScaffoldExtension

from .repos import REPO_ROOT

MESSAGE = yaml.safe_load((REPO_ROOT / "copier.yml").read_text(encoding="utf-8"))["_message_after_copy"]


def _message(*, skip_tasks: bool) -> str:
    """The message as Copier renders it (the template's extension, block-tag trimming, strict variables), for a
    copy into this repository's models/mistral."""
    environment = Environment(
        undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, extensions=[ScaffoldExtension]
    )
    conf = {"skip_tasks": skip_tasks, "dst_path": REPO_ROOT / "models" / "mistral"}
    return environment.from_string(MESSAGE).render(model="mistral", _copier_conf=conf)


def test_a_copy_that_ran_its_tasks_says_the_modeling_is_generated() -> None:
    message = _message(skip_tasks=False)
    assert message.startswith("models/mistral/ is ready and its modeling is generated. Next:\n")
    assert "1. python -m pytest models/mistral -q" in message


def test_a_copy_with_skip_tasks_says_nothing_was_generated_and_what_to_run() -> None:
    message = _message(skip_tasks=True)
    assert "is generated" not in message
    assert message.startswith(
        "models/mistral/ is rendered; its modeling is not generated and the smoke check did not run (--skip-tasks)."
    )
    assert "1. python -m modelgraft.generator models/mistral/mistral_gpu_patch_gen_config.py --diff" in message
