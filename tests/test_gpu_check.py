"""`make gpu-check` (benchmarks/gpu_check.py): one line and nothing run without CUDA; its whole code path on CPU
(`smoke=true`: a small model, no flex), with the numbers and checks its JSON promises."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
        f"json={out}",
        f"tictoc={tictoc_v1_dir}",
    ]
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "gpu_check.py"), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    runs = res["dpo"]["runs"]
    assert set(runs) == {
        "trl",
        "trl+precomputed_ref",
        "offset",
        "offset+precomputed_ref",
        "shared_sdpa",
        "shared_sdpa+precomputed_ref",
    }  # shared_flex: GPU only
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
