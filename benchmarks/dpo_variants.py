"""Part 2 of bench_dpo: the speed-ups of offset-DPO one at a time, against stock `trl.DPOTrainer`.

Variants (each adds to the one before; the last two are alternatives against padding):

    trl                            stock trl.DPOTrainer (no offset column), reference forward every step
    offset                         OffsetDPOTrainer with TRL's own batch layout (dpo.shared_prompt=false)
    shared_prompt                  + each pair's prompt once for both completions (dpo.shared_prompt=true)
    shared_prompt_precomputed_ref  + precompute_ref_log_probs=True (reference log-probs computed once, up front)
    length_grouped                 shared_prompt_precomputed_ref + batches of similar-length pairs
                                   (training.train_sampling_strategy=group_by_length)
    padding_free                   shared_prompt_precomputed_ref + the micro-batch's pairs packed into one row
                                   (dpo.padding_free=true)
    padding_free_ref               shared_prompt + the pairs packed into one row, the reference forward every step
                                   (the packed layout as the recipes train it: no precompute)

`model=tiny` (the default, `make bench`) runs them on the random tiny model with the pairs rendered by the tiny
tokenizer; `model=smol` (`make bench-smol`) on SmolLM2-135M-Instruct with its own 49k tokenizer and recipe, where
the LM head is a large share of a step. Every variant gets the same model, pairs, batch, optimizer and steps. Each
(variant, round) is one fresh process (`worker=VARIANT`), so its peak memory (ru_maxrss) is its own; the order of
the variants rotates from round to round, so drift and other load on the machine spread over all of them. Timed:
the steps after a warm-up (`benchmarks.trainer_ab.step_timer`); trainer construction (tokenization, reference
precompute) is reported apart.

With `ab_steps` > 0 each variant then runs an interleaved per-step A/B against stock TRL in this process
(`benchmarks.trainer_ab.interleaved_ab`: both trainers built once, single steps alternated ABBA, forward + backward
without the optimizer step); the median of the paired ratios is robust to other processes on the machine in a way
whole runs are not.

tokens/s counts the same tokens for every variant: the pairs' real tokens as stock DPO sees them
(2 x prompt + chosen + rejected, no padding), so its ratio equals the steps/s ratio and says how much faster the
same data is trained. `computed tokens/step` is what the model really ran (padding included) and `padding share`
the padded part of it.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.dpo_options import DpoBenchOptions
from benchmarks.harness import REPO_ROOT, RecipeError, log, quiet, table

VARIANTS = {
    "trl": "stock trl.DPOTrainer",
    "offset": "OffsetDPOTrainer, TRL's layout",
    "shared_prompt": "+ shared prompt",
    "shared_prompt_precomputed_ref": "+ precomputed reference",
    "length_grouped": "+ length-grouped batches",
    "padding_free": "+ padding-free rows",
    "padding_free_ref": "shared prompt, padding-free rows, reference every step",
}
# variant -> (OffsetDPOTrainer kwargs, DPOConfig fields); "trl" is stock DPOTrainer
PRECOMPUTED = {"precompute_ref_log_probs": True}
SETTINGS = {
    "trl": ({}, {}),
    "offset": ({"shared_prompt": False}, {}),
    "shared_prompt": ({"shared_prompt": True}, {}),
    "shared_prompt_precomputed_ref": ({"shared_prompt": True}, PRECOMPUTED),
    "length_grouped": ({"shared_prompt": True}, {**PRECOMPUTED, "train_sampling_strategy": "group_by_length"}),
    "padding_free": ({"shared_prompt": True, "padding_free": True}, PRECOMPUTED),
    "padding_free_ref": ({"shared_prompt": True, "padding_free": True}, {}),
}
GOALS = {"shared_prompt": 1.8, "shared_prompt_precomputed_ref": 2.5}  # ratio to stock TRL (issue 14)


def v1_pairs(tokenizer, opts, workdir: Path, model: str):
    """`opts.pairs` real TicToc v1 train pairs (seeded sample), rendered with recipe `model`'s data settings and
    `tokenizer` by the shared renderer;
    pairs longer than max_length are left out (so no variant truncates), and how many is returned."""
    from datasets import Dataset

    from timealign.config import load_recipe
    from timealign.data.pairs import load_prepared, prepare
    from timealign.render.chat import PromptRenderer
    from timealign.train.dpo import render_split

    if not Path(opts.tictoc).is_dir():
        raise RecipeError(
            f"tictoc={opts.tictoc}: the TicToc v1 release is not there (the speed comparison runs on the real pairs)"
        )
    recipe = load_recipe(model, {"data.source": "v1", "data.path": str(opts.tictoc)})
    with quiet():
        prepare(recipe.data, workdir / "data")
        data = load_prepared(workdir / "data")[recipe.data.train_split].shuffle(seed=opts.seed)
        rendered = render_split(data, PromptRenderer.for_data(tokenizer, recipe.data), "render")
    rows, too_long = [], 0
    for row in rendered:
        if len(rows) == opts.pairs:
            break
        p, c, r = (len(tokenizer(row[k])["input_ids"]) for k in ("prompt", "chosen", "rejected"))
        if p + max(c, r) + 1 > opts.max_length:
            too_long += 1
            continue
        rows.append({k: row[k] for k in ("prompt", "chosen", "rejected", "margin")})
    if len(rows) < opts.pairs:
        raise RecipeError(f"pairs={opts.pairs}: only {len(rows)} v1 train pairs fit max_length={opts.max_length}")
    return Dataset.from_list(rows), too_long


def pair_tokens(tokenizer, dataset) -> dict:
    """Per pair: prompt, chosen, rejected token counts (+1 EOS on each completion, as TRL appends it)."""
    p = [len(tokenizer(x)["input_ids"]) for x in dataset["prompt"]]
    c = [len(tokenizer(x)["input_ids"]) + 1 for x in dataset["chosen"]]
    r = [len(tokenizer(x)["input_ids"]) + 1 for x in dataset["rejected"]]
    return {"prompt": p, "chosen": c, "rejected": r}


def build_trainer(variant: str, model_dir, dataset, tokenizer, config: dict, workdir: Path, callbacks: list):
    """A fresh policy and the variant's trainer."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer

    from timealign.train.odpo import OffsetDPOTrainer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    kwargs, fields = SETTINGS[variant]
    args = DPOConfig(output_dir=str(workdir / variant), **{**config, **fields})
    if variant == "trl":
        return DPOTrainer(
            model=model,
            args=args,
            train_dataset=dataset.remove_columns("margin"),
            processing_class=tokenizer,
            callbacks=callbacks,
        )
    return OffsetDPOTrainer(
        model=model, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=callbacks, **kwargs
    )


