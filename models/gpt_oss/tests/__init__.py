"""Tests of the gpt_oss package (a package, so every model's test modules have unique names)."""
