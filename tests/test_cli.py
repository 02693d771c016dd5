"""The real CLIs end to end on the tiny model: data prep -> offset-DPO (python and accelerate launch) -> eval."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory):
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        WANDB_MODE="offline",
        TOKENIZERS_PARALLELISM="false",
        TIMEALIGN_CACHE=str(tmp_path_factory.mktemp("cache")),
        PYTHONUNBUFFERED="1",
    )
    return env


def run(args, env, cwd=REPO_ROOT, check=True):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


def py(script, *args):
    return [sys.executable, str(REPO_ROOT / script), *args]


DATA = "data.synthetic_trajectories=8"  # the prepared folder's settings: every run on it says them too


@pytest.fixture(scope="module")
def prepared(cli_env, tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared")
    proc = run(py("data_prep/tictoc.py", "recipe=tiny", f"out={out}", DATA), cli_env)
    assert f"wrote {out}" in proc.stdout
    return out


def test_help_and_recipe_errors(cli_env):
    proc = run(py("train/dpo.py", "--help"), cli_env)
    assert "recipe=NAME" in proc.stdout and "llama8b" in proc.stdout and "training.learning_rate" in proc.stdout
    proc = run(py("train/dpo.py", "recipe=llama9b"), cli_env, check=False)
    assert proc.returncode == 2 and "unknown recipe 'llama9b'" in proc.stderr and "qwen3-8b" in proc.stderr
    proc = run(py("train/dpo.py", "recipe=tiny", "training.bogus=1"), cli_env, check=False)
    assert proc.returncode == 2 and "training.bogus" in proc.stderr and "learning_rate" in proc.stderr
    proc = run(py("eval/run.py", "--help"), cli_env)
    assert "\n  checkpoint=" in proc.stdout and "prompt_mode" in proc.stdout  # generated option entries


def recipe_fields(cls, prefix=""):
    """(dotted name, help text) of every settable recipe field."""
    import dataclasses

    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default):
            yield from recipe_fields(type(default), f"{prefix}{f.name}.")
        elif f.name not in ("name", "description", "task"):
            yield f"{prefix}{f.name}", f.metadata.get("help", "")


@pytest.mark.parametrize("task", ["dpo", "sft"])
def test_training_help_lists_every_recipe_field_with_its_help(task, capsys):
    from timealign.config.schema import Recipe
    from timealign.train import dpo, sft

    assert {"dpo": dpo, "sft": sft}[task].main(["--help"]) == 0
    text = capsys.readouterr().out
    flat = " ".join(text.split())  # help text is wrapped
    missing = [
        key
        for key, help_ in recipe_fields(Recipe)
        if f"\n  {key}=" not in text or (help_ and " ".join(help_.split()) not in flat)
    ]
    assert not missing
    assert f"train/{task}.py recipe=NAME|--config PATH" in text


def test_data_prep_cli_manifest(prepared):
    manifest = json.loads((prepared / "manifest.json").read_text())
    # 8 synthetic trajectories per split x 3 elapse levels.
    assert manifest["splits"]["train"]["pairs"] == 24 and manifest["splits"]["test"]["pairs"] == 24
    assert manifest["rejects"] == 0


def test_data_prep_cli_bad_input(cli_env, tmp_path):
    folder = tmp_path / "v1"
    folder.mkdir()
    good = {
        "id": "train_delay_1",
        "function": [{"type": "function", "function": {"name": "get_delay"}}],
        "history": [
            {"role": "system", "content": "s", "time": "2024-01-01T00:00:00Z"},
            {"role": "user", "content": "q", "time": "2024-01-01T00:00:00Z"},
            {
                "role": "assistant",
                "content": None,
                "time": "2024-01-01T00:00:02Z",
                "tool_calls": [{"id": "a", "type": "function", "function": {"name": "get_delay", "arguments": "{}"}}],
            },
            {
                "role": "tool",
                "tool_call_id": "a",
                "name": "get_delay",
                "content": "{}",
                "time": "2024-01-01T00:00:03Z",
            },
            {
                "role": "user",
                "content": "again?",
                "time": ["2024-01-01T00:00:09Z", "2024-01-01T00:05:00Z", "2024-01-01T04:00:00Z"],
            },
        ],
    }
    bad = json.loads(json.dumps(good))
    bad["id"] = "train_delay_2"
    bad["history"][4]["time"] = bad["history"][4]["time"][:2]
    (folder / "preferTool_elapse_2.json").write_text(json.dumps([good, bad]))
    proc = run(
        py("data_prep/tictoc.py", "recipe=tiny", "data.source=v1", f"data.path={folder}", f"out={tmp_path / 'out'}"),
        cli_env,
        check=False,
    )
    assert proc.returncode == 1
    assert "preferTool_elapse_2.json: record 'train_delay_2'" in proc.stderr and "must list 3 times" in proc.stderr
    proc = run(
        py(
            "data_prep/tictoc.py",
            "recipe=tiny",
            "data.source=v1",
            f"data.path={folder}",
            f"out={tmp_path / 'out'}",
            "data.on_error=skip",
        ),
        cli_env,
    )
    # Training on the same folder prepares the data first and stops with the same named error.
    proc = run(
        py("train/dpo.py", "recipe=tiny", "data.source=v1", f"data.path={folder}", f"output_dir={tmp_path / 'run'}"),
        cli_env,
        check=False,
    )
    assert proc.returncode == 1 and "record 'train_delay_2'" in proc.stderr and "data.on_error=skip" in proc.stderr
    rejects = [json.loads(x) for x in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rejects] == ["train_delay_2"]
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["pairs"] == 1


def test_accelerate_launch_trains_logs_and_saves(cli_env, prepared, tmp_path):
    """`accelerate launch train/dpo.py recipe=tiny` with W&B offline; the checkpoint loads and evaluates."""
    out = tmp_path / "run"
    env = dict(cli_env, WANDB_DIR=str(tmp_path))
    run(
        [
            str(Path(sys.executable).with_name("accelerate")),
            "launch",
            "--num_processes",
            "1",
            "--cpu",
            str(REPO_ROOT / "train/dpo.py"),
            "recipe=tiny",
            f"data.prepared_dir={prepared}",
            DATA,
            f"output_dir={out}",
            "training.max_steps=2",
            "training.logging_steps=1",
            "training.report_to=[wandb]",
            "training.per_device_train_batch_size=4",
        ],
        env,
    )
    from transformers import AutoModelForCausalLM

    from timealign.models.tiny import ensure_tiny_model

    trained, base = (
        AutoModelForCausalLM.from_pretrained(out),
        AutoModelForCausalLM.from_pretrained(ensure_tiny_model()),
    )
    assert trained.config.architectures == ["LlamaForCausalLM"]
    changed = [n for n, p in trained.state_dict().items() if not p.equal(base.state_dict()[n])]
    assert changed, "the saved model equals the base: training saved nothing it learned"
    log = json.loads((out / "train_log.json").read_text())
    first = log[0]
    assert {"loss", "rewards/margins", "rewards/accuracies", "offset/mean"} <= set(first)
    assert first["offset/mean"] > 0.5  # margins |S - 1.5| of the synthetic pairs reached the loss
    assert (out / "timealign_recipe.yaml").exists()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert b"rewards/margins" in next(runs[0].glob("*.wandb")).read_bytes()

    report_dir = tmp_path / "eval"
    eval_env = dict(cli_env, WANDB_DIR=str(tmp_path / "eval-wandb"))
    (tmp_path / "eval-wandb").mkdir()
    run(
        py(
            "eval/run.py",
            "recipe=tiny",
            f"data.prepared_dir={prepared}",
            DATA,
            f"checkpoint={out}",
            f"out={report_dir}",
            "wandb=true",
        ),
        eval_env,
    )
    eval_runs = list((tmp_path / "eval-wandb" / "wandb").glob("offline-run-*/*.wandb"))
    assert len(eval_runs) == 1 and b"tictoc/nar" in eval_runs[0].read_bytes()
    report = json.loads((report_dir / "tictoc.json").read_text())
    assert report["overall"]["n"] == 24 and len(report["samples"]) == 24
    assert report["settings"]["family"] == "tiny" and report["settings"]["timestamps"] is True
    assert "NAR" in (report_dir / "report.md").read_text()


def test_python_launch_with_lora_and_eval_compare(cli_env, prepared, tmp_path):
    out = tmp_path / "lora"
    run(
        py(
            "train/dpo.py",
            "recipe=tiny",
            f"data.prepared_dir={prepared}",
            DATA,
            f"output_dir={out}",
            "lora.enabled=true",
            "lora.r=4",
            "training.max_steps=1",
            "training.precompute_ref_log_probs=true",
        ),
        cli_env,
    )
    assert (out / "adapter_config.json").exists()
    run(
        py(
            "eval/run.py",
            "recipe=tiny",
            f"data.prepared_dir={prepared}",
            DATA,
            f"checkpoint={out}",
            f"out={tmp_path / 'after'}",
            "timestamps=false",
        ),
        cli_env,
    )
    run(py("eval/run.py", "recipe=tiny", f"data.prepared_dir={prepared}", DATA, f"out={tmp_path / 'before'}"), cli_env)
    after = json.loads((tmp_path / "after" / "tictoc.json").read_text())
    assert after["settings"]["timestamps"] is False
    proc = run(
        py(
            "eval/compare.py",
            f"before={tmp_path / 'before' / 'tictoc.json'}",
            f"after={tmp_path / 'after' / 'tictoc.json'}",
        ),
        cli_env,
    )
    assert "| NAR |" in proc.stdout and "prefer-Tool (want a call)" in proc.stdout


def test_config_file_outside_recipes(cli_env, prepared, tmp_path):
    """`--config PATH` trains from a recipe YAML kept anywhere; its file name becomes the recipe's name."""
    config = tmp_path / "my-run.yaml"
    config.write_text((REPO_ROOT / "recipes" / "tiny.yaml").read_text())
    proc = run(py("train/dpo.py", "--config", str(config), "training.bogus=1"), cli_env, check=False)
    assert proc.returncode == 2 and "training.bogus" in proc.stderr
    proc = run(py("train/dpo.py", "--config", str(tmp_path / "absent.yaml")), cli_env, check=False)
    assert proc.returncode == 2 and "no such file" in proc.stderr
    out = tmp_path / "run"
    proc = run(
        py(
            "train/dpo.py",
            "--config",
            str(config),
            f"data.prepared_dir={prepared}",
            DATA,
            f"output_dir={out}",
            "training.max_steps=1",
        ),
        cli_env,
    )
    assert f"saved model to {out}" in proc.stderr  # the closing log line (logging writes to stderr)
    import yaml

    saved = yaml.safe_load((out / "timealign_recipe.yaml").read_text())
    assert saved["name"] == "my-run" and saved["training"]["max_steps"] == 1


