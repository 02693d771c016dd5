"""TIMER-style multi-task SFT. Usage: [accelerate launch] train/sft.py recipe=NAME|--config PATH [key=value ...]

--help lists the recipes and every recipe field."""

import sys

from timealign.train.sft import main

if __name__ == "__main__":
    sys.exit(main())
