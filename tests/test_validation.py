"""Recipe values are refused before any work starts (timealign/config/validate.py): exit 2, one line, no traceback,
nothing written.

Five entry points run as users run them (`python train/dpo.py recipe=tiny training.beta=0`), all at once (each
spends its seconds importing TRL); the other cases call the same entry points' `main` in this process, and every
other rule of the table is checked through `load_recipe`.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys

import pytest
from helpers import REPO_ROOT

from timealign.config import RecipeError, load_recipe
from timealign.config.validate import (
    AT_LEAST_1,
    FRACTION,
    HALF_OPEN,
    MAX_STEPS,
    NON_NEGATIVE,
    OPEN_FRACTION,
    OPEN_UNIT,
    PORT,
    POSITIVE,
    RULES,
    check_model_reference,
)

# (case id, how users run it, what the one error line must say). {tmp} is the case's own (empty) working folder.
SUBPROCESS_CASES = [
    ("beta-zero", ["train/dpo.py", "recipe=tiny", "training.beta=0"], "training.beta=0.0 must be > 0"),
    (
        "lr-negative",
        ["train/dpo.py", "recipe=tiny", "training.learning_rate=-1e-5"],
        "training.learning_rate=-1e-05 must be > 0",
    ),
    (
        "offset-negative",
        ["train/dpo.py", "recipe=tiny", "data.offset_scale=-1"],
        "data.offset_scale=-1.0 must be >= 0",
    ),
    (
        "eval-checkpoint-missing",
        ["eval/run.py", "recipe=tiny", "checkpoint={tmp}/run/checkpoint-9", "out={tmp}/eval"],
        "checkpoint={tmp}/run/checkpoint-9: no such folder",
    ),
    (
        "sbatch-job-name",
        ["-m", "timealign.cluster", "submit", "dry_run=true", "task=dpo", "recipe=tiny", "name=x/../../y"],
        "name='x/../../y' is not safe as a file and job name",
    ),
]
IN_PROCESS_CASES = [
    (
        "max-new-tokens-0-local",
        ["eval/run.py", "recipe=tiny", "checkpoint=tiny", "eval.max_new_tokens=0", "out={tmp}/eval"],
        "eval.max_new_tokens=0 (no limit) is for eval.backend=chat",
    ),
    (
        "weight-without-shared-prompt",
        ["train/dpo.py", "recipe=tiny", "dpo.margin_mode=weight", "dpo.shared_prompt=false"],
        "dpo.margin_mode=weight weights each pair's loss",
    ),
    ("beta-negative", ["train/dpo.py", "recipe=tiny", "training.beta=-0.1"], "training.beta=-0.1 must be > 0"),
    (
        "margin-negative",
        ["train/dpo.py", "recipe=tiny", "data.margin_prefer_tool=-0.5"],
        "data.margin_prefer_tool=-0.5 must be >= 0",
    ),
    (
        "name-escapes",
        ["train/dpo.py", "recipe=tiny", "name=../../evil"],
        "name='../../evil' is not safe as a file and job name",
    ),
    (
        "v1-path-missing",
        ["train/dpo.py", "recipe=tiny", "data.source=v1", "data.path={tmp}/no-such-release"],
        "data.path={tmp}/no-such-release: no such file or folder",
    ),
    (
        "model-missing",
        ["train/dpo.py", "recipe=tiny", "model.name_or_path={tmp}/no-such-model"],
        "model.name_or_path={tmp}/no-such-model: no such folder",
    ),
    (
        "sft-lambda-negative",
        ["train/sft.py", "recipe=tiny-timer", "timer.lambda_time=-1"],
        "timer.lambda_time=-1.0 must be >= 0",
    ),
    (
        "sft-dialogs-missing",
        ["train/sft.py", "recipe=tiny-timer", "data.source=timelychat", "data.path={tmp}/dialogs"],
        "data.path={tmp}/dialogs: no such file or folder",
    ),
    (
        "prep-annotated-missing",
        ["data_prep/tictoc.py", "recipe=tiny", "data.source=annotated", "data.path={tmp}/scores.jsonl"],
        "data.path={tmp}/scores.jsonl: no such file or folder",
    ),
    (
        "eval-v1-path-missing",
        [
            "eval/run.py",
            "recipe=tiny",
            "checkpoint=tiny",
            "suites=tictoc",
            "data.source=v1",
            "data.path={tmp}/release",
            "out={tmp}/eval",
        ],
        "data.path={tmp}/release: no such file",
    ),
    (
        "prep-lr-negative",
        ["data_prep/timelychat.py", "recipe=tiny-timer", "training.learning_rate=-1"],
        "training.learning_rate=-1.0 must be > 0",
    ),
]
MAINS = {
    "train/dpo.py": "timealign.train.dpo:main",
    "train/sft.py": "timealign.train.sft:main",
    "data_prep/tictoc.py": "timealign.data.commands:pairs_main",
    "data_prep/timelychat.py": "timealign.data.commands:dialogs_main",
    "eval/run.py": "timealign.eval.runner:main",
}


def _argv(args: list[str], tmp) -> list[str]:
    argv = [a.format(tmp=tmp) for a in args]
    if argv[0] != "-m" and argv[0] != "eval/run.py":
        argv.append(f"output_dir={tmp}/run")  # where data prep and training would write
    return argv


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every subprocess case started at once; case id -> (folder, exit code, stdout, stderr)."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_MODE": "offline",
        "TIMEALIGN_CACHE": str(tmp_path_factory.mktemp("cache")),
    }
    started = {}
    for case, args, _ in SUBPROCESS_CASES:
        tmp = tmp_path_factory.mktemp(case)
        argv = _argv(args, tmp)
        if argv[0].endswith(".py"):
            argv[0] = str(REPO_ROOT / argv[0])
        started[case] = (
            tmp,
            subprocess.Popen(
                [sys.executable, *argv], cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            ),
        )
    done = {}
    for case, (tmp, proc) in started.items():
        out, err = proc.communicate(timeout=600)
        done[case] = (tmp, proc.returncode, out, err)
    return done


def _assert_refused(tmp, code, err, message):
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err[-3000:]
    assert "Traceback" not in err and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("error: ") and message.format(tmp=tmp) in lines[0], lines[0]
    assert sorted(p.name for p in tmp.iterdir()) == []  # no prepared data, no model, no report, no log


@pytest.mark.parametrize("case, args, message", SUBPROCESS_CASES, ids=[c[0] for c in SUBPROCESS_CASES])
def test_bad_value_stops_the_real_command_before_any_work(runs, case, args, message):
    tmp, code, _, err = runs[case]
    _assert_refused(tmp, code, err, message)


@pytest.mark.parametrize("case, args, message", IN_PROCESS_CASES, ids=[c[0] for c in IN_PROCESS_CASES])
def test_bad_value_stops_the_entry_point_before_any_work(case, args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    module, name = MAINS[args[0]].split(":")
    code = getattr(importlib.import_module(module), name)(_argv(args, tmp_path)[1:])
    _assert_refused(tmp_path, code, capsys.readouterr().err, message)


def _bad_values(test) -> list:
    """Out-of-range values that are still whole numbers (integer fields read them too)."""
    return {
        POSITIVE: [0, -1],
        NON_NEGATIVE: [-1],
        AT_LEAST_1: [0, -2],
        FRACTION: [-1, 2],
        OPEN_FRACTION: [0, 2],
        HALF_OPEN: [-1, 1],
        OPEN_UNIT: [0, 1],
        PORT: [0, 70000],
        MAX_STEPS: [0, -5],
    }[test]


def _recipe_for(key: str) -> str | None:
    """A recipe whose task has `key` (training.* keys are TRL's own: beta is DPO's only)."""
    if not key.startswith("training."):
        return "tiny"
    from trl import DPOConfig, SFTConfig

    name = key.split(".", 1)[1]
    for recipe, cls in (("tiny", DPOConfig), ("tiny-timer", SFTConfig)):
        if name in {f.name for f in dataclasses.fields(cls)}:
            return recipe
    return None


@pytest.mark.parametrize("key, rule, why", RULES, ids=[r[0] for r in RULES])
def test_every_rule_refuses_out_of_range_values(key, rule, why):
    recipe = _recipe_for(key)
    assert recipe is not None, f"{key} is no field of the installed TRL's DPOConfig or SFTConfig: drop its rule"
    for value in _bad_values(rule):
        with pytest.raises(RecipeError, match=rf"^{key}=\S+ must be "):
            load_recipe(recipe, {key: str(value)})


@pytest.mark.parametrize("key", ["training.learning_rate", "training.beta", "data.offset_scale", "eval.kv_cache_gib"])
def test_nan_and_infinity_are_refused(key):
    for value in ("nan", "inf", "-inf"):
        with pytest.raises(RecipeError, match=rf"^{key}=\S+ must be "):
            load_recipe("tiny", {key: value})


def test_boundary_values_and_every_shipped_recipe_pass():
    """What the rules allow at their edge (the ablations use 0) and every recipe in recipes/."""
    edges = {
        "data.offset_scale": "0",
        "timer.lambda_time": "0",
        "data.margin_prefer_tool": "0",
        "launch.gpus_per_node": "0",
        "eval.max_retries": "0",
        "training.max_steps": "3",
        "training.num_train_epochs": "0",
        "eval.gpu_memory_utilization": "1",
        "lora.dropout": "0",
    }
    recipe = load_recipe("tiny", edges)
    assert recipe.data.offset_scale == 0 and recipe.timer.lambda_time == 0
    from timealign.config import available_recipes

    for name in available_recipes():
        load_recipe(name)


def test_several_problems_come_in_one_line_and_names_and_templates_are_checked():
    with pytest.raises(RecipeError) as err:
        load_recipe("tiny", {"training.beta": "0", "training.learning_rate": "-1", "data.min_margin": "-2"})
    text = str(err.value)
    assert "\n" not in text and all(
        k in text for k in ("training.beta=0.0", "training.learning_rate=-1.0", "data.min_margin=-2.0")
    )
    for name in ("../x", "a/b", ".hidden", "-flag", "with space", "x" * 101, "tab\tname"):
        with pytest.raises(RecipeError, match="is not safe as a file and job name"):
            load_recipe("tiny", {"name": name})
    assert load_recipe("tiny", {"name": "my-run_2.b+c"}).resolved_output_dir() == "outputs/my-run_2.b+c"
    with pytest.raises(RecipeError, match=r"output_dir='out/\{run\}': only \{name\} may appear in braces"):
        load_recipe("tiny", {"output_dir": "out/{run}"})
    with pytest.raises(RecipeError, match="training.num_train_epochs=0 with no training.max_steps > 0 trains nothing"):
        load_recipe("tiny", {"training.num_train_epochs": "0"})
    with pytest.raises(RecipeError, match="data.source=annotated needs data.path"):
        load_recipe("tiny", {"data.source": "annotated"})


def test_model_references_local_paths_must_exist_hub_ids_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs" / "run").mkdir(parents=True)
    (tmp_path / "outputs" / "run" / "config.json").write_text("{}")
    for hub_id in ("org/name", "meta-llama/Llama-3.1-8B-Instruct", "gpt2", "tiny", "tiny-agent"):
        check_model_reference(hub_id, "checkpoint")  # not here: left to the hub client
    check_model_reference("outputs/run", "checkpoint")
    check_model_reference(str(tmp_path / "outputs/run"), "checkpoint")
    for missing, near in (
        ("outputs/other", None),
        ("outputs/run/checkpoint-9", "outputs/run"),
        (str(tmp_path / "gone/deeper/x"), None),
        ("./model", None),
        ("a/b/c", None),
        ("../elsewhere/model", None),
    ):
        with pytest.raises(RecipeError, match=rf"^checkpoint={missing}: no such folder") as err:
            check_model_reference(missing, "checkpoint")
        if near:
            assert f"nearest existing folder is {near}" in str(err.value)
