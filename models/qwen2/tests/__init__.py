"""Tests of the qwen2 package (a package, so every model's test modules have unique names)."""
