"""`make gpu-check`: the GPU check of one H100/H200 in under 10 minutes: offset-DPO layouts, TIMER packing, HF
generation, bf16 equality checks, speed, MFU and peak memory beside the memory planner's estimate.

On a Llama-3.2-1B-shaped random-init bf16 model (timealign/cluster/model_shapes/meta-llama--Llama-3.2-1B.json:
vocabulary 128256, so the logits are the real size) and real TicToc v1 train pairs rendered with the offline tiny
tokenizer (its ids, < 2048, are valid rows of the 128k vocabulary; no download):

  dpo       stock trl.DPOTrainer, offset-DPO (TRL's layout), shared prompt (sdpa, dense tree mask), shared prompt
            (model.attn_implementation=flex_attention, block-sparse mask); each with the reference forward every step
            and with precompute_ref_log_probs
  sft       TIMER SFT (tiny-timer's synthetic dialogs) packed vs unpacked
  generate  timealign's HF backend, greedy, batched
  equality  bf16: shared vs unshared reference log-probs of the same pairs; flex vs dense (sdpa) loss and gradients
  peak      the measured bf16 matmul peak (TFLOP/s) that MFU is taken against

Per run: steps/s, tokens/s (tokens the model computed; `pair_tokens_per_s`: the pairs' tokens as stock DPO sees
them), MFU (6 x params x tokens, + 2 x for a reference forward), peak memory (torch.cuda.max_memory_allocated) and
the planner's estimate for the same setup (`timealign.cluster.memory`, single GPU, at the longest row). Writes
results/bench/gpu.json and a dated copy docs/bench/gpu-YYYY-MM-DD.json.

Without CUDA it prints one line starting `gpu-check: no CUDA` and exits 0, having run nothing (a machine without a
GPU is not a failure of the check; scripts that need the numbers look for the JSON). The packages the GPU image lacks
(trl, datasets, omegaconf, dill, multiprocess) come as wheels from `make gpu-wheels` (.whl/), installed into
.whl/site on first use. `smoke=true` runs the same code on CPU with a small model and no flex (tests only).
"""

from __future__ import annotations

import datetime
import gc
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

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
DPO_RUNS = [(layout, pre) for layout in ("trl", "offset", "shared_sdpa", "shared_flex") for pre in (False, True)]


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
) -> int:
    """The planner's per-GPU estimate for this single-GPU run (its runtime reserve left out: the measured peak is
    the allocator's, which does not count the CUDA context)."""
    from timealign.cluster.memory import GPU_RESERVE, ModelShape, Workload, estimate, strategy_from_config

    model = ModelShape(
        head_dim=shape["hidden_size"] // shape["num_attention_heads"],
        **{
            k: shape[k]
            for k in (
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "intermediate_size",
                "vocab_size",
                "tie_word_embeddings",
            )
        },
    )
    work = Workload(
        task=task,
        micro_batch=batch,
        max_length=length,
        gradient_checkpointing=False,
        dtype_bytes=2,
        mixed_precision=True,
        precompute_ref=precompute,
        attn=attn,
        shared_prompt=shared,
        shared_row_length=shared_row,
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


def dpo_trainer(layout: str, model_dir: Path, dataset, tokenizer, config: dict, workdir: Path, callbacks: list):
    import torch
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer

    from timealign.train.odpo import OffsetDPOTrainer

    attn = "flex_attention" if layout == "shared_flex" else "sdpa"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation=attn)
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
    for layout in ("offset", "shared_sdpa") + (("shared_flex",) if device == "cuda" else ()):
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
    opts, shape: dict, n_params: int, model_dir: Path, dataset, tokenizer, device: str, peak: float, workdir: Path
) -> dict:
    import statistics

    from benchmarks.dpo_variants import pair_tokens
    from benchmarks.trainer_ab import timed_train

    counts = pair_tokens(tokenizer, dataset)
    stock_tokens = statistics.mean(
        2 * p + c + r for p, c, r in zip(counts["prompt"], counts["chosen"], counts["rejected"])
    )
    longest, shared_row = longest_rows(counts)
    runs = [run for run in DPO_RUNS if device == "cuda" or run[0] != "shared_flex"]
    out = {
        "pairs": len(dataset),
        "longest_pair_tokens": longest,
        "longest_shared_row_tokens": shared_row,
        "stock_tokens_per_pair": stock_tokens,
        "runs": {},
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
    for r in range(opts.rounds):
        for layout, precompute in runs if r % 2 == 0 else runs[::-1]:  # A..Z, then Z..A: no layout always first
            reset_peak(device)
            res = train(layout, precompute, opts.steps, opts.warmup)
            rounds[layout, precompute].append((res, peak_bytes(device)))
    for (layout, precompute), timed in rounds.items():
        label = run_label(layout, precompute)
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


def generation(opts, model_dir: Path, dataset, device: str) -> dict:
    from timealign.backends.hf import HFBackend

    prompts = [dataset[i % len(dataset)]["prompt"] for i in range(opts.gen_prompts)]
    backend = HFBackend(str(model_dir), dtype="bfloat16", device=device, batch_size=min(16, len(prompts)))
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
        "prompts": len(prompts),
        "max_new_tokens": opts.gen_tokens,
        "generated_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
    }


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
    if opts.smoke:
        shape = dict(SMOKE_SHAPE)
    else:
        llama = shape_for("meta-llama/Llama-3.2-1B")
        shape = {
            k: getattr(llama, k)
            for k in (
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "intermediate_size",
                "vocab_size",
                "tie_word_embeddings",
            )
        }
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
        results["equality"] = equality(opts, model_dir, dataset, tokenizer, device, tmp)
        print(f"equality: {json.dumps(results['equality'])}", flush=True)
        results["dpo"] = dpo_runs(opts, shape, n_params, model_dir, dataset, tokenizer, device, peak, tmp)
        results["sft"] = sft_runs(opts, shape, n_params, model_dir, device, peak, tmp)
        results["generation"] = generation(opts, model_dir, dataset, device)
        print(f"HF generation: {results['generation']['tokens_per_s']:.0f} tokens/s", flush=True)
    results["total_s"] = time.perf_counter() - started
    write_json(opts.json, results)
    if opts.docs_copy and not opts.smoke:
        write_json(str(REPO_ROOT / "docs" / "bench" / f"gpu-{results['date']}.json"), results)
    return 0


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
