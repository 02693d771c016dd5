#!/usr/bin/env python
"""Throughput numbers for TIMER-style SFT: data prep of synthetic dialogs, rendering them into token rows, and SFT
training steps/s of `TimerSFTTrainer` against stock `trl.SFTTrainer` on the same model, rows, batch and config.
Not a test: goals are printed with whether they were met, nothing fails.

    HF_HUB_OFFLINE=1 python benchmarks/bench_sft.py [dialogs=100000] [steps=12] [repeats=2] [json=out.json]
    HF_HUB_OFFLINE=1 python benchmarks/bench_sft.py skip_data=true skip_train=true json=results/bench/sft.json
        (part 4 only: timer.packing on the tiny-timer recipe's dialogs)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root, for benchmarks.*

from benchmarks.harness import (  # noqa: E402
    REPO_ROOT,
    Command,
    check_steps,
    cold_cli,
    finish,
    log,
    machine_info,
    met,
    offline_environment,
    options_record,
    print_header,
    quiet,
    quiet_libraries,
    run_benchmark,
    summary,
    table,
    verdict,
    write_json,
)
from benchmarks.trainer_ab import LLAMA_1B_SHAPE, compare_trainers, mfu, save_random_llama  # noqa: E402
from timealign.config.schema import opt  # noqa: E402

DATA_PREP_GOAL_S = 60.0
KINDS = ("timer", "trl")

PARTS = """Parts:
  1. data prep   `prepare_timer_data` on `dialogs` synthetic dialogs (generate + validate + save_to_disk), best and
                 median of `data_runs`; then rendering + tokenizing them into TIMER rows (`featurize`, tiny
                 tokenizer; train-time work, reported separately), and one cold CLI run with imports.
                 Goal: data prep of 100k dialogs < 60 s on 2 cores.
  2. CPU train   TimerSFTTrainer vs trl.SFTTrainer on the tiny model and tiny-timer rows: whole runs alternated
                 (TIMER, TRL, then TRL, TIMER, ...: ABBA) for `repeats` rounds, steps after `warmup` timed by a
                 callback; then an interleaved A/B of single steps (batch + compute_loss + backward, both trainers
                 built once, steps alternated ABBA), whose paired ratio is robust to other processes on the cores.
                 Stock TRL gets the same input_ids/labels without token_types. Goal: TIMER/TRL steps/s >= 1.0.
  3. GPU train   (only with CUDA) the same comparison on a random-init Llama-3.2-1B-shaped model in bf16.
  4. packing     timer.packing on the tiny-timer recipe's synthetic dialogs (its data prep, rendering, max_length
                 and batch size): the padding share of the tokens the model sees, unpacked (padded batches in a
                 seeded random order, as the trainer samples them) and packed; then TimerSFTTrainer packed vs
                 unpacked whole runs (ABBA): steps/s, real tokens/s and dialogs/s, and the time of one epoch.

