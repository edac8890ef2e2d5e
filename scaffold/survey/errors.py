"""The survey's bad input: arguments, or a survey that cannot start (exit 2)."""

from __future__ import annotations


class SurveyError(Exception):
    """Bad arguments or a survey that cannot start (exit 2)."""
