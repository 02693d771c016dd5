import sys

from timealign.cluster.cli import main

sys.exit(main())
