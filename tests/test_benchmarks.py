"""The benchmark harness's statistics on hand-made timings (no timing is measured here), and the benchmarks' CLIs."""

import sys

import pytest
from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))  # benchmarks/ is a folder of scripts beside the package, not installed

from benchmarks import harness, trainer_ab  # noqa: E402
from timealign.config.cli import help_text, parse  # noqa: E402
from timealign.config.options import RecipeError  # noqa: E402


def test_summary_reports_best_median_and_max():
    assert harness.summary([3.0, 1.0, 2.0]) == {"best": 1.0, "median": 2.0, "max": 3.0, "runs": [3.0, 1.0, 2.0]}
    assert harness.summary([4.0, 1.0, 3.0, 2.0])["median"] == 2.5


def test_abba_alternates_the_order_every_round():
    assert list(harness.abba("odpo", "trl", 3)) == [
        (0, "odpo"),
        (0, "trl"),
        (1, "trl"),
        (1, "odpo"),
        (2, "odpo"),
        (2, "trl"),
    ]


def test_paired_ratios_are_a_over_b_in_speed():
    ratios = harness.paired_ratios([1.0, 2.0, 0.5], [2.0, 3.0, 1.0])  # A's seconds, B's seconds
    assert ratios == [2.0, 1.5, 2.0]
    assert harness.ratio_range(ratios) == {
        "ratio_paired_median": 2.0,
        "ratio_paired_min": 1.5,
        "ratio_paired_max": 2.0,
    }
    assert harness.ratio_range([2.0, 1.5])["ratio_paired_median"] == 1.75


def test_fastest_quartile_is_the_lower_25th_percentile():
    assert harness.fastest_quartile([0.5, 0.1, 0.4, 0.2, 0.3]) == 0.2  # sorted index (5 - 1) // 4 = 1
    assert harness.fastest_quartile([0.9, 0.7, 0.8]) == 0.7  # index 0
    assert harness.fastest_quartile([float(x) for x in range(9, 0, -1)]) == 3.0  # index 8 // 4 = 2


def test_top_level_imports_keeps_only_modules_imported_by_main():
    stderr = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       100 |        100 |   _io",  # nested: two spaces
            "import time:      2000 |     500000 | torch",
            "import time:       300 |    1500000 | trl",
            "some other line",
        ]
    )
    assert harness.top_level_imports(stderr) == {"total": 2.0, "largest": {"trl": 1.5, "torch": 0.5}}
    assert list(harness.top_level_imports(stderr, top=1)["largest"]) == ["trl"]


def test_table_met_and_verdict():
    assert harness.table(["a", "bb"], [["1", "2"]]) == "| a | bb |\n|---|----|\n| 1 | 2  |"
    assert harness.met(True) == "MET" and harness.met(False) == "NOT MET"
    assert harness.verdict(True, None) == "MET"
    assert harness.verdict(False, True) == "NOT MET (within run-to-run noise)"
    assert harness.verdict(False, False) == "NOT MET (outside run-to-run noise)"
    assert harness.verdict(False, None) == "NOT MET (noise unknown: 1 repeat)"


def test_check_steps_needs_a_timed_step_after_the_warmup():
    harness.check_steps(2, steps=3, gpu_steps=12)
    with pytest.raises(RecipeError, match="gpu_steps=2 must be larger than warmup=2"):
        harness.check_steps(2, steps=3, gpu_steps=2)


def run(steps_per_s, tokens_per_s, cpu_share, step_s, tokens_timed=300, timed_steps=3):
    return {
        "steps_per_s": steps_per_s,
        "tokens_per_s": tokens_per_s,
        "tokens_timed": tokens_timed,
        "timed_steps": timed_steps,
        "cpu_share": cpu_share,
        "timed_step_s": step_s,
    }


RUNS_A = [run(2.0, 200.0, 0.5, [0.5, 0.6, 0.4]), run(4.0, 400.0, 0.9, [0.25, 0.3, 0.2])]
RUNS_B = [run(1.0, 100.0, 0.8, [1.0, 1.1, 0.9]), run(1.5, 150.0, 0.6, [0.5, 0.55, 0.45])]


def test_run_stats_medians_ranges_and_pooled_fastest_steps():
    a = trainer_ab.run_stats(RUNS_A)
    assert a["steps_per_s_median"] == 3.0 and a["steps_per_s_min"] == 2.0 and a["steps_per_s_max"] == 4.0
    assert a["tokens_per_s_median"] == 300.0
    assert a["tokens_per_step"] == 100.0  # 300 tokens in 3 steps
    assert a["cpu_share_median"] == pytest.approx(0.7)
    assert a["step_s_min"] == 0.2
    assert a["step_s_p25"] == 0.25  # pooled [0.2, 0.25, 0.3, 0.4, 0.5, 0.6], index (6 - 1) // 4 = 1
    b = trainer_ab.run_stats(RUNS_B)
    assert b["steps_per_s_median"] == 1.25 and b["step_s_p25"] == 0.5


