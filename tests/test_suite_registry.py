"""The suite declarations: one SUITE per module, typed options from key=value text, and generated data sets."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from timealign.config.options import RecipeError
from timealign.data.records import read_jsonl
from timealign.suites.generate_sets import main as generate_main
from timealign.suites.registry import SUITE_PACKAGES, EvalContext, GeneratedSet, Suite, available_suites, get_suite

REPO = Path(__file__).resolve().parents[1]


def test_every_suite_module_declares_its_suite():
    suites = available_suites()
    assert list(suites) == ["chronosense", "tcp", "tictoc", "timelychat", "timepuzzles"]
    assert all(name == suite.name and suite.description for name, suite in suites.items())
    with pytest.raises(KeyError, match="unknown suite 'nope'"):
        get_suite("nope")


def test_every_suite_is_a_registered_package_declaring_it_in_suite_py():
    """One way for all: a package under timealign/suites/ with the SUITE in its suite.py, named after the package,
    and listed in SUITE_PACKAGES (a package left out would never run)."""
    root = REPO / "timealign" / "suites"
    packages = {p.parent.name for p in root.glob("*/suite.py") if (p.parent / "__init__.py").is_file()}
    assert packages == set(SUITE_PACKAGES)
    for name in SUITE_PACKAGES:
        assert "\nSUITE = Suite(" in (root / name / "suite.py").read_text(), name
        assert "SUITE" not in (root / name / "__init__.py").read_text(), f"{name}/__init__.py: declared in suite.py"


@pytest.mark.parametrize(
    "name, defaults",
    [
        ("timepuzzles", {"n": 50, "seed": 0, "variant": "implicit", "max_new_tokens": 256}),
        ("chronosense", {"n": 50, "seed": 0, "tasks": "all", "template": 0, "named": False, "max_new_tokens": None}),
        ("tcp", {"n": 50, "seed": 0, "kind": "mixed", "variant": "direct", "robust": True, "max_new_tokens": None}),
    ],
)
def test_options_are_typed_from_command_line_text(name, defaults):
    suite = get_suite(name)
    parsed = dataclasses.asdict(suite.parse_options({}))
    assert {k: parsed[k] for k in defaults} == defaults
    assert suite.parse_options({"n": "7", "seed": "3"}).n == 7
    with pytest.raises(RecipeError, match=f"unknown key '{name}.nn'. Did you mean: n"):
        suite.parse_options({"nn": "7"})
    with pytest.raises(RecipeError, match=f"{name}.n: cannot read 'many' as int"):
        suite.parse_options({"n": "many"})
    assert all(f.metadata.get("help") for f in dataclasses.fields(suite.options))


def test_a_suite_without_options_refuses_them():
    suite = Suite("bare", "a suite that declares no options", lambda backend, ctx: {})
    assert suite.options is None and suite.parse_options({}) is None
    with pytest.raises(RecipeError, match="takes no options"):
        suite.parse_options({"n": "3"})


def test_a_generated_set_is_read_by_the_eval_options():
    @dataclasses.dataclass
    class Items:
        n: int = 1

    @dataclasses.dataclass
    class Other:
        n: int = 1

    def run(backend, ctx: EvalContext) -> dict:
        return {"overall": {}}

    Suite("ok", "options extend the set's", run, options=Items, dataset=GeneratedSet(Items, lambda o: []))
    with pytest.raises(TypeError, match="must extend its data set's options"):
        Suite("bad", "unrelated options", run, options=Other, dataset=GeneratedSet(Items, lambda o: []))


@pytest.mark.parametrize("name", ["timepuzzles", "chronosense", "tcp"])
def test_data_prep_and_eval_options_give_the_same_items(name, tmp_path):
    suite = get_suite(name)
    out = tmp_path / f"{name}.jsonl"
    assert generate_main([f"suite={name}", "n=4", "seed=2", f"out={out}"]) == 0
    assert read_jsonl(out) == suite.dataset.generate(suite.parse_options({"n": "4", "seed": "2"}))


def test_data_prep_cli_help_and_errors(capsys):
    proc = subprocess.run(
        [sys.executable, "data_prep/reasoning.py", "--help"], capture_output=True, text=True, cwd=REPO, check=True
    )
    for text in ("suite=timepuzzles:", "suite=chronosense:", "suite=tcp:", "n=50", "kind='mixed'", "out=None"):
        assert text in proc.stdout
    assert generate_main(["n=3"]) == 2
    assert "choose a suite with suite=NAME" in capsys.readouterr().err
    assert generate_main(["suite=tictoc"]) == 2
    assert "suites with generated sets: chronosense, tcp, timepuzzles" in capsys.readouterr().err
    assert generate_main(["suite=tcp", "max_new_tokens=8"]) == 2  # an eval-only option is not a data-set option
    assert "unknown key 'max_new_tokens'" in capsys.readouterr().err
    assert generate_main(["suite=tcp", "kind=medium"]) == 2
    assert "kind must be short, long or mixed" in capsys.readouterr().err


def test_tictoc_detection_protocol_is_a_suite_option():
    suite = get_suite("tictoc")
    assert suite.parse_options({}).detection is None  # follows the recipe's data.protocol
    assert suite.parse_options({"detection": "paper"}).detection == "paper"
    with pytest.raises(RecipeError, match="unknown key 'tictoc.detect'"):
        suite.parse_options({"detect": "paper"})
