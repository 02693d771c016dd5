"""Training speed of two Hugging Face trainers on the same model, data and config: ours against stock TRL.

Two measurements, both paired so that other load on the machine hits both sides alike:

1. whole runs (`whole_runs`): a fresh model + trainer per run, runs alternated A,B / B,A (`harness.abba`) for a
   number of rounds. A `StepTimer` callback times only the steps after a warm-up (on_step_begin of step warmup+1
   to on_step_end of the last step); trainer construction (tokenization, reference model, precompute) is not timed.
   `run_stats` and `ab_summary` turn the runs into medians, spread and A/B ratios.
2. interleaved steps (`interleaved_ab`): both trainers built once, then single steps alternated ABBA. One step =
   the next batch from the trainer's own (sequential, so identical) dataloader with its collator + `compute_loss`
   + backward; no optimizer step (the same code in both trainers), so every step's work stays fixed. The median of
   adjacent steps' ratios is robust to other processes in a way whole-run timings are not.

`compare_trainers` runs both and states the goal A/B >= 1.0. A benchmark supplies `build(kind, workdir, callbacks)`
returning a ready trainer; the GPU parts add FLOPs with `mfu` and a random-init model from `save_random_llama`.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.harness import abba, fastest_quartile, log, paired_ratios, quiet, ratio_range

# Llama-3.2-1B's shape, for the GPU comparisons on a random-init model (no download)
LLAMA_1B_SHAPE = dict(
    hidden_size=2048,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    intermediate_size=8192,
    vocab_size=128256,
    tie_word_embeddings=True,
)

Build = Callable[[str, Path, list], Any]  # (kind, workdir, callbacks) -> a ready transformers Trainer


def step_timer(warmup: int, sync: Callable[[], None]):
    """A TrainerCallback timing the steps after `warmup`, with the tokens and this process's CPU time in them.

    `sync` waits for the accelerator (torch.cuda.synchronize) so a step's time is its real compute time.
    Set `.trainer` after constructing the trainer: the token counts come from its non-padding token counter.
    """
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.trainer = None
            self.t0 = self.t1 = None
            self.cpu0 = self.cpu1 = None  # CPU time: shows how much of the cores the process really got
            self.tok0 = self.tok1 = None
            self.step_s: list[float] = []
            self.begin = None

        def on_step_begin(self, args, state, control, **kwargs):
            sync()
            self.begin = time.perf_counter()
            if state.global_step == warmup:
                self.t0, self.tok0, self.cpu0 = self.begin, self.trainer._total_train_tokens, time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            sync()
            now = time.perf_counter()
            self.step_s.append(now - self.begin)
            if state.global_step == state.max_steps:
                self.t1, self.tok1, self.cpu1 = now, self.trainer._total_train_tokens, time.process_time()

    return StepTimer()


def timed_train(kind: str, build: Build, workdir: Path, max_steps: int, warmup: int, sync) -> dict:
    """One fresh model + trainer; only `trainer.train()`'s steps after the warm-up are timed."""
    import torch

    timer = step_timer(warmup, sync)
    start = time.perf_counter()
    with quiet():
        trainer = build(kind, workdir, [timer])
    timer.trainer = trainer
    construct_s = time.perf_counter() - start
    start = time.perf_counter()
    with quiet():
        output = trainer.train()
    train_call_s = time.perf_counter() - start
    timed_steps = max_steps - warmup
    window = timer.t1 - timer.t0
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    result = {
        "trainer": kind,
        "steps_per_s": timed_steps / window,
        "timed_steps": timed_steps,
        "timed_s": window,
        "tokens_timed": timer.tok1 - timer.tok0,
        "tokens_per_s": (timer.tok1 - timer.tok0) / window,
        "step_s": timer.step_s,  # every step, warm-up included
        "timed_step_s": timer.step_s[warmup:],
        "cpu_share": (timer.cpu1 - timer.cpu0) / (window * torch.get_num_threads()),
        "construct_s": construct_s,
        "train_call_s": train_call_s,
        "train_loss": output.training_loss,  # mean over all steps
        "final_loss": losses[-1] if losses else None,  # last logged loss; None when no step was logged
    }
    del trainer, output
    gc.collect()
    return result


