"""Tests of the gemma3 package (a package, so every model's test modules have unique names)."""
