"""Reading upstream transformers source from disk (never importing it)."""
