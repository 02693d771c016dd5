"""TicToc -> offset-DPO pairs. Usage: python data_prep/tictoc.py recipe=NAME [out=DIR] [data.key=value ...]."""

import sys

from timealign.data.commands import pairs_main

if __name__ == "__main__":
    sys.exit(pairs_main())
