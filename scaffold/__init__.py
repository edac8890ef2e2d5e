"""Copier glue: keeping every ``models/<m>/`` scaffold in step with the template (``copier.yml``, ``template/``).

Neither generation-time (``generator/``) nor run-time (``models/``) code: a maintainer's tool that runs
``copier update`` on each scaffolded model and fails loudly when an update leaves a conflict. See
docs/scaffolding.md.
"""
