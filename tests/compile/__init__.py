"""torch.compile of the generated decoder layers and of the CPU kernels (docs/compile.md)."""
