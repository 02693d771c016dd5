"""`OffsetDPOTrainer` against stock `trl.DPOTrainer` as an A/B pair, and the report of such a comparison (part 3 of
bench_dpo, on a GPU; part 2, the CPU variants, is benchmarks/dpo_variants.py).

Both trainers get the same model, batch, data (the tiny recipe's synthetic pairs, rendered by the shared renderer;
stock TRL without the `margin` column) and config, once with the reference forward every step and once with
`precompute_ref_log_probs`. The timing (alternated whole runs, interleaved single steps) is
`benchmarks.trainer_ab.compare_trainers`. Goal: ODPO/TRL steps/s >= 1.0. Part 3 (dpo_gpu) reuses `odpo_vs_trl`,
`synthetic_pairs`, `seq_lengths` and `report_compare`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from benchmarks.dpo_options import DpoBenchOptions
from benchmarks.harness import RecipeError, quiet, table, verdict
from benchmarks.trainer_ab import compare_trainers

KINDS = ("odpo", "trl")
GOAL = "ODPO/TRL steps/s >= 1.0"
MODES = (("ref_forward", "reference forward every step"), ("precompute_ref", "precompute_ref_log_probs=True"))


def dpo_builder(model_dir, dtype, tokenizer, dataset, config_kwargs: dict):
    """`build(kind, workdir, callbacks)` for trainer_ab: a fresh policy and trainer of either kind."""

    def build(kind: str, workdir: Path, callbacks: list):
        from transformers import AutoModelForCausalLM
        from trl import DPOConfig, DPOTrainer

        from timealign.train.odpo import OffsetDPOTrainer

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        # eval batch = train batch: the interleaved A/B draws its steps from the (sequential) eval dataloader
        args = DPOConfig(
            output_dir=str(workdir / kind),
            **config_kwargs,
            per_device_eval_batch_size=config_kwargs["per_device_train_batch_size"],
        )
        if kind == "odpo":
            return OffsetDPOTrainer(
                model=model, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=callbacks
            )
        return DPOTrainer(
            model=model,
            args=args,
            train_dataset=dataset.remove_columns("margin"),
            processing_class=tokenizer,
            callbacks=callbacks,
        )

    return build


def odpo_vs_trl(
    label: str,
    model_dir,
    dtype,
    tokenizer,
    dataset,
    config_kwargs: dict,
    opts: DpoBenchOptions,
    sync,
    flops_fn: Callable[[dict], dict] | None = None,
) -> dict:
    """The comparison, under this benchmark's JSON keys."""
    res = compare_trainers(
        label,
        KINDS,
        dpo_builder(model_dir, dtype, tokenizer, dataset, config_kwargs),
        max_steps=config_kwargs["max_steps"],
        warmup=opts.warmup,
        repeats=opts.repeats,
        ab_steps=opts.ab_steps,
        sync=sync,
        flops_fn=flops_fn,
    )
    out = {
        "config": dict(config_kwargs),
        "runs": res["runs"],
        "odpo": res["odpo"],
        "trl": res["trl"],
        "ratio_odpo_over_trl": res["ratio"],
        "ratio_per_round": res["ratio_per_round"],
        "ratio_fastest_quartile": res["ratio_fastest_quartile"],
        "run_spread_rel": res["run_spread_rel"],
        "same_tokens_per_run": res["same_tokens"],
    }
    if "interleaved" in res:
        out["interleaved"] = res["interleaved"]
    out.update(goal=GOAL, goal_met=res["goal_met"], within_noise=res["within_noise"])
    return out


def tiny_config(opts: DpoBenchOptions, precompute: bool) -> dict:
    """The tiny recipe's training section (lr, beta, loss_type, optim, scheduler ...) set up for timed CPU runs."""
    return recipe_config(opts, precompute, "tiny")


def recipe_config(opts: DpoBenchOptions, precompute: bool, recipe: str, overrides: dict | None = None) -> dict:
    """A recipe's training section (lr, beta, loss_type, optim, scheduler ...) set up for timed CPU runs: fp32, no
    gradient checkpointing, `batch_size` pairs per step with no accumulation, `steps` steps, no logging or saving.
    `overrides`: what the recipe needs to load (smol's v1 source needs a data.path)."""
    from timealign.config import load_recipe

    training = dict(load_recipe(recipe, overrides or {}).training)
    for key in ("num_train_epochs", "logging_steps"):
        training.pop(key, None)
    training.update(
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        report_to=["none"],
        per_device_train_batch_size=opts.batch_size,
        gradient_accumulation_steps=1,
        max_steps=opts.steps,
        logging_steps=10**6,
        save_strategy="no",
        seed=opts.seed,
        data_seed=opts.seed,
        max_length=opts.max_length,
        disable_tqdm=True,
        dataloader_num_workers=0,
        precompute_ref_log_probs=precompute,
    )
    return training


