"""Tests of the Copier template: copy each category into a real git repository, generate, test, update."""
