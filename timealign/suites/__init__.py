"""Evaluation suites, one module or package per benchmark, registered in `registry`."""
