"""Standalone checkpoint from a trained folder. Usage: train/export.py checkpoint=DIR out=DIR [dtype=...]

A LoRA adapter is merged into its base (TIMER's added tokens included); a full fine-tune is validated and copied.
--help lists the options."""

import sys

from timealign.train.export import main

if __name__ == "__main__":
    sys.exit(main())
