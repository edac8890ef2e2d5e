"""Check 6: nothing kept in the output still uses a class the config excludes (else it would not import)."""

from __future__ import annotations

from modelgraft.generator.codegen.exclusion import ROOTS
from modelgraft.generator.codegen.plan import Plan
from modelgraft.generator.errors import TargetError


def check_exclusions(plan: Plan) -> None:
    """Report the first kept member (by name) that uses an excluded class, and how to fix it."""
    if not plan.excluded_still_used:
        return
    name, user = plan.excluded_still_used[0]
    who = "module-level code" if name == ROOTS else f"kept member {name}"
    raise TargetError(
        f"excluded class {user} is still used by {who}; patch {name} to stop using it, or keep the class",
        config=plan.config_name,
        target=user,
    )