Smallest run (smoke test): python benchmarks/bench_sft.py dialogs=50 data_runs=1 featurize_dialogs=20 steps=3 \\
    repeats=1 ab_steps=2 batch_size=2 train_dialogs=8 packing_steps=3 packing_repeats=1 packing_dialogs=40"""


@dataclass
class SftBenchOptions:
    dialogs: int = opt(100_000, "synthetic dialogs for part 1")
    data_runs: int = opt(2, "data-prep repetitions")
    featurize_dialogs: int | None = opt(None, "dialogs rendered + tokenized in part 1 (default: all of `dialogs`)")
    steps: int = opt(12, "max_steps of each training run")
    warmup: int = opt(2, "untimed warm-up steps per run")
    repeats: int = opt(2, "ABBA rounds of whole runs")
    ab_steps: int = opt(16, "interleaved A/B steps per trainer (0: off)")
    batch_size: int = opt(16, "per_device_train_batch_size")
    train_dialogs: int = opt(256, "dialogs for the CPU comparison")
    seed: int = opt(0, "seed of the synthetic dialogs and of every training run")
    skip_data: bool = opt(False, "skip part 1")
    skip_train: bool = opt(False, "skip parts 2 and 3")
    skip_packing: bool = opt(False, "skip part 4")
    packing_steps: int = opt(8, "part 4: max_steps of each packed / unpacked run")
    packing_repeats: int = opt(2, "part 4: ABBA rounds")
    packing_dialogs: int | None = opt(None, "part 4: train dialogs (default: the tiny-timer recipe's)")
    packing_threads: int | None = opt(
        None,
        "part 4: torch threads (default: torch's). On 2 cores shared with other "
        "jobs, 2 OpenMP threads can run several times slower than 1",
    )
    peak_tflops: float = opt(989.0, "GPU peak bf16 TFLOP/s for MFU (989: H100 SXM)")
    gpu_seq_len: int = opt(1024, "part 3: tokens per row")
    gpu_batch_size: int = opt(8, "part 3: rows per step")
    gpu_steps: int = opt(12, "part 3: max_steps per run")
    json: str | None = opt(None, "also write every number to this JSON file")


COMMAND = Command(
    prog="python benchmarks/bench_sft.py",
    summary=__doc__.split("\n\n")[0],
    options=SftBenchOptions,
    recipe="none",
    examples=PARTS,
)


# ------------------------------------------------------------------------------------------------ part 1: data prep


def timer_tokenizer():
    from transformers import AutoTokenizer

    from timealign.models.tiny import ensure_tiny_model
    from timealign.render.timer import add_timer_tokens

    tok = AutoTokenizer.from_pretrained(ensure_tiny_model())
    add_timer_tokens(tok)
    return tok


def bench_data_prep(opts: SftBenchOptions) -> dict:
    from timealign.config import DataSection, TimerSection
    from timealign.data.timer_prep import load_timer_prepared, prepare_timer_data
    from timealign.render.timer import TimerRenderer
    from timealign.train.sft import featurize

    data = DataSection(source="synthetic", seed=opts.seed, train_split="train", eval_split="test")
    timer = TimerSection(synthetic_dialogs=opts.dialogs, synthetic_eval_dialogs=0, emit_instant_counterpart=True)
    tok = timer_tokenizer()
    prep_s, info = [], None
    with tempfile.TemporaryDirectory(prefix="bench-sft-prep-") as tmp:
        for run in range(opts.data_runs):
            out = Path(tmp) / f"run{run}"
            with quiet():
                t0 = time.perf_counter()
                info = prepare_timer_data(data, timer, out)
                prep_s.append(time.perf_counter() - t0)
            log(f"data prep run {run + 1}/{opts.data_runs}: {prep_s[-1]:.2f} s for {info['dialogs']} dialogs")
        dialogs = load_timer_prepared(out)["train"]
        n_feat = min(opts.featurize_dialogs or len(dialogs), len(dialogs))
        subset = dialogs.select(range(n_feat))
        featurized = {}
        for counterpart in (False, True):
            timer.emit_instant_counterpart = counterpart
            renderer = TimerRenderer.for_timer(tok, timer)
            with quiet():
                t0 = time.perf_counter()
                rows = featurize(subset, renderer, timer, max_length=1024)
                seconds = time.perf_counter() - t0
            lengths = [len(x) for x in rows["input_ids"]]
            featurized["with_counterpart" if counterpart else "dialog_only"] = {
                "dialogs": n_feat,
                "rows": len(rows),
                "seconds": seconds,
                "rows_per_s": len(rows) / seconds,
                "tokens_mean": statistics.mean(lengths),
                "tokens_max": max(lengths),
            }
            log(
                f"featurize ({'with' if counterpart else 'no'} instant counterpart): {len(rows)} rows in "
                f"{seconds:.2f} s ({len(rows) / seconds:.0f} rows/s), {statistics.mean(lengths):.0f} tokens/row"
            )
    with tempfile.TemporaryDirectory(prefix="bench-sft-cli-") as tmp:
        cli = cold_cli(
            [
                str(REPO_ROOT / "data_prep" / "timelychat.py"),
                "recipe=tiny-timer",
                f"out={tmp}/data",
                f"timer.synthetic_dialogs={opts.dialogs}",
                "timer.synthetic_eval_dialogs=0",
            ]
        )
    goal_met = min(prep_s) < DATA_PREP_GOAL_S if opts.dialogs >= 100_000 else None
    return {
        "dialogs": info["dialogs"],
        "prepare_s": summary(prep_s),
        "featurize": featurized,
        "cli_cold": cli,
        "target_buckets": info["splits"]["train"]["target_interval_buckets"],
        "goal": f"data prep of 100k dialogs < {DATA_PREP_GOAL_S:g} s",
        "goal_met": goal_met,
    }


# ------------------------------------------------------------------------------------------ parts 2-3: train speed


def sft_builder(model_dir, dtype, tokenizer, rows, config_kwargs: dict):
    """`build(kind, workdir, callbacks)` for trainer_ab: a fresh model and TimerSFTTrainer or stock SFTTrainer."""

    def build(kind: str, workdir: Path, callbacks: list):
        from transformers import AutoModelForCausalLM
        from trl import SFTConfig, SFTTrainer

        from timealign.train.timer import TimerSFTTrainer

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        if model.get_input_embeddings().weight.shape[0] < len(tokenizer):
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        args = SFTConfig(output_dir=str(workdir / kind), **config_kwargs)
        if kind == "timer":
            return TimerSFTTrainer(
                model=model,
                args=args,
                train_dataset=rows,
                processing_class=tokenizer,
                callbacks=callbacks,
                lambda_time=1.0,
            )
        return SFTTrainer(
            model=model,
            args=args,
            train_dataset=rows.remove_columns("token_types"),
            processing_class=tokenizer,
            callbacks=callbacks,
        )

    return build


def timer_vs_trl(
    label, model_dir, dtype, tokenizer, rows, config_kwargs, opts: SftBenchOptions, sync, flops_fn=None
) -> dict:
    """The comparison, under this benchmark's JSON keys."""
    res = compare_trainers(
        label,
        KINDS,
        sft_builder(model_dir, dtype, tokenizer, rows, config_kwargs),
        max_steps=config_kwargs["max_steps"],
        warmup=opts.warmup,
        repeats=opts.repeats,
        ab_steps=opts.ab_steps,
        sync=sync,
        flops_fn=flops_fn,
    )
    out = {
        "runs": res["runs"],
        "timer": res["timer"],
        "trl": res["trl"],
        "ratio": res["ratio"],
        "ratio_per_round": res["ratio_per_round"],
        "ratio_fastest_quartile": res["ratio_fastest_quartile"],
        "run_spread_rel": res["run_spread_rel"],
        "same_tokens": res["same_tokens"],
    }
    if "interleaved" in res:
        out["interleaved"] = res["interleaved"]
    out.update(goal_met=res["goal_met"], within_noise=res["within_noise"])
    return out


