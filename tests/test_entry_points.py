"""Every entry point speaks the one CLI: `--help` exits 0 and documents each option from its field's help text.

Runs the real scripts as users do (`python train/dpo.py --help`, `python -m timealign.cluster --help`, ...).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (how users run it, module holding its COMMAND, whether --help lists the recipe fields)
ENTRY_POINTS = [
    (["train/dpo.py"], "timealign.train.dpo", True),
    (["train/sft.py"], "timealign.train.sft", True),
    (["data_prep/tictoc.py"], "timealign.data.commands", True),
    (["data_prep/timelychat.py"], "timealign.data.commands", True),
    (["data_prep/reasoning.py"], "timealign.suites.generate_sets", False),
    (["train/export.py"], "timealign.train.export", False),
    (["-m", "timealign.train.model_card"], "timealign.train.model_card", False),
    (["eval/run.py"], "timealign.eval.runner", True),
    (["eval/compare.py"], "timealign.eval.compare", False),
    (["-m", "timealign.suites.timelychat.infer"], "timealign.suites.timelychat.infer", False),
    (["-m", "timealign.data.synthetic"], "timealign.data.synthetic.cli", False),
    (["-m", "timealign.experiment"], "timealign.experiment.cli", False),
    (["-m", "timealign.experiment.demo"], "timealign.experiment.demo", False),
    (["-m", "timealign.experiment.margins"], "timealign.experiment.margins", False),
    (["-m", "timealign.cluster"], "timealign.cluster.cli", True),
    (["benchmarks/bench_dpo.py"], None, False),
    (["benchmarks/bench_sft.py"], None, False),
    (["benchmarks/bench_eval.py"], None, False),
    (["benchmarks/bench_reasoning.py"], None, False),
]


def _help(args: list[str]) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, *args, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize(
    "args, module, lists_recipe", ENTRY_POINTS, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_help_documents_every_option(args, module, lists_recipe):
    text = _help(args)
    assert text.startswith("usage: ")
    if module:
        command = importlib.import_module(module)
        options = [getattr(c, "options", None) for c in vars(command).values() if type(c).__name__ == "Command"]
        for cls in filter(None, options):
            for f in dataclasses.fields(cls):
                help_ = f.metadata.get("help", "")
                assert help_, f"{cls.__name__}.{f.name} has no help text"
                assert f"{f.name}=" in text and help_.split()[0] in text, (f.name, help_)
    if lists_recipe:
        assert "Recipe fields" in text and "data.timestamps=True" in text and "training.<field>" in text
        assert "--config PATH" in text


# Every module that holds a COMMAND also runs as `python -m MODULE` (issue 21: `python -m timealign.train.dpo --help`
# printed nothing because the module had no __main__ block).
MODULES = sorted({m for args, m, _ in ENTRY_POINTS if m and args[0] != "-m" and m != "timealign.data.commands"})


@pytest.mark.parametrize("module", MODULES)
def test_module_runs_with_python_m(module):
    assert _help(["-m", module]).startswith("usage: ")


# The `timealign` console command (issue 24): `timealign SUBCOMMAND --help` is the script's own help, its usage line
# naming the subcommand (`python -m timealign` is the installed `timealign` script; tests/test_console.py installs it).
from timealign.cli import PREP, SUBCOMMANDS  # noqa: E402

SUBCOMMAND_SCRIPTS = [([name], sub.script) for name, sub in SUBCOMMANDS.items()] + [
    (["prep", name], sub.script) for name, sub in PREP.items()
]


@pytest.mark.parametrize("names, script", SUBCOMMAND_SCRIPTS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_subcommand_help_is_the_scripts_help(names, script):
    script_args = script.split()[1:] if script.startswith("python ") else [script]
    ours, theirs = _help(["-m", "timealign", *names]).split("\n", 1), _help(script_args).split("\n", 1)
    assert ours[1] == theirs[1]
    called = " ".join(["timealign", *names])
    shown = f"python {script}" if f"python {script}" in theirs[0] else script  # train/dpo.py: no "python"
    expected = theirs[0].replace("[accelerate launch] ", "[accelerate launch -m] ").replace(shown, called, 1)
    assert ours[0] == expected and called in ours[0], (ours[0], theirs[0])
