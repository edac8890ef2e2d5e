"""Every check of docs/design.md (see docs/dsl.md), one module each; all raise generator.errors types."""
