"""The parity smoke check a fresh copy runs: one forward and backward on the tiny config, equal to upstream.

``copier copy`` runs it as its last task (``python -m modelgraft.scaffold.smoke <model>``); when it fails, Copier
removes the new directory, so a copy never leaves a model whose own tests would fail. It checks the
causal LM with every slot eager (logits equal, loss and gradients close) and once more with the
reference kernel bound in each slot the scaffold guards, which proves each guard passes upstream's
arguments. Exit 0 on success, 1 with the reason otherwise.
"""

from __future__ import annotations

import argparse
import sys
import traceback


def smoke(model: str) -> None:
    """Raise AssertionError (or whatever upstream raises) unless the scaffold of ``model`` matches upstream."""
    from modelgraft.models.loader import get_model_class
    from modelgraft.models.testing import (
        EAGER_TOLERANCE,
        assert_step_parity,
        build_pair,
        causal_lm_batch,
        check_parity,
        run_step,
    )
    from modelgraft.models.testing.declarations import parity_declaration
    from modelgraft.models.testing.dense_suite import reference_kernels_bound

    declaration = parity_declaration(model)
    config = declaration.config()
    check_parity(config, declaration.causal_lm)
    pair = build_pair(
        config,
        get_model_class(declaration.model_type, declaration.causal_lm, use_hf=True),
        get_model_class(declaration.model_type, declaration.causal_lm),
    )
    batch = causal_lm_batch(config)
    upstream = run_step(pair.upstream, batch)
    with reference_kernels_bound():
        candidate = run_step(pair.generated, batch)
    assert_step_parity(upstream, candidate, tolerance=EAGER_TOLERANCE, logits="close")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m modelgraft.scaffold.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the model package under models/")
    args = parser.parse_args(argv)
    try:
        smoke(args.model)
    except Exception as exc:  # noqa: BLE001 - every failure is the model's, reported and turned into exit 1
        traceback.print_exc()
        print(
            f"scaffold smoke check: the new models/{args.model} does not match upstream "
            f"({type(exc).__name__}: {exc}); Copier removes the directory",
            file=sys.stderr,
        )
        return 1
    print(
        f"scaffold smoke check: models/{args.model} matches upstream (forward and backward, eager and reference kernels)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
