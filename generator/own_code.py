"""Where the generator's own code lies.

Three facts hang on it and must agree: the check cache hashes this folder (a change to the generator
invalidates every entry), the project closure of a config stops here (the generator is not a
config's input, since the cache keys on it separately), and a misuse of the patch API is reported at
the first caller outside it (the user's config line).
"""

from __future__ import annotations

from pathlib import Path

GENERATOR_ROOT = Path(__file__).resolve().parent
