"""Installs the root folders generator/, models/ and scaffold/ as modelgraft.generator, .models, .scaffold.

The metadata is in pyproject.toml; only the namespace mapping needs code, because setuptools' package
discovery cannot add a prefix. The wheel holds no tests: test folders and the parity harness
(models/testing, which needs pytest) stay in the repository, where an editable install still reaches them.
"""

from setuptools import find_namespace_packages, setup

ROOT_FOLDERS = ("generator", "models", "scaffold")
NOT_SHIPPED = ("*.tests", "*.tests.*", "models.testing", "models.testing.*", "*.__pycache__")

# Namespace packages too: models/<m>/generated/ and generator/codegen/ have no __init__.py, and
# find_packages would leave them (every generated module, the code generator's assembly) out of the wheel.
packages = find_namespace_packages(include=[f"{folder}*" for folder in ROOT_FOLDERS], exclude=list(NOT_SHIPPED))

setup(
    packages=[f"modelgraft.{package}" for package in packages],
    package_dir={f"modelgraft.{folder}": folder for folder in ROOT_FOLDERS},
    package_data={"modelgraft.generator": ["snippets/*.py.j2", "ruff.toml"]},
)
