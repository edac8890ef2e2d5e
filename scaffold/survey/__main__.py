"""``python -m modelgraft.scaffold.survey``: the ``scaffold-survey`` command."""

import sys

from modelgraft.scaffold.survey.cli import main

sys.exit(main())
