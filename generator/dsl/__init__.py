"""The patch DSL: where every primitive is defined (applied in generator.codegen)."""

from modelgraft.generator.dsl.config import PatchConfig, create_patch_from_external
from modelgraft.generator.dsl.patches import Helper, ImportSpec, Patch, SnippetRef

__all__ = ["Helper", "ImportSpec", "Patch", "PatchConfig", "SnippetRef", "create_patch_from_external"]
