"""Tests of the glm_moe_dsa package (a package, so every model's test modules have unique names)."""
