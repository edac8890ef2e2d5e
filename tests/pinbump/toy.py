"""A fake ``transformers`` in two versions, as wheels pip can serve from a local folder, and a project whose
config patches it: what the pin-bump tests run against without reaching any registry."""

from __future__ import annotations

import textwrap
import zipfile
from pathlib import Path

TOY_V1 = """
class ToyModel:
    def forward(self, input_ids, attention_mask=None):
        return input_ids


def helper(x, scale=1.0):
    return x
"""

TOY_V2 = """
class ToyModel:
    def forward(self, input_ids, attention_mask=None, cache_position=None):
        return input_ids


def helper(x, scale=2.0):
    return x
"""


def build_wheel(folder: Path, version: str, modeling: str) -> Path:
    """A minimal, valid wheel of a package called ``transformers``."""
    path = folder / f"transformers-{version}-py3-none-any.whl"
    info = f"transformers-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("transformers/__init__.py", f'__version__ = "{version}"\n')
        wheel.writestr("transformers/models/__init__.py", "")
        wheel.writestr("transformers/models/toy/__init__.py", "")
        wheel.writestr("transformers/models/toy/modeling_toy.py", textwrap.dedent(modeling))
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n")
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


def local_pip(wheelhouse: Path) -> tuple[str, ...]:
    return ("--no-index", f"--find-links={wheelhouse}")
