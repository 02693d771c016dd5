"""`python -m timealign SUBCOMMAND ...`: the `timealign` console command (`accelerate launch -m timealign dpo ...`)."""

import sys

from timealign.cli import main

if __name__ == "__main__":
    sys.exit(main())