def train_rows(tokenizer, n_dialogs, seed, max_length):
    from datasets import Dataset

    from timealign.config import TimerSection
    from timealign.data.synthetic.dialogs import generate_timelychat
    from timealign.data.timelychat import timelychat_dialog
    from timealign.render.timer import TimerRenderer
    from timealign.train.sft import featurize

    dialogs = [timelychat_dialog(r, "synthetic", i) for i, r in enumerate(generate_timelychat(n_dialogs, seed))]
    ds = Dataset.from_list([d.to_row() for d in dialogs])
    with quiet():
        timer = TimerSection(emit_instant_counterpart=True)
        return featurize(ds, TimerRenderer.for_timer(tokenizer, timer), timer, max_length)


def cpu_config(opts: SftBenchOptions, max_steps: int) -> dict:
    return dict(
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        report_to=["none"],
        per_device_train_batch_size=opts.batch_size,
        gradient_accumulation_steps=1,
        max_steps=max_steps,
        logging_steps=10**6,
        save_strategy="no",
        seed=opts.seed,
        data_seed=opts.seed,
        max_length=512,
        learning_rate=1e-3,
        optim="adamw_torch",
        lr_scheduler_type="constant",
        disable_tqdm=True,
        dataloader_num_workers=0,
        per_device_eval_batch_size=opts.batch_size,
    )