def test_reasoning_suites_through_the_evaluator(cli_env, tmp_path):
    """All three temporal-reasoning suites on one checkpoint land in one report; sets generate from the CLI."""
    out = tmp_path / "reasoning"
    run(
        py(
            "eval/run.py",
            "recipe=tiny",
            "suites=timepuzzles,chronosense,tcp",
            f"out={out}",
            "timepuzzles.n=2",
            "timepuzzles.max_new_tokens=8",
            "chronosense.n=2",
            "chronosense.max_new_tokens=4",
            "tcp.n=2",
            "tcp.max_new_tokens=8",
        ),
        cli_env,
    )
    for suite in ("timepuzzles", "chronosense", "tcp"):
        report = json.loads((out / f"{suite}.json").read_text())
        assert report["suite"] == suite and report["overall"]["n"] == 2
    assert (out / "report.md").read_text().count("## ") >= 3
    proc = run(py("eval/run.py", "recipe=tiny", "suites=tictoc,nope"), cli_env, check=False)
    assert proc.returncode == 2 and "unknown suite(s) nope" in proc.stderr and "timepuzzles" in proc.stderr
    target = tmp_path / "tcp.jsonl"
    run(py("data_prep/reasoning.py", "suite=tcp", "n=3", "seed=1", f"out={target}"), cli_env)
    assert len(target.read_text().splitlines()) == 3