def whole_runs(
    label: str, kinds: tuple[str, str], build: Build, max_steps: int, warmup: int, repeats: int, sync
) -> dict[str, list[dict]]:
    """`repeats` rounds of one run per trainer, order alternating per round (A,B / B,A)."""
    runs: dict[str, list[dict]] = {kind: [] for kind in kinds}
    width = max(map(len, kinds))
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        for rnd, kind in abba(*kinds, repeats):
            res = timed_train(kind, build, Path(tmp), max_steps, warmup, sync)
            runs[kind].append(res)
            log(
                f"{label} round {rnd + 1}/{repeats} {kind:>{width}}: {res['steps_per_s']:.3f} steps/s "
                f"({res['timed_steps']} steps in {res['timed_s']:.2f} s, {res['tokens_per_s']:.0f} tok/s, "
                f"fastest step {min(res['timed_step_s']):.2f} s, CPU share {100 * res['cpu_share']:.0f}%; "
                f"construction {res['construct_s']:.1f} s)"
            )
    return runs


def run_stats(runs: list[dict]) -> dict:
    """One trainer's runs: steps/s median and range, tokens, CPU share, and the fastest steps pooled over runs."""
    sps = [r["steps_per_s"] for r in runs]
    steps = [x for r in runs for x in r["timed_step_s"]]
    return {
        "steps_per_s_median": statistics.median(sps),
        "steps_per_s_min": min(sps),
        "steps_per_s_max": max(sps),
        "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in runs),
        "tokens_per_step": statistics.median(r["tokens_timed"] / r["timed_steps"] for r in runs),
        "cpu_share_median": statistics.median(r["cpu_share"] for r in runs),
        "step_s_min": min(steps),
        "step_s_p25": fastest_quartile(steps),
    }


def ab_summary(stats_a: dict, stats_b: dict, runs_a: list[dict], runs_b: list[dict]) -> dict:
    """A/B ratios of whole runs (above 1: A is faster) and the run-to-run spread of the noisier trainer."""
    spreads = [(s["steps_per_s_max"] - s["steps_per_s_min"]) / s["steps_per_s_median"] for s in (stats_a, stats_b)]
    return {
        "ratio": stats_a["steps_per_s_median"] / stats_b["steps_per_s_median"],
        "ratio_per_round": [a["steps_per_s"] / b["steps_per_s"] for a, b in zip(runs_a, runs_b)],
        "ratio_fastest_quartile": stats_b["step_s_p25"] / stats_a["step_s_p25"],  # A/B in steps/s
        "run_spread_rel": max(spreads),  # (max - min) / median
        "same_tokens": all(a["tokens_timed"] == b["tokens_timed"] for a, b in zip(runs_a, runs_b)),
    }


def goal_check(ratio: float, spread: float, repeats: int) -> tuple[bool, bool | None]:
    """(A/B >= 1.0, whether a miss is within run-to-run noise; None when one round gives no noise estimate)."""
    return ratio >= 1.0, (ratio >= 1.0 - spread if repeats > 1 else None)


