"""The version of an installed distribution, found as ``importlib.metadata.version`` finds it, at a fraction
of the cost.

A warm ``patchgen --check`` asks for the versions of transformers and ruff once per config, to know its
cache entries still hold. ``importlib.metadata`` takes longer to import (email, zipfile, csv) than the
rest of the check, and parses the whole METADATA file, long description included, as an email message
on every call. This module walks ``sys.path`` in the same order, matches ``*.dist-info`` and
``*.egg-info`` folders by the same normalized name, and reads the ``Version`` header alone. What it does
not handle (a zip archive or an ``.egg`` on ``sys.path``) it hands to ``importlib.metadata``.
"""

from __future__ import annotations

import os
import re
import sys

_INFO_SUFFIXES = (".dist-info", ".egg-info")
# Read in this order, as importlib.metadata does: wheels write METADATA, eggs PKG-INFO.
_METADATA_FILES = ("METADATA", "PKG-INFO")


def _normalize(name: str) -> str:
    """PEP 503 normalization, dashes as underscores (importlib.metadata's ``Prepared.normalize``)."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def installed_version(distribution: str) -> str | None:
    """The version ``importlib.metadata.version(distribution)`` gives, or None where it raises
    PackageNotFoundError. Not memoised: a test may install another version in the same process."""
    wanted = _normalize(distribution)
    for entry in sys.path:
        folder = entry or "."
        try:
            children = os.listdir(folder)
        except OSError:
            if os.path.isfile(folder):  # a zip archive on the path: importlib.metadata reads inside it
                return _version_by_importlib(distribution)
            continue
        if os.path.basename(folder).lower().endswith(".egg"):
            return _version_by_importlib(distribution)
        for child in children:
            low = child.lower()
            if low.endswith(_INFO_SUFFIXES) and _normalize(low.rpartition(".")[0].partition("-")[0]) == wanted:
                return _metadata_version(os.path.join(folder, child))
    return None


def _metadata_version(info_folder: str) -> str | None:
    """The first ``Version`` header of the folder's metadata file (headers end at the first blank line)."""
    for name in _METADATA_FILES:
        try:
            with open(os.path.join(info_folder, name), encoding="utf-8") as metadata:
                for line in metadata:
                    if not line.strip():
                        return None
                    if line[0] in " \t":  # the continuation of a folded header
                        continue
                    key, colon, value = line.partition(":")
                    if colon and key.strip().lower() == "version":
                        return value.strip()
                return None
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            continue
    return None


def _version_by_importlib(distribution: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