def bench_cpu_train(opts: SftBenchOptions) -> dict:
    import torch

    from timealign.models.tiny import ensure_tiny_model

    tok = timer_tokenizer()
    rows = train_rows(tok, opts.train_dialogs, opts.seed, 512)
    lengths = [len(x) for x in rows["input_ids"]]
    log(
        f"CPU comparison: tiny model, {len(rows)} rows, ~{statistics.mean(lengths):.0f} tokens/row, "
        f"batch {opts.batch_size}"
    )
    res = timer_vs_trl(
        "cpu",
        str(ensure_tiny_model()),
        torch.float32,
        tok,
        rows,
        cpu_config(opts, opts.steps),
        opts,
        sync=lambda: None,
    )
    res["rows"] = len(rows)
    res["tokens_per_row"] = statistics.mean(lengths)
    return res


def long_rows(tok, n: int, seq_len: int):
    """`n` rows of long dialogs (many context turns), every one cut to `seq_len` tokens."""
    from datasets import Dataset

    from timealign.config import TimerSection
    from timealign.render.timer import TimerRenderer, TimerTurn

    filler = [
        TimerTurn("AB"[i % 2], f"this is context turn number {i} about nothing in particular") for i in range(200)
    ]
    target = [TimerTurn("A", "I am back, that took a while!", 90)]
    renderer = TimerRenderer.for_timer(tok, TimerSection())
    features = renderer.batch_features([(filler + target, None)] * n, max_length=seq_len)
    return Dataset.from_list([{**r, "id": str(i)} for i, r in enumerate(features)])


