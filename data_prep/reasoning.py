"""Generate fresh, seeded temporal-reasoning sets as JSONL (`timealign.suites.generate_sets`).

    python data_prep/reasoning.py suite=timepuzzles n=200 seed=0 out=data/timepuzzles.jsonl
    python data_prep/reasoning.py suite=chronosense n=500 seed=0 out=data/chronosense.jsonl
    python data_prep/reasoning.py suite=tcp n=100 kind=mixed out=data/tcp.jsonl

`python data_prep/reasoning.py --help` lists every suite's options (the same as its `SUITE.key=` eval options).
"""

import sys

from timealign.suites.generate_sets import main

if __name__ == "__main__":
    sys.exit(main())
