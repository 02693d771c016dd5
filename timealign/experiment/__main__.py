import sys

from timealign.experiment.cli import main

sys.exit(main())
