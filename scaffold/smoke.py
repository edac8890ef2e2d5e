"""The parity smoke check a fresh copy runs: one forward and backward on the tiny config, equal to upstream.

``copier copy`` runs it as its last task (``python -m modelgraft.scaffold.smoke <model>``); when it fails, Copier
removes the new directory, so a copy never leaves a model whose own tests would fail. It checks the
causal LM with every slot eager (logits equal, loss and gradients close) and once more with the
reference kernel bound in each slot the scaffold guards and the causal LM calls (for a VLM, its head on
the processor's image-and-video batch, every guarded slot), through the parity harness's ``check_parity``: the same call counter as the model's own tests, so a bound kernel that is
never called (a guard missing, disabled or unreachable) fails the check instead of comparing upstream
with upstream. Exit 0 on success, 1 with the reason otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from pathlib import Path
from typing import Any


def smoke(model: str, *, models_root: Path | None = None, package: str | None = None) -> None:
    """Raise AssertionError (or whatever upstream raises) unless the scaffold of ``model`` matches upstream.

    ``package`` is the new package's import name: it is imported first, which registers the model, and
    ``models_root`` (the folder holding the model packages) defaults to the folder holding it, else to this
    checkout's ``models/``.
    """
    if package is not None:
        module = importlib.import_module(package)
        models_root = models_root or Path(module.__file__).resolve().parents[1]
    from modelgraft.models.testing import EAGER_TOLERANCE, check_parity
    from modelgraft.models.testing.declarations import (
        MODELS_ROOT,
        causal_lm_slot_run,
        parity_declaration,
        parity_suite,
    )
    from modelgraft.models.testing.parity import eager_slots_on_one_thread
    from modelgraft.models.testing.reference import reference_kernels
    from modelgraft.models.testing.scaffold_audio_lm import ScaffoldAudioLm
    from modelgraft.models.testing.scaffold_composed import ScaffoldComposedVlm
    from modelgraft.models.testing.vlm_suite import VlmModel

    root = models_root or MODELS_ROOT
    declaration = parity_declaration(model, root=root)
    if isinstance(declaration, VlmModel):
        _smoke_vlm(declaration)
        return
    if isinstance(declaration, ScaffoldComposedVlm):
        _smoke_composed(declaration)
        return
    if isinstance(declaration, ScaffoldAudioLm):
        _smoke_audio_lm(declaration)
        return
    config = declaration.config()
    with eager_slots_on_one_thread():  # as the model's own tests run: one order of reductions, fast on tiny sizes
        check_parity(config, declaration.causal_lm)
        run = causal_lm_slot_run(parity_suite(model, root=root), config)
        if not run.slots:
            raise AssertionError(
                f"{run.architecture} calls none of the slots the scaffold guards ({', '.join(declaration.guarded)})"
            )
        check_parity(
            config,
            run.architecture,
            kernels=reference_kernels(run.slots),
            batch=run.batch,
            tolerance=EAGER_TOLERANCE,
            logits="close",
        )


def _smoke_vlm(declaration: Any) -> None:
    """A VLM's smoke check: its processor's image-and-video batch through the conditional-generation head,
    eager, then with the reference kernel in every slot the scaffold guards, each of them called."""
    from modelgraft.models.testing import EAGER_TOLERANCE, check_parity
    from modelgraft.models.testing.parity import eager_slots_on_one_thread
    from modelgraft.models.testing.reference import reference_kernels

    config, batch = declaration.config(), declaration.multimodal_batch()
    with eager_slots_on_one_thread():
        check_parity(config, declaration.causal_lm, batch=batch)
        check_parity(
            config,
            declaration.causal_lm,
            kernels=reference_kernels(declaration.guarded),
            batch=batch,
            tolerance=EAGER_TOLERANCE,
            logits="close",
        )


def _smoke_composed(declaration: Any) -> None:
    """A composed VLM's smoke check: the processor's batch with one image per row (:func:`_smoke_every_consulted_slot`)."""
    config = declaration.config()
    _smoke_every_consulted_slot(declaration, config, declaration.batch(config, (1, 1)))


def _smoke_audio_lm(declaration: Any) -> None:
    """An audio language model's smoke check: the processor's batch of two clips
    (:func:`_smoke_every_consulted_slot`)."""
    _smoke_every_consulted_slot(declaration, declaration.config(), declaration.batch("audio"))


def _smoke_every_consulted_slot(declaration: Any, config: Any, batch: dict[str, Any]) -> None:
    """``batch`` through the conditional-generation head, eager, then with the reference kernel in every slot the
    built model consults (its sub-models' included), each of them called."""
    from modelgraft.models.loader import get_model_class
    from modelgraft.models.testing import EAGER_TOLERANCE, check_parity
    from modelgraft.models.testing.parity import eager_slots_on_one_thread
    from modelgraft.models.testing.reference import reference_kernels, training_step_slots

    model = get_model_class(declaration.model_type, declaration.causal_lm)(config)
    slots = sorted(training_step_slots(model))
    with eager_slots_on_one_thread():
        check_parity(config, declaration.causal_lm, batch=batch)
        check_parity(
            config,
            declaration.causal_lm,
            kernels=reference_kernels(slots),
            batch=batch,
            tolerance=EAGER_TOLERANCE,
            logits="close",
        )


def main(argv: list[str] | None = None) -> int:
    """Copier's task: exit 0 when the new scaffold matches upstream, 1 (with the reason) so Copier removes it."""
    parser = argparse.ArgumentParser(prog="python -m modelgraft.scaffold.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the upstream model, the new package's folder name")
    parser.add_argument(
        "--package",
        help="the new package's import name (default: modelgraft.models.<model>), from the working directory",
    )
    args = parser.parse_args(argv)
    package = args.package or f"modelgraft.models.{args.model}"
    try:
        importlib.import_module("modelgraft.models.testing.parity")
    except ImportError as exc:
        print(
            f"scaffold smoke check: cannot check {package}: the parity harness does not import ({exc}); install "
            "modelgraft with its test extra (pip install 'modelgraft[test]'). Copier removes the directory",
            file=sys.stderr,
        )
        return 1
    from modelgraft.models.testing.parity import UpstreamStepError

    try:
        smoke(args.model, package=package)
    except UpstreamStepError as exc:
        traceback.print_exc()
        cause = exc.__cause__
        print(
            f"scaffold smoke check: upstream's own model fails on the tiny config before {package} is compared "
            f"({type(cause).__name__}: {cause}): the tiny config (modelgraft.models.testing.tiny_config) does not fit "
            f"{args.model}, whatever the generated code does; Copier removes the directory",
            file=sys.stderr,
        )
        return 1
    except Exception as exc:  # noqa: BLE001 - every other failure is the model's, reported and turned into exit 1
        traceback.print_exc()
        print(
            f"scaffold smoke check: the new {package} does not match upstream "
            f"({type(exc).__name__}: {exc}); Copier removes the directory",
            file=sys.stderr,
        )
        return 1
    print(
        f"scaffold smoke check: {package} matches upstream (forward and backward, eager and "
        "reference kernels, each bound kernel called)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