def bench_gpu_train(opts: SftBenchOptions, shape: dict | None = None, device: str = "cuda") -> dict:
    """The comparison on the GPU, with MFU from 6 * params * tokens.

    `shape` and `device="cpu"` exist only to smoke-test this code path on a machine without a GPU.
    """
    import torch

    cuda = device == "cuda"
    tok = timer_tokenizer()
    shape = dict(shape or LLAMA_1B_SHAPE)
    results = {
        "shape": shape,
        "device": torch.cuda.get_device_name(0) if cuda else device,
        "peak_tflops": opts.peak_tflops,
    }
    with tempfile.TemporaryDirectory(prefix="bench-sft-1b-") as tmp:
        model_dir = Path(tmp) / "model"
        n_params = save_random_llama(
            shape, tok, model_dir, seed=opts.seed, device=device, max_position_embeddings=4096
        )
        rows = long_rows(tok, opts.gpu_steps * opts.gpu_batch_size, opts.gpu_seq_len)
        results.update(params=n_params, rows=len(rows), tokens_per_row=len(rows[0]["input_ids"]))
        log(f"GPU comparison: {n_params / 1e9:.2f} B params, {len(rows)} rows of {results['tokens_per_row']} tokens")
        cfg = dict(
            cpu_config(opts, opts.gpu_steps),
            bf16=True,
            use_cpu=not cuda,
            per_device_train_batch_size=opts.gpu_batch_size,
            per_device_eval_batch_size=opts.gpu_batch_size,
            max_length=opts.gpu_seq_len,
            learning_rate=1e-5,
        )

        def flops(stats):
            return mfu(6 * n_params * stats["tokens_per_step"], stats["steps_per_s_median"], opts.peak_tflops)

        if cuda:
            torch.cuda.reset_peak_memory_stats()
        results["train"] = timer_vs_trl(
            "gpu",
            str(model_dir),
            torch.bfloat16,
            tok,
            rows,
            cfg,
            opts,
            sync=torch.cuda.synchronize if cuda else (lambda: None),
            flops_fn=flops,
        )
        results["max_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    return results


# ----------------------------------------------------------------------------------------------- part 4: packing


def recipe_rows(opts: SftBenchOptions):
    """The tiny-timer recipe's train rows, prepared and rendered as train/sft.py does; (recipe, rows)."""
    from timealign.config import load_recipe
    from timealign.data.timer_prep import load_timer_prepared, prepare_timer_data
    from timealign.render.timer import TimerRenderer
    from timealign.train.sft import featurize

    overrides = {"timer.synthetic_eval_dialogs": "0"}
    if opts.packing_dialogs:
        overrides["timer.synthetic_dialogs"] = str(opts.packing_dialogs)
    recipe = load_recipe("tiny-timer", overrides, task="sft")
    tok = timer_tokenizer()
    with tempfile.TemporaryDirectory(prefix="bench-sft-packing-") as tmp, quiet():
        prepare_timer_data(recipe.data, recipe.timer, Path(tmp))
        dialogs = load_timer_prepared(tmp)[recipe.data.train_split]
        rows = featurize(
            dialogs, TimerRenderer.for_timer(tok, recipe.timer), recipe.timer, recipe.training["max_length"]
        )
    return recipe, tok, rows.remove_columns("id")


def bench_packing(opts: SftBenchOptions) -> dict:
    import random

    import torch
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig

    from benchmarks.trainer_ab import run_stats, whole_runs
    from timealign.models.tiny import ensure_tiny_model
    from timealign.train.packing import pack_timer_rows, padding_stats
    from timealign.train.timer import TimerSFTTrainer

    if opts.packing_threads:
        torch.set_num_threads(opts.packing_threads)
    recipe, tok, rows = recipe_rows(opts)
    batch, max_length = recipe.training["per_device_train_batch_size"], recipe.training["max_length"]
    lengths = [len(x) for x in rows["input_ids"]]
    order = list(range(len(lengths)))
    random.Random(opts.seed).shuffle(order)  # the train dataloader's random sampler
    with quiet():
        packed = pack_timer_rows(rows, max_length)
    packed_lengths = [sum(x) for x in packed["seq_lengths"]]
    random.Random(opts.seed).shuffle(packed_lengths)
    padding = {
        "unpacked": padding_stats([lengths[i] for i in order], batch),
        "packed_rows": padding_stats(packed_lengths, batch),  # sdpa/eager: packed rows padded per batch
        "packed_flat": padding_stats(packed_lengths, batch, padding_free=True),
    }  # flash attention
    padding["packed_rows"]["row_fill"] = sum(packed_lengths) / (len(packed_lengths) * max_length)
    dialogs_per_row = len(lengths) / len(packed_lengths)
    log(
        f"packing: {len(lengths)} rows (~{statistics.mean(lengths):.0f} tokens) -> {len(packed_lengths)} packed rows "
        f"({dialogs_per_row:.1f} dialogs each); padding share {100 * padding['unpacked']['padding_share']:.1f}% -> "
        f"{100 * padding['packed_rows']['padding_share']:.1f}%"
    )

    model_dir = str(ensure_tiny_model())
    cfg = dict(
        cpu_config(opts, opts.packing_steps),
        per_device_train_batch_size=batch,
        max_length=max_length,
        learning_rate=recipe.training["learning_rate"],
    )

    def build(kind: str, workdir: Path, callbacks: list):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model.resize_token_embeddings(len(tok), mean_resizing=False)
        args = SFTConfig(output_dir=str(workdir / kind), packing=kind == "packed", **cfg)
        return TimerSFTTrainer(
            model=model,
            args=args,
            train_dataset=rows,
            processing_class=tok,
            callbacks=callbacks,
            lambda_time=recipe.timer.lambda_time,
        )

    runs = whole_runs(
        "packing",
        ("packed", "unpacked"),
        build,
        opts.packing_steps,
        opts.warmup,
        opts.packing_repeats,
        sync=lambda: None,
    )
    out = {
        "rows": len(lengths),
        "tokens_per_row": statistics.mean(lengths),
        "packed_rows": len(packed_lengths),
        "dialogs_per_packed_row": dialogs_per_row,
        "batch_size": batch,
        "max_length": max_length,
        "torch_threads": torch.get_num_threads(),
        "padding": padding,
        "runs": runs,
    }
    for kind, n_rows in (("packed", len(packed_lengths)), ("unpacked", len(lengths))):
        stats = run_stats(runs[kind])
        steps_per_epoch = -(-n_rows // batch)
        stats.update(
            steps_per_epoch=steps_per_epoch,
            epoch_s=steps_per_epoch / stats["steps_per_s_median"],
            dialogs_per_step=batch * (dialogs_per_row if kind == "packed" else 1),
            dialogs_per_s=stats["tokens_per_s_median"] / statistics.mean(lengths),
        )
        out[kind] = stats
    out["tokens_per_s_ratio"] = out["packed"]["tokens_per_s_median"] / out["unpacked"]["tokens_per_s_median"]
    out["epoch_speedup"] = out["unpacked"]["epoch_s"] / out["packed"]["epoch_s"]
    return out


# ------------------------------------------------------------------------------------------------------- report


def report_data(d: dict) -> None:
    print(f"\n## 1. Data prep: {d['dialogs']} synthetic TimelyChat-style dialogs")
    p = d["prepare_s"]
    rows = [
        [
            "prepare_timer_data (generate + validate + save)",
            f"{p['best']:.2f}",
            f"{p['median']:.2f}",
            f"{d['dialogs'] / p['best']:.0f} dialogs/s",
        ]
    ]
    for key, name in (
        ("dialog_only", "render + tokenize, one row per dialog"),
        ("with_counterpart", "render + tokenize, + instant counterpart rows"),
    ):
        f = d["featurize"][key]
        rows.append(
            [
                f"{name} ({f['rows']} rows, {f['tokens_mean']:.0f} tok/row)",
                f"{f['seconds']:.2f}",
                "",
                f"{f['rows_per_s']:.0f} rows/s",
            ]
        )
    rows.append(
        [
            "cold CLI: python data_prep/timelychat.py (with imports)",
            f"{d['cli_cold']['seconds']:.2f}",
            "",
            f"rc {d['cli_cold']['returncode']}",
        ]
    )
    print(table(["step", "best s", "median s", "rate"], rows))
    print(f"target intervals (Table 6 buckets): {d['target_buckets']}")
    if d["goal_met"] is not None:
        print(f"goal: {d['goal']} on {os.cpu_count()} cores: {met(d['goal_met'])} (best {p['best']:.2f} s)")


def report_train(title: str, c: dict, gpu: bool) -> None:
    print(
        f"\n{title}: {len(c['runs']['timer'])} runs each (ABBA), {c['runs']['timer'][0]['timed_steps']} timed steps "
        "per run"
    )
    header = ["trainer", "steps/s median", "min", "max", "fastest-quartile s/step", "tokens/s", "tokens/step"]
    header += ["TFLOP/s", "MFU"] if gpu else []
    rows = []
    for kind, name in (("timer", "TimerSFTTrainer"), ("trl", "trl.SFTTrainer")):
        s = c[kind]
        row = [
            name,
            f"{s['steps_per_s_median']:.3f}",
            f"{s['steps_per_s_min']:.3f}",
            f"{s['steps_per_s_max']:.3f}",
            f"{s['step_s_p25']:.3f}",
            f"{s['tokens_per_s_median']:.0f}",
            f"{s['tokens_per_step']:.0f}",
        ]
        if gpu:
            row += [f"{s['achieved_tflops']:.1f}", f"{100 * s['mfu']:.1f}%"]
        rows.append(row)
    print(table(header, rows))
    print(
        f"ratio TIMER/TRL (medians): {c['ratio']:.3f}; per round: "
        f"{', '.join(f'{r:.3f}' for r in c['ratio_per_round'])}; fastest quartile: "
        f"{c['ratio_fastest_quartile']:.3f}; run spread {100 * c['run_spread_rel']:.1f}%"
    )
    if "interleaved" in c:
        i = c["interleaved"]
        print(
            f"interleaved single-step A/B ({i['steps']} steps each): paired ratio TIMER/TRL median "
            f"{i['ratio_paired_median']:.3f} (range {i['ratio_paired_min']:.3f}..{i['ratio_paired_max']:.3f}); "
            f"TIMER {i['timer_step_s_median']:.3f} s/step, TRL {i['trl_step_s_median']:.3f} s/step"
        )
    if not c["same_tokens"]:
        print("WARNING: the two trainers did not see the same number of tokens in the timed window")
    print(f"goal: TIMER/TRL steps/s >= 1.0: {verdict(c['goal_met'], c['within_noise'])}")


def report_packing(p: dict) -> None:
    print(
        f"\n## 4. timer.packing on the tiny-timer recipe's dialogs: {p['rows']} rows (~{p['tokens_per_row']:.0f} "
        f"tokens) -> {p['packed_rows']} packed rows of <= {p['max_length']} ({p['dialogs_per_packed_row']:.1f} "
        f"dialogs "
        f"each), batch {p['batch_size']}, tiny model (float32, sdpa: packed rows kept as rows), "
        f"{p['torch_threads']} torch threads"
    )
    pad = p["padding"]
    print(
        table(
            ["layout", "batches", "real tokens", "token slots", "padding share"],
            [
                [
                    name,
                    str(pad[key]["batches"]),
                    str(pad[key]["tokens"]),
                    str(pad[key]["slots"]),
                    f"{100 * pad[key]['padding_share']:.1f}%",
                ]
                for key, name in (
                    ("unpacked", "unpacked (padded to the batch's longest)"),
                    ("packed_rows", "packed rows (sdpa/eager)"),
                    ("packed_flat", "packed, flattened (flash)"),
                )
            ],
        )
    )
    print(f"packed rows are {100 * pad['packed_rows']['row_fill']:.1f}% full")
    rows = []
    for kind in ("packed", "unpacked"):
        s = p[kind]
        rows.append(
            [
                kind,
                f"{s['steps_per_s_median']:.3f}",
                f"{s['tokens_per_s_median']:.0f}",
                f"{s['dialogs_per_s']:.1f}",
                f"{s['dialogs_per_step']:.1f}",
                str(s["steps_per_epoch"]),
                f"{s['epoch_s']:.1f}",
            ]
        )
    print(table(["run", "steps/s", "real tokens/s", "dialogs/s", "dialogs/step", "steps/epoch", "epoch s"], rows))
    print(
        f"packed / unpacked: real tokens/s {p['tokens_per_s_ratio']:.2f}x; epoch time unpacked / packed "
        f"{p['epoch_speedup']:.2f}x (steps/s alone is not comparable: a packed step holds more dialogs)"
    )


def run(opts: SftBenchOptions) -> int:
    check_steps(opts.warmup, steps=opts.steps, gpu_steps=opts.gpu_steps, packing_steps=opts.packing_steps)
    quiet_libraries()
    import torch

    started = time.perf_counter()
    results = {"env": machine_info(), "args": options_record(opts)}
    if not opts.skip_data:
        results["data_prep"] = bench_data_prep(opts)
    if not opts.skip_train:
        results["cpu_train"] = bench_cpu_train(opts)
        results["gpu_train"] = bench_gpu_train(opts) if torch.cuda.is_available() else {"skipped": "no GPU"}
    if not opts.skip_packing:
        results["packing"] = bench_packing(opts)
    finish(results, started)
    print_header("timealign SFT benchmark", results["env"])
    if "data_prep" in results:
        report_data(results["data_prep"])
    if "cpu_train" in results:
        c = results["cpu_train"]
        print(
            f"\n## 2. TimerSFTTrainer vs trl.SFTTrainer on CPU: tiny model (float32), {c['rows']} rows "
            f"(~{c['tokens_per_row']:.0f} tokens), batch {opts.batch_size}; same rows, stock TRL without "
            "token_types"
        )
        report_train("CPU", c, gpu=False)
    g = results.get("gpu_train")
    if g is not None:
        print("\n## 3. TimerSFTTrainer vs trl.SFTTrainer on GPU: Llama-3.2-1B-shaped random-init model, bf16")
        if "skipped" in g:
            print(f"skipped: {g['skipped']}")
        else:
            print(
                f"{g['device']}: {g['params'] / 1e9:.2f} B params, {g['rows']} rows of {g['tokens_per_row']} "
                f"tokens, batch {opts.gpu_batch_size}; peak memory {g['max_memory_gib']:.1f} GiB; MFU from "
                f"6 * params * tokens / {opts.peak_tflops:g} TFLOP/s"
            )
            report_train("GPU", g["train"], gpu=True)
    if "packing" in results:
        report_packing(results["packing"])
    print(f"\ntotal wall time: {results['total_s']:.0f} s")
    write_json(opts.json, results)
    return 0


def main(argv: list[str] | None = None) -> int:
    offline_environment()
    return run_benchmark(COMMAND, argv, run)


if __name__ == "__main__":
    sys.exit(main())
