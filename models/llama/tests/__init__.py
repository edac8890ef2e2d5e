"""Tests of the llama package (a package, so every model's test modules have unique names)."""