def test_ab_summary_ratios_and_spread():
    a, b = trainer_ab.run_stats(RUNS_A), trainer_ab.run_stats(RUNS_B)
    out = trainer_ab.ab_summary(a, b, RUNS_A, RUNS_B)
    assert out["ratio"] == pytest.approx(3.0 / 1.25)
    assert out["ratio_per_round"] == pytest.approx([2.0, 4.0 / 1.5])
    assert out["ratio_fastest_quartile"] == pytest.approx(0.5 / 0.25)  # B's p25 seconds over A's
    assert out["run_spread_rel"] == pytest.approx(2.0 / 3.0)  # A: (4 - 2) / 3; B: (1.5 - 1) / 1.25 = 0.4
    assert out["same_tokens"] is True
    unequal = [dict(RUNS_B[0], tokens_timed=299), RUNS_B[1]]
    assert trainer_ab.ab_summary(a, b, RUNS_A, unequal)["same_tokens"] is False


def test_goal_check_and_noise():
    assert trainer_ab.goal_check(1.2, 0.0, repeats=1) == (True, None)
    assert trainer_ab.goal_check(0.9, 0.2, repeats=2) == (False, True)  # 0.9 >= 1 - 0.2
    assert trainer_ab.goal_check(0.7, 0.2, repeats=2) == (False, False)


def test_mfu():
    out = trainer_ab.mfu(flop_per_step=1e12, steps_per_s=2.0, peak_tflops=10.0)
    assert out == {"flop_per_step": 1e12, "achieved_tflops": pytest.approx(2.0), "mfu": pytest.approx(0.2)}


@pytest.mark.parametrize("script", ["bench_dpo", "bench_sft", "bench_eval"])
def test_benchmark_commands_read_key_value_options(script):
    module = __import__(f"benchmarks.{script}", fromlist=["COMMAND"])
    options = parse(module.COMMAND, ["seed=3"] if script != "bench_eval" else ["n=3"]).options
    assert (options.seed if script != "bench_eval" else options.n) == 3
    assert "Options:" in help_text(module.COMMAND)
    with pytest.raises(RecipeError, match="unknown key"):
        parse(module.COMMAND, ["stepz=3"])
    with pytest.raises(RecipeError, match="expected"):  # the old argparse style is refused with a hint
        parse(module.COMMAND, ["--seed", "3"])


def test_bench_dpo_options_and_json_args_keep_their_names():
    from benchmarks.bench_dpo import COMMAND

    options = parse(COMMAND, ["steps=20", "ab_steps=0", "no_precompute=true", "json=results/bench.json"]).options
    record = harness.options_record(options)
    assert (record["steps"], record["ab_steps"], record["no_precompute"], record["json"]) == (
        20,
        0,
        True,
        "results/bench.json",
    )
    assert {
        "tictoc",
        "data_runs",
        "warmup",
        "repeats",
        "batch_size",
        "pairs",
        "max_length",
        "skip_data",
        "skip_train",
        "peak_tflops",
        "gpu_seq_len",
        "gpu_steps",
        "gpu_batch_size",
    } <= set(record)


def test_bench_dpo_model_option_takes_tiny_or_smol_and_the_smol_config_is_one_pair_in_fp32():
    from benchmarks.bench_dpo import COMMAND
    from benchmarks.dpo_trainers import recipe_config

    assert parse(COMMAND, []).options.model == "tiny"
    options = parse(COMMAND, ["model=smol", "batch_size=1", "max_length=2048", "steps=3"]).options
    assert options.model == "smol"
    with pytest.raises(RecipeError, match="model='llama' is not one of: tiny, smol"):
        parse(COMMAND, ["model=llama"])
    # the smol recipe's training section (its v1 source needs a data.path to load; nothing is read from it)
    config = recipe_config(options, False, options.model, {"data.path": "v1-data"})
    assert (config["per_device_train_batch_size"], config["gradient_accumulation_steps"]) == (1, 1)
    assert (config["max_length"], config["max_steps"], config["bf16"]) == (2048, 3, False)
    from timealign.config import load_recipe

    smol = load_recipe("smol", {"data.path": "v1-data"}).training
    assert config["learning_rate"] == smol["learning_rate"] and config["loss_type"] == ["sigmoid"]


def test_bench_dpo_times_the_packed_layout_both_ways_and_keeps_a_note():
    """Part 2 has the packed rows with the precomputed reference and with the reference every step (the packed layout
    as the recipes train it), in `make bench`'s default list; `note=` goes into the JSON (`busy` on shared cores)."""
    from benchmarks.bench_dpo import COMMAND
    from benchmarks.dpo_variants import SETTINGS, VARIANTS

    options = parse(COMMAND, ["note=busy: two training runs beside"]).options
    assert options.note == "busy: two training runs beside" and harness.options_record(options)["note"] == options.note
    assert {"padding_free", "padding_free_ref"} <= set(options.variants.split(",")) <= set(VARIANTS)
    assert SETTINGS["padding_free_ref"] == ({"shared_prompt": True, "padding_free": True}, {})
    assert SETTINGS["padding_free"][1]["precompute_ref_log_probs"] is True
