"""Compare eval reports. Usage: python eval/compare.py before=BEFORE after=AFTER [png=nar.png] [out=DIR] (--help)."""

import sys

from timealign.eval.compare import main

if __name__ == "__main__":
    sys.exit(main())