def interleaved_ab(label: str, kinds: tuple[str, str], build: Build, n: int, workdir: Path, sync) -> dict:
    """Both trainers built once; `n` single steps each, alternated ABBA after one warm-up step each."""
    import torch

    state = {}
    for kind in kinds:
        with quiet():
            trainer = build(kind, workdir / f"ab-{kind}", [])
        model = trainer.model.to(trainer.args.device)
        model.train()

        def batches(trainer=trainer):
            while True:
                yield from trainer.get_eval_dataloader(trainer.train_dataset)  # sequential sampler, collator included

        state[kind] = (trainer, model, batches())

    def step(kind: str) -> tuple[float, int | None]:
        trainer, model, it = state[kind]
        sync()
        start = time.perf_counter()
        batch = {k: v.to(trainer.args.device) if isinstance(v, torch.Tensor) else v for k, v in next(it).items()}
        with quiet(), trainer.compute_loss_context_manager():
            loss = trainer.compute_loss(model, batch)
        loss.backward()
        model.zero_grad(set_to_none=True)
        sync()
        mask = batch.get("attention_mask")
        return time.perf_counter() - start, None if mask is None else int(mask.sum())

    a, b = kinds
    times: dict[str, list[float]] = {a: [], b: []}
    tokens: dict[str, list[int | None]] = {a: [], b: []}
    step(a), step(b)  # warm-up
    for _, kind in abba(a, b, n):
        seconds, tok = step(kind)
        times[kind].append(seconds)
        tokens[kind].append(tok)
    out = {
        "steps": n,
        f"{a}_step_s_median": statistics.median(times[a]),
        f"{b}_step_s_median": statistics.median(times[b]),
        **ratio_range(paired_ratios(times[a], times[b])),
        "same_batches": tokens[a] == tokens[b],
        "step_s": times,
    }
    log(
        f"{label} interleaved A/B: {a.upper()} {out[f'{a}_step_s_median']:.3f} s/step, {b.upper()} "
        f"{out[f'{b}_step_s_median']:.3f} s/step, paired ratio {a.upper()}/{b.upper()} median "
        f"{out['ratio_paired_median']:.3f} ({out['ratio_paired_min']:.3f}..{out['ratio_paired_max']:.3f})"
    )
    state.clear()
    gc.collect()
    return out


def compare_trainers(
    label: str,
    kinds: tuple[str, str],
    build: Build,
    *,
    max_steps: int,
    warmup: int,
    repeats: int,
    ab_steps: int,
    sync,
    flops_fn: Callable[[dict], dict] | None = None,
) -> dict:
    """Whole runs, their statistics and ratios, then (`ab_steps` > 0) the interleaved A/B, and the goal A/B >= 1.

    Keys: runs, one stats dict per kind (plus `flops_fn(stats)`), ratio, ratio_per_round, ratio_fastest_quartile,
    run_spread_rel, same_tokens, interleaved, goal_met, within_noise.
    """
    a, b = kinds
    runs = whole_runs(label, kinds, build, max_steps, warmup, repeats, sync)
    out: dict = {"runs": runs}
    for kind in kinds:
        out[kind] = run_stats(runs[kind])
        if flops_fn is not None:
            out[kind].update(flops_fn(out[kind]))
    out.update(ab_summary(out[a], out[b], runs[a], runs[b]))
    if ab_steps > 0:
        with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
            out["interleaved"] = interleaved_ab(label, kinds, build, ab_steps, Path(tmp), sync)
    out["goal_met"], out["within_noise"] = goal_check(out["ratio"], out["run_spread_rel"], repeats)
    return out


def mfu(flop_per_step: float, steps_per_s: float, peak_tflops: float) -> dict:
    """Achieved TFLOP/s and model FLOPs utilization against the accelerator's peak."""
    achieved = flop_per_step * steps_per_s
    return {"flop_per_step": flop_per_step, "achieved_tflops": achieved / 1e12, "mfu": achieved / (peak_tflops * 1e12)}


def random_llama_config(shape: dict, tokenizer, max_position_embeddings: int):
    """The LlamaConfig of `shape` with `tokenizer`'s pad and eos ids (no bos), for the random-init benchmark models."""
    from transformers import LlamaConfig

    return LlamaConfig(
        **shape,
        head_dim=shape["hidden_size"] // shape["num_attention_heads"],
        max_position_embeddings=max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def save_random_llama(
    shape: dict, tokenizer, model_dir: Path, *, seed: int, device: str, max_position_embeddings: int
) -> int:
    """A random-init bf16 Llama of `shape` saved with `tokenizer` to `model_dir`; returns its parameter count
    (tied embeddings counted once). The tiny tokenizer's ids (< 2048) are valid rows of a 128k vocabulary."""
    import torch
    from transformers import LlamaForCausalLM

    config = random_llama_config(shape, tokenizer, max_position_embeddings)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return n_params
