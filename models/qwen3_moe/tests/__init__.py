"""Tests of the qwen3_moe package (a package, so every model's test modules have unique names)."""
