"""Offset-DPO on TicToc pairs. Usage: [accelerate launch] train/dpo.py recipe=NAME|--config PATH [key=value ...]

--help lists the recipes and every recipe field."""

import sys

from timealign.train.dpo import main

if __name__ == "__main__":
    sys.exit(main())
