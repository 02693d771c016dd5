"""Score a checkpoint. Usage: python eval/run.py recipe=NAME [checkpoint=PATH] [suites=tictoc] (--help)."""

import sys

from timealign.eval.runner import main

if __name__ == "__main__":
    sys.exit(main())
