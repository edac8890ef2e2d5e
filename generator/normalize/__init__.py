"""Output normalization: ruff fix + format, once per batch of files."""
