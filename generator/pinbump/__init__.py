"""Pin-bump tools: reference upstream trees for any version, and signature drift between two."""
