"""The SFT CLI end to end on the tiny model: data prep -> TIMER SFT (python and accelerate launch, full and LoRA) ->
two-step inference on the trained checkpoint."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT

pytestmark = pytest.mark.slow

SMALL = [
    "timer.synthetic_dialogs=24",
    "timer.synthetic_eval_dialogs=4",
    "training.max_steps=2",
    "training.logging_steps=1",
    "training.per_device_train_batch_size=4",
]


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


def run(args, env, check=True):
    proc = subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    return proc


def py(*args):
    return [sys.executable, *map(str, args)]


@pytest.fixture(scope="module")
def prepared(cli_env, tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared")
    proc = run(py("data_prep/timelychat.py", "recipe=tiny-timer", f"out={out}", *SMALL[:2]), cli_env)
    assert f"wrote {out}" in proc.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["splits"]["train"]["dialogs"] == 24 and manifest["splits"]["test"]["dialogs"] == 4
    return out


def eval_dialogs(sample_path):
    from timealign.data.synthetic import generate_timelychat
    from timealign.data.timelychat import load_timelychat, timelychat_dialog

    if sample_path.is_file():
        return load_timelychat(sample_path).dialogs
    return [timelychat_dialog(r, "synthetic", i) for i, r in enumerate(generate_timelychat(4, seed=9))]


SAMPLE = REPO_ROOT.parent / "shared" / "data" / "timelychat-sample" / "eval.jsonl"


def two_step(checkpoint):
    from timealign.suites.timelychat.infer import TimerInference

    dialogs = eval_dialogs(SAMPLE)
    infer = TimerInference.from_checkpoint(
        checkpoint, dtype="float32", device="cpu", batch_size=8, interval_max_new_tokens=6, response_max_new_tokens=8
    )
    preds = infer.run([d.context for d in dialogs], [d.target_speaker for d in dialogs])
    assert len(preds) == len(dialogs)
    for p in preds:
        assert "<SPK>" not in p.response and "<UTT>" not in p.response and "<TIME>" not in p.response
        assert p.interval_parsed == (p.minutes is not None)
        assert p.conditioned_on is not None
    return preds


def test_help_and_recipe_errors(cli_env):
    proc = run(py("train/sft.py", "--help"), cli_env)
    assert "tiny-timer" in proc.stdout and "timer3b" in proc.stdout and "llama8b" not in proc.stdout
    assert "timer.lambda_time=1.0" in proc.stdout and "<SPK>" in proc.stdout
    proc = run(py("train/sft.py", "recipe=tiny"), cli_env, check=False)
    assert proc.returncode == 2 and "is a 'dpo' recipe" in proc.stderr and "tiny-timer" in proc.stderr
    proc = run(py("train/sft.py", "recipe=tiny-timer", "timer.order=sideways"), cli_env, check=False)
    assert proc.returncode == 2 and "timer.order='sideways'" in proc.stderr and "utterance_first" in proc.stderr


def test_bad_input_names_file_and_record(cli_env, tmp_path):
    good = {
        "id": "ok",
        "speaker_list": ["A", "B"],
        "context": ["Off to the gym.", "Have fun!"],
        "target_speaker": "A",
        "time_elapsed": "1 hour",
        "timely_response": "Back!",
        "untimely_response": "Bye",
    }
    bad = dict(good, id="broken", context=["Off to the gym."])
    path = tmp_path / "dialogs.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    args = ["recipe=tiny-timer", "data.source=timelychat", f"data.path={path}", f"output_dir={tmp_path / 'run'}"]
    proc = run(py("train/sft.py", *args), cli_env, check=False)
    assert proc.returncode == 1
    assert f"{path}: record 'broken'" in proc.stderr and "must be the same length" in proc.stderr
    assert "data.on_error=skip" in proc.stderr
    from timealign.data.commands import dialogs_main as prep_main

    out = tmp_path / "prep"
    assert prep_main([*args, f"out={out}", "data.on_error=skip"]) == 0  # the data-prep CLI, in process
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rejects] == ["broken"] and "same length" in rejects[0]["reason"]
    assert json.loads((out / "manifest.json").read_text())["dialogs"] == 1


def test_python_full_finetune_then_two_step_inference(cli_env, prepared, tmp_path):
    out = tmp_path / "full"
    run(py("train/sft.py", "recipe=tiny-timer", f"data.prepared_dir={prepared}", f"output_dir={out}", *SMALL), cli_env)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.get_input_embeddings().weight.shape[0] == len(tok)
    assert tok.convert_tokens_to_ids("<TIME>") != tok.unk_token_id
    log = json.loads((out / "train_log.json").read_text())
    assert {"loss", "loss_time", "loss_response", "time_tokens_frac", "mean_token_accuracy"} <= set(log[0])
    assert 0 < log[0]["time_tokens_frac"] < 0.5
    two_step(out)
    from timealign.suites.timelychat import infer as timer_infer

    preds = tmp_path / "preds.jsonl"
    assert timer_infer.main([f"checkpoint={out}", "n=2", f"out={preds}"]) == 0  # the inference CLI, in process
    rows = [json.loads(x) for x in preds.read_text().splitlines()]
    assert len(rows) == 2 and {"gold_minutes", "minutes", "response", "interval_text"} <= set(rows[0])


def test_accelerate_launch_lora_wandb_then_two_step_inference(cli_env, prepared, tmp_path):
    out = tmp_path / "lora"
    env = dict(cli_env, WANDB_DIR=str(tmp_path))
    accelerate = str(Path(sys.executable).with_name("accelerate"))
    run(
        [
            accelerate,
            "launch",
            "--num_processes",
            "1",
            "--cpu",
            str(REPO_ROOT / "train/sft.py"),
            "recipe=tiny-timer",
            f"data.prepared_dir={prepared}",
            f"output_dir={out}",
            "lora.enabled=true",
            "lora.r=4",
            "training.report_to=[wandb]",
            *SMALL,
        ],
        env,
    )  # SMALL[:2]: the prepared folder's settings
    assert (out / "adapter_config.json").exists()
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["trainable_token_indices"]  # the TIMER tokens' rows were trained
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    blob = next(runs[0].glob("*.wandb")).read_bytes()
    assert b"loss_time" in blob and b"loss_response" in blob
    two_step(out)