def computed_tokens(trainer, steps: int) -> dict:
    """Tokens the model really processes per step (padding included) and the padded share, over the first `steps`
    batches of the trainer's own training dataloader (its sampler and collator)."""
    total = real = seen = 0
    for i, batch in enumerate(trainer.get_train_dataloader()):
        if i == steps:
            break
        seen += 1
        ids = batch["input_ids"]
        total += ids.numel()
        if "pair_ids" in batch:  # shared-prompt rows: padding is pair id -1
            real += int((batch["pair_ids"] >= 0).sum())
        else:
            real += int(batch["attention_mask"].sum())
    return {"computed_tokens_per_step": total / seen, "padding_share": 1 - real / total}


def variant_config(opts: DpoBenchOptions) -> dict:
    """The model's recipe's training section for timed runs; the variants add their own DPOConfig fields."""
    from benchmarks.dpo_trainers import recipe_config

    config = recipe_config(opts, False, opts.model, {"data.source": "v1", "data.path": str(opts.tictoc)})
    config.pop("precompute_ref_log_probs")
    config["per_device_eval_batch_size"] = opts.batch_size  # the interleaved A/B steps through the eval dataloader
    return config


def variant_ab(variant: str, opts: DpoBenchOptions, model_dir: str, dataset, tokenizer, workdir: Path) -> dict:
    """Interleaved per-step A/B of `variant` against stock TRL (`trainer_ab.interleaved_ab`): both trainers built
    once, `ab_steps` single steps each (forward + backward, no optimizer step) alternated ABBA after a warm-up step
    each; both read the same pairs in order. ratio_paired_*: TRL's seconds over the variant's (above 1: faster)."""
    from benchmarks.trainer_ab import interleaved_ab

    config = variant_config(opts)

    def build(kind: str, wd: Path, callbacks: list):
        return build_trainer(kind, model_dir, dataset, tokenizer, config, wd, callbacks)

    res = interleaved_ab(variant, (variant, "trl"), build, opts.ab_steps, workdir / variant, lambda: None)
    # interleaved_ab compares the batches' attention-mask sums; the layouts differ (the shared rows hold each
    # prompt once), so equal pairs cannot be read off them: both dataloaders are sequential over the same pairs.
    res.pop("same_batches", None)
    res["variant_step_s_median"] = res.pop(f"{variant}_step_s_median")
    return res


