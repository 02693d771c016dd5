import sys

from timealign.experiment.real.cli import main

if __name__ == "__main__":  # the vLLM engine starts a process: the guard is needed
    sys.exit(main())
