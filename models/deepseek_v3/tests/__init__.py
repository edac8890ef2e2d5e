"""Tests of the deepseek_v3 package (a package, so every model's test modules have unique names)."""