def worker(variant: str, opts: DpoBenchOptions, data_dir: str) -> dict:
    """One timed run of one variant in this (fresh) process."""
    import torch
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    from benchmarks.trainer_ab import step_timer
    from timealign.models import resolve_model_path

    model_dir = resolve_model_path(opts.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dataset = load_from_disk(data_dir)
    config = variant_config(opts)
    timer = step_timer(opts.warmup, lambda: None)
    with tempfile.TemporaryDirectory(prefix=f"bench-{variant}-") as tmp:
        start = time.perf_counter()
        with quiet():
            trainer = build_trainer(variant, model_dir, dataset, tokenizer, config, Path(tmp), [timer])
        construct_s = time.perf_counter() - start
        timer.trainer = trainer
        padding = computed_tokens(trainer, opts.steps)
        with quiet():
            output = trainer.train()
    window = timer.t1 - timer.t0
    timed = opts.steps - opts.warmup
    return {
        "variant": variant,
        "steps_per_s": timed / window,
        "timed_steps": timed,
        "timed_s": window,
        "timed_step_s": timer.step_s[opts.warmup :],
        "construct_s": construct_s,
        "cpu_share": (timer.cpu1 - timer.cpu0) / (window * torch.get_num_threads()),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "train_loss": output.training_loss,
        **padding,
    }


def run_worker(variant: str, opts: DpoBenchOptions, data_dir: Path, json_out: Path) -> dict:
    """`worker` in a fresh interpreter (its own peak memory, no state shared with other variants)."""
    args = [f"{k}={v}" for k, v in vars(opts).items() if v is not None and k != "json"]
    cmd = [
        sys.executable,
        str(REPO_ROOT / "benchmarks" / "bench_dpo.py"),
        *args,
        f"worker={variant}",
        f"worker_data={data_dir}",
        f"json={json_out}",
    ]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, env={**os.environ})
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark worker {variant} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(json_out.read_text())


