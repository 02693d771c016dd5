"""Dialogs -> TIMER SFT data. Usage: python data_prep/timelychat.py recipe=NAME [out=DIR] [data.key=value ...]."""

import sys

from timealign.data.commands import dialogs_main

if __name__ == "__main__":
    sys.exit(dialogs_main())
