"""modelgraft: ``modelgraft.generator``, ``modelgraft.models`` and ``modelgraft.scaffold``.

A regular package rather than a namespace: the import system takes the first ``modelgraft`` with an
``__init__.py`` on ``sys.path`` over every folder named ``modelgraft`` without one, so an empty or stray
folder of that name (in the working directory, or a clone of this repository named ``modelgraft`` there)
can neither shadow this package nor merge its modules into it.

Installed from the wheel, this file lies beside ``generator/``, ``models/`` and ``scaffold/`` and
``__path__`` is Python's default. In a checkout it is ``src/modelgraft/__init__.py`` (the editable install
puts ``src/`` on ``sys.path``), and ``__path__`` is the checkout's root, where those folders are. Importing
it looks at one path and changes nothing else (docs/design.md, "Importing changes nothing").
"""

import os

_here = os.path.dirname(os.path.abspath(__file__))
if not os.path.isdir(os.path.join(_here, "models")):  # in a checkout: src/modelgraft/, the folders two levels up
    __path__ = [os.path.dirname(os.path.dirname(_here))]

del os, _here
