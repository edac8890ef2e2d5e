"""modelgraft's generator: patched transformers modeling files from declarative configs.

Never imports torch or transformers: upstream source is read from disk.
"""

from modelgraft.generator.dsl import PatchConfig, create_patch_from_external

__all__ = ["PatchConfig", "create_patch_from_external"]