def synthetic_pairs(tokenizer, n_pairs: int, workdir: Path):
    """The tiny recipe's synthetic data prep, rendered with the shared renderer, as an in-memory Dataset."""
    from datasets import Dataset

    from timealign.config import load_recipe
    from timealign.data.pairs import load_prepared, prepare
    from timealign.render.chat import PromptRenderer
    from timealign.train.dpo import render_split

    recipe = load_recipe("tiny")
    with quiet():
        prepare(recipe.data, workdir / "data")
        data = load_prepared(workdir / "data")[recipe.data.train_split]
        if n_pairs > len(data):
            raise RecipeError(f"pairs={n_pairs}: the tiny recipe's data prep gives only {len(data)} train pairs")
        data = data.select(range(n_pairs))
        rendered = render_split(data, PromptRenderer.for_data(tokenizer, recipe.data), "render")
    keep = ["prompt", "chosen", "rejected", "margin"]
    return Dataset.from_dict({k: rendered[k] for k in keep})  # in memory: no cache files shared between runs


def seq_lengths(tokenizer, dataset) -> dict:
    """Tokens per sequence (prompt + completion + the EOS TRL appends) over chosen and rejected."""
    import statistics

    lengths = []
    for row in dataset:
        prompt = len(tokenizer(row["prompt"])["input_ids"])
        lengths += [
            prompt + len(tokenizer(row["chosen"])["input_ids"]) + 1,
            prompt + len(tokenizer(row["rejected"])["input_ids"]) + 1,
        ]
    return {"mean": statistics.mean(lengths), "max": max(lengths), "min": min(lengths)}


def report_compare(title: str, res: dict, gpu: bool) -> None:
    """Each mode's table of both trainers, the ratios and the goal."""
    for label, name in MODES:
        if label not in res:
            continue
        c = res[label]
        n = len(c["runs"]["odpo"])
        timed = c["runs"]["odpo"][0]["timed_steps"]
        print(
            f"\n{title}, {name} ({n} runs each, order ODPO,TRL / TRL,ODPO alternating; {timed} timed steps "
            f"per run after {c['config']['max_steps'] - timed} warm-up)"
        )
        header = [
            "trainer",
            "steps/s median",
            "min",
            "max",
            "s/step",
            "fastest-quartile s/step",
            "tokens/s",
            "tokens/step",
        ]
        header += ["TFLOP/s", "MFU"] if gpu else ["CPU share"]
        rows = []
        for kind, trainer_name in (("odpo", "OffsetDPOTrainer"), ("trl", "trl.DPOTrainer")):
            s = c[kind]
            row = [
                trainer_name,
                f"{s['steps_per_s_median']:.3f}",
                f"{s['steps_per_s_min']:.3f}",
                f"{s['steps_per_s_max']:.3f}",
                f"{1 / s['steps_per_s_median']:.3f}",
                f"{s['step_s_p25']:.3f}",
                f"{s['tokens_per_s_median']:.0f}",
                f"{s['tokens_per_step']:.0f}",
            ]
            if gpu:
                row += [f"{s['achieved_tflops']:.1f}", f"{100 * s['mfu']:.1f}%"]
            else:
                row += [f"{100 * s['cpu_share_median']:.0f}%"]
            rows.append(row)
        print(table(header, rows))
        per_round = ", ".join(f"{r:.3f}" for r in c["ratio_per_round"])
        print(
            f"ratio ODPO/TRL (medians): {c['ratio_odpo_over_trl']:.3f}; per round: {per_round}; "
            f"run-to-run spread (max-min)/median: {100 * c['run_spread_rel']:.1f}%"
        )
        if not gpu:
            shares = [r["cpu_share"] for k in KINDS for r in c["runs"][k]]
            contended = sum(x < 0.8 for x in shares)
            if contended:
                print(
                    f"note: {contended} of {len(shares)} runs got < 80% of the cores (other processes): their "
                    "steps/s are contention, not trainer speed"
                )
        if not c["same_tokens_per_run"]:
            print("WARNING: ODPO and TRL runs did not see the same number of tokens in the timed window")
        print(f"goal: {c['goal']}: {verdict(c['goal_met'], c['within_noise'])}")
        print(
            f"contention-robust ratio ODPO/TRL from the fastest quartile of steps: "
            f"{c['ratio_fastest_quartile']:.3f} ({'>=' if c['ratio_fastest_quartile'] >= 1.0 else '<'} 1.0)"
        )
        ab = c.get("interleaved")
        if ab:
            print(
                f"interleaved per-step A/B ({ab['steps']} steps each, forward + backward, no optimizer step): "
                f"ODPO {ab['odpo_step_s_median']:.3f} s/step, TRL {ab['trl_step_s_median']:.3f} s/step; "
                f"paired ratio ODPO/TRL median {ab['ratio_paired_median']:.3f} "
                f"(range {ab['ratio_paired_min']:.3f}..{ab['ratio_paired_max']:.3f})"
                + ("" if ab["same_batches"] else "; WARNING: batches differed")
            )