def bench_variants(opts: DpoBenchOptions) -> dict:
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    from timealign.models import resolve_model_path

    model_dir = resolve_model_path(opts.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    variants = [v for v in VARIANTS if v in opts.variants.split(",")]
    unknown = sorted(set(opts.variants.split(",")) - set(VARIANTS))
    if unknown or not variants:
        raise RecipeError(f"variants={opts.variants}: expected a comma list of {', '.join(VARIANTS)}")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    interleaved: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-variants-") as tmp:
        dataset, too_long = v1_pairs(tokenizer, opts, Path(tmp), opts.model)
        dataset.save_to_disk(Path(tmp) / "pairs")
        tokens = pair_tokens(tokenizer, dataset)
        per_pair = [2 * p + c + r for p, c, r in zip(tokens["prompt"], tokens["chosen"], tokens["rejected"])]
        log(
            f"variants: {len(dataset)} v1 pairs, prompt median {statistics.median(tokens['prompt'])} tokens, "
            f"completions median {statistics.median(tokens['chosen'] + tokens['rejected'])}"
        )
        for rnd in range(opts.repeats):
            order = variants[rnd % len(variants) :] + variants[: rnd % len(variants)]  # rotate per round
            for variant in order:
                res = run_worker(variant, opts, Path(tmp) / "pairs", Path(tmp) / f"{variant}-{rnd}.json")
                runs[variant].append(res)
                log(
                    f"round {rnd + 1}/{opts.repeats} {variant}: {res['steps_per_s']:.3f} steps/s, "
                    f"peak RSS {res['peak_rss_mib']:.0f} MiB, padding {100 * res['padding_share']:.0f}%, "
                    f"CPU share {100 * res['cpu_share']:.0f}%"
                )
        if opts.ab_steps > 0 and "trl" in variants:
            saved = load_from_disk(str(Path(tmp) / "pairs"))
            for variant in variants:
                if variant != "trl":
                    interleaved[variant] = variant_ab(variant, opts, model_dir, saved, tokenizer, Path(tmp) / "ab")
    # the timed steps read pairs in order: steps warmup..steps-1 of the sequential dataloader
    batch = opts.batch_size
    timed_pairs = (
        per_pair[opts.warmup * batch : opts.steps * batch] if opts.steps * batch <= len(per_pair) else per_pair
    )
    stock_tokens_per_step = statistics.mean(timed_pairs) * batch
    out = {
        "model": opts.model,
        "batch_size": batch,
        "pairs": len(dataset),
        "left_out_over_max_length": too_long,
        "tokens": {
            k: {"median": statistics.median(v), "mean": statistics.mean(v), "max": max(v)} for k, v in tokens.items()
        },
        "stock_tokens_per_step": stock_tokens_per_step,
        "runs": runs,
        "variants": {},
    }
    base = statistics.median(r["steps_per_s"] for r in runs["trl"]) if "trl" in runs else None
    for variant in variants:
        rs = runs[variant]
        sps = statistics.median(r["steps_per_s"] for r in rs)
        per_round = [r["steps_per_s"] / t["steps_per_s"] for r, t in zip(rs, runs.get("trl", []))]
        out["variants"][variant] = {
            "description": VARIANTS[variant],
            "steps_per_s": sps,
            "tokens_per_s": sps * stock_tokens_per_step,
            "s_per_pair": 1 / (sps * batch),
            "computed_tokens_per_step": statistics.median(r["computed_tokens_per_step"] for r in rs),
            "padding_share": statistics.median(r["padding_share"] for r in rs),
            "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in rs),
            "construct_s": statistics.median(r["construct_s"] for r in rs),
            "cpu_share": statistics.median(r["cpu_share"] for r in rs),
            "ratio_vs_trl": sps / base if base else None,
            "ratio_vs_trl_per_round": per_round,
            "goal": GOALS.get(variant),
        }
    out["ratio_vs_trl"] = {v: s["ratio_vs_trl"] for v, s in out["variants"].items() if v != "trl"}
    if interleaved:
        out["interleaved"] = interleaved
        out["ratio_vs_trl_interleaved"] = {v: ab["ratio_paired_median"] for v, ab in interleaved.items()}
    return out


def report_variants(res: dict, opts: DpoBenchOptions) -> None:
    tok = res["tokens"]
    print(
        f"\n## 2. Offset-DPO speed-ups vs stock trl.DPOTrainer: {res['model']} model (float32), {res['pairs']} real "
        f"TicToc v1 train pairs ({res['model']} tokenizer: prompt median {tok['prompt']['median']:.0f} tokens, chosen "
        f"{tok['chosen']['median']:.0f}, rejected {tok['rejected']['median']:.0f}), batch {opts.batch_size} pairs, "
        f"{opts.steps - opts.warmup} timed steps after {opts.warmup} warm-up, {opts.repeats} rounds (order "
        "rotating), one process per run"
    )
    rows = []
    for name, v in res["variants"].items():
        ratio = "1.00" if name == "trl" else "n/a" if v["ratio_vs_trl"] is None else f"{v['ratio_vs_trl']:.2f}"
        goal = (
            ""
            if v["goal"] is None or v["ratio_vs_trl"] is None
            else (f">= {v['goal']}: " + ("met" if v["ratio_vs_trl"] >= v["goal"] else "NOT met"))
        )
        rows.append(
            [
                name,
                v["description"],
                f"{v['steps_per_s']:.3f}",
                f"{v['s_per_pair']:.2f}",
                f"{v['tokens_per_s']:.0f}",
                ratio,
                goal,
                f"{v['computed_tokens_per_step']:.0f}",
                f"{100 * v['padding_share']:.0f}%",
                f"{v['peak_rss_mib']:.0f}",
                f"{100 * v['cpu_share']:.0f}%",
            ]
        )
    print(
        table(
            [
                "variant",
                "what",
                "steps/s",
                "s/pair",
                "pair tokens/s",
                "x stock TRL",
                "goal",
                "computed tokens/step",
                "padding share",
                "peak RSS MiB",
                "CPU share",
            ],
            rows,
        )
    )
    print(
        "pair tokens/s: the pairs' real tokens as stock DPO sees them (2 x prompt + both completions), the same "
        "for every variant; computed tokens/step: what the model ran, padding included. Construction (data "
        "tokenization, the up-front reference pass of the precomputed variants) is not timed: median "
        + ", ".join(f"{k} {v['construct_s']:.1f} s" for k, v in res["variants"].items())
    )
    if "interleaved" in res:
        print(
            "\nInterleaved per-step A/B against stock TRL (both trainers built once in one process, single steps "
            "alternated ABBA, forward + backward without the optimizer step; robust to other processes):"
        )
        rows = [
            [
                name,
                str(ab["steps"]),
                f"{ab['variant_step_s_median']:.2f}",
                f"{ab['trl_step_s_median']:.2f}",
                f"{ab['ratio_paired_median']:.2f}",
                f"{ab['ratio_paired_min']:.2f}..{ab['ratio_paired_max']:.2f}",
            ]
            for name, ab in res["interleaved"].items()
        ]
        print(
            table(
                ["variant", "steps each", "s/step", "stock TRL s/step", "x stock TRL (paired median)", "range"],
                rows,
            )
        )


def worker_main(opts: DpoBenchOptions) -> int:
    """`bench_dpo.py worker=VARIANT worker_data=DIR json=FILE`: one run, its numbers to FILE."""
    from benchmarks.harness import quiet_libraries

    quiet_libraries()
    res = worker(opts.worker, opts, opts.worker_data)
    Path(opts.json).write_text(json.dumps(res))
    return 0
