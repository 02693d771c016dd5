"""`python -m timealign.data.synthetic`: see `timealign.data.synthetic.cli`."""

from timealign.data.synthetic.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
