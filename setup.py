"""Installs the root folders generator/, models/ and scaffold/ as modelgraft.generator, .models, .scaffold.

The metadata is in pyproject.toml; only the package mapping needs code, because setuptools' package
discovery cannot add a prefix. The package ``modelgraft`` itself is src/modelgraft/__init__.py, a regular
package, so that no folder named ``modelgraft`` elsewhere on sys.path shadows it (docs/design.md,
"Importing changes nothing"). The wheel holds no tests, but it holds the parity harness (models/testing,
which needs the test extra): a model scaffolded into a training repository runs its tests with it.
"""

import sys
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.editable_wheel import editable_wheel

ROOT_FOLDERS = ("generator", "models", "scaffold")
NOT_SHIPPED = ("*.tests", "*.tests.*", "*.__pycache__")
#: The folder that holds the package ``modelgraft`` (its __init__.py) and nothing else.
ROOT_PACKAGE_PARENT = "src"

# Namespace packages too: models/<m>/generated/ and generator/codegen/ have no __init__.py, and
# find_packages would leave them (every generated module, the code generator's assembly) out of the wheel.
packages = find_namespace_packages(include=[f"{folder}*" for folder in ROOT_FOLDERS], exclude=list(NOT_SHIPPED))


class EditableWheel(editable_wheel):
    """``pip install -e .``: setuptools' own finder, and ``src/`` on sys.path through a .pth file of its own.

    setuptools maps the packages of an editable install with a finder placed after Python's path finder,
    which takes a folder named ``modelgraft`` without an __init__.py anywhere on sys.path as a namespace
    package before that finder is asked. With src/ on sys.path the path finder itself finds this
    checkout's regular package first, as it finds the wheel's in site-packages. The file is written beside
    the legacy namespace .pth files setuptools writes into the editable wheel; where a setuptools has no
    such step, the install still works, through the finder alone.
    """

    def _install_namespaces(self, installation_dir, *args, **kwargs):
        super()._install_namespaces(installation_dir, *args, **kwargs)
        # A .pth file is read in the locale's encoding before Python 3.13, in UTF-8 since.
        encoding = "utf-8" if sys.version_info >= (3, 13) else "locale"
        root = Path(__file__).resolve().parent / ROOT_PACKAGE_PARENT
        Path(installation_dir, "__editable__.modelgraft-root.pth").write_text(f"{root}\n", encoding=encoding)


setup(
    packages=["modelgraft", *(f"modelgraft.{package}" for package in packages)],
    package_dir={
        "modelgraft": f"{ROOT_PACKAGE_PARENT}/modelgraft",
        **{f"modelgraft.{folder}": folder for folder in ROOT_FOLDERS},
    },
    package_data={"modelgraft.generator": ["snippets/*.py.j2", "ruff.toml"]},
    cmdclass={"editable_wheel": EditableWheel},
)
