"""tests/README.md maps every test folder to the code it covers, and names no folder that is gone."""

from __future__ import annotations

import re

from docs_markdown import REPO_ROOT

TESTS = REPO_ROOT / "tests"


def test_every_test_folder_is_mapped_and_every_mapped_folder_exists() -> None:
    mapped = set(re.findall(r"^\| `tests/(\w+)/` \|", (TESTS / "README.md").read_text(encoding="utf-8"), re.MULTILINE))
    folders = {p.parent.name for p in TESTS.glob("*/test_*.py")}

    assert mapped == folders, f"unmapped: {sorted(folders - mapped)}; mapped but gone: {sorted(mapped - folders)}"
