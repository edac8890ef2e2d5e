import sys

from modelgraft.generator.entrypoint import patchgen

sys.exit(patchgen())
