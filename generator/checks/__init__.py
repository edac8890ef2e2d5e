"""Every check of design 2.4, each in its own module; all raise generator.errors types."""
