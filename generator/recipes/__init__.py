"""Category recipes: one call that applies every snippet a model category shares."""

from generator.recipes.dense import dense_text

__all__ = ["dense_text"]
