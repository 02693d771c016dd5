"""The one CLI: typed key=value options on dataclasses (OmegaConf), help from field metadata, recipes, namespaces."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from omegaconf import MISSING

from timealign.config import RecipeError, load_recipe
from timealign.config.cli import Command, help_text, parse, run_command, split_argv
from timealign.config.options import build_options, describe
from timealign.config.schema import Recipe, opt


@dataclass
class Inner:
    rate: float = opt(0.5, "a rate")


@dataclass
class Options:
    n: int = opt(50, "how many")
    mode: str = opt("no", "a string that YAML 1.1 would read as False")
    flag: bool = opt(False, "a switch")
    path: str | None = opt(None, "an optional path")
    names: list | None = opt(None, "a list")
    inner: Inner = dataclasses.field(default_factory=Inner, metadata={"help": "a section"})


@dataclass
class Needs:
    checkpoint: str = opt(MISSING, "required")


def test_values_are_read_by_their_declared_type():
    got = build_options(
        Options, {"n": "7", "mode": "no", "flag": "on", "path": "null", "names": "[a, b]", "inner.rate": "1e-3"}
    )
    assert got == Options(n=7, mode="no", flag=True, path=None, names=["a", "b"], inner=Inner(rate=0.001))
    assert build_options(Options) == Options()


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"mod": "1"}, "unknown key 'mod'. Did you mean: mode?"),
        ({"n": "seven"}, "n: cannot read 'seven' as int"),
        ({"flag": "maybe"}, "flag: cannot read 'maybe' as bool"),
        ({"inner": "3"}, "inner is a section"),
        ({"inner.rat": "3"}, "unknown key 'inner.rat'. Did you mean: rate?"),
    ],
)
def test_bad_options_name_the_key(raw, message):
    with pytest.raises(RecipeError, match=message.replace("?", r"\?").replace(".", r"\.")):
        build_options(Options, raw)


def test_a_missing_required_option_says_so():
    with pytest.raises(RecipeError, match=r"checkpoint=\.\.\. is required"):
        build_options(Needs, {})
    assert "checkpoint=(required)" in describe(Needs)


def test_help_comes_from_the_field_metadata():
    text = describe(Options)
    assert "  n=50\n      how many" in text and "inner.rate=0.5" in text and "a section" in text
    for f in dataclasses.fields(Recipe):  # every recipe field documents itself
        assert f.metadata.get("help"), f"Recipe.{f.name} has no help"
        section = getattr(Recipe(), f.name)
        if dataclasses.is_dataclass(section):
            for sub in dataclasses.fields(section):
                assert sub.metadata.get("help"), f"{f.name}.{sub.name} has no help"


def test_training_keys_are_checked_against_trl_and_keep_strings():
    recipe = load_recipe("tiny", {"training.save_strategy": "no", "training.learning_rate": "1e-6"})
    assert recipe.training["save_strategy"] == "no" and recipe.training["learning_rate"] == 1e-6
    with pytest.raises(RecipeError, match="unknown key 'training.learnig_rate'. Did you mean: learning_rate"):
        load_recipe("tiny", {"training.learnig_rate": "1"})


COMMAND = Command(
    prog="prog",
    summary="does things",
    options=Options,
    recipe="optional",
    namespaces=lambda: {"suite": (Inner, "a suite")},
    actions={"go": "go", "stop": "stop"},
)


def test_parse_splits_options_namespaces_and_recipe_overrides(tmp_path):
    inv = parse(COMMAND, ["go", "n=3", "suite.rate=0.25", "recipe=tiny", "data.seed=4"])
    assert inv.action == "go" and inv.options.n == 3 and inv.namespaces["suite"] == Inner(rate=0.25)
    assert inv.namespace_raw == {"suite": {"rate": "0.25"}}
    assert inv.recipe.name == "tiny" and inv.recipe.data.seed == 4
    custom = tmp_path / "mine.yaml"
    custom.write_text("task: dpo\ndata:\n  seed: 9\n")
    inv = parse(COMMAND, ["stop", "--config", str(custom)])
    assert inv.recipe.name == "mine" and inv.recipe.data.seed == 9
    assert parse(COMMAND, ["go"]).recipe is None  # recipe optional


def test_parse_errors_are_clear():
    with pytest.raises(RecipeError, match="needs an action first, one of: go, stop"):
        parse(COMMAND, ["n=3"])
    with pytest.raises(RecipeError, match="need recipe=NAME or --config PATH"):
        parse(COMMAND, ["go", "data.seed=1"])
    with pytest.raises(RecipeError, match="unknown key 'nn'. Did you mean: n"):
        parse(COMMAND, ["go", "recipe=tiny", "nn=1"])
    with pytest.raises(RecipeError, match="expected recipe=NAME, --config PATH or key=value"):
        split_argv(["--lr"])


def test_run_command_exit_codes_and_help(capsys):
    assert run_command(COMMAND, ["--help"], lambda inv: 0) == 0
    out = capsys.readouterr().out
    assert "usage: prog go|stop" in out and "suite.* options (a suite)" in out and "suite.rate=0.5" in out
    assert "Recipe fields" in out and "data.timestamps=True" in out
    assert help_text(COMMAND) in out
    assert run_command(COMMAND, ["go", "n=x"], lambda inv: 0) == 2

    def fails(inv):
        raise FileNotFoundError("no such data")

    assert run_command(COMMAND, ["go"], fails, errors={FileNotFoundError: 1}, hint="try again") == 1
    assert "error: no such data\ntry again" in capsys.readouterr().err
