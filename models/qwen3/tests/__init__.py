"""Tests of the qwen3 package (a package, so every model's test modules have unique names)."""
