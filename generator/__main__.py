import sys

from modelgraft.generator.cli import main

sys.exit(main())
