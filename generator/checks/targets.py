"""Check 1: every patch, exclusion and dropped import names something upstream has, exactly once.

Planning (``modelgraft.generator.codegen.plan.build_plan``) stops at the first record it cannot resolve and
records why; this check reports it.
"""

from __future__ import annotations

from modelgraft.generator.codegen.plan import Plan
from modelgraft.generator.errors import TargetError


def check_targets(plan: Plan) -> None:
    """Raise for the record that stopped planning, naming the config and that record's target."""
    if plan.refusal is not None:
        raise TargetError(plan.refusal.cause, config=plan.config_name, target=plan.refusal.target)
