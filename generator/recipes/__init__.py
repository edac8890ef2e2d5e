"""Category recipes: one call that applies every snippet a model category shares."""

from generator.recipes.dense import dense_text
from generator.recipes.moe import moe_text

__all__ = ["dense_text", "moe_text"]
