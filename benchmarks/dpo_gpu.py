"""Part 3 of bench_dpo (only with CUDA): ODPO vs stock TRL on a random-init Llama-3.2-1B-shaped model in bf16 at
~`gpu_seq_len` tokens per sequence, with MFU from a 6*N*T (+2*N*T reference forward) FLOP estimate.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.dpo_options import DpoBenchOptions
from benchmarks.dpo_trainers import MODES, odpo_vs_trl, report_compare, seq_lengths, synthetic_pairs
from benchmarks.harness import log
from benchmarks.trainer_ab import LLAMA_1B_SHAPE, mfu, save_random_llama


def lengthen(tokenizer, dataset, target: int):
    """Prefix each prompt with earlier rendered prompts so prompt + longer completion is ~`target` tokens."""
    from datasets import Dataset

    prompts = list(dataset["prompt"])
    rows = {k: [] for k in dataset.column_names}
    for i, row in enumerate(dataset):
        completion = max(len(tokenizer(row["chosen"])["input_ids"]), len(tokenizer(row["rejected"])["input_ids"]))
        need = max(target - completion - 1, 1)  # TRL appends EOS to the completion
        ids = tokenizer(row["prompt"])["input_ids"]
        j = i
        while len(ids) < need:
            j = (j - 1) % len(prompts)
            ids = tokenizer(prompts[j])["input_ids"] + ids
        prompt = tokenizer.decode(ids[-need:])
        for k in rows:
            rows[k].append(prompt if k == "prompt" else row[k])
    return Dataset.from_dict(rows)


def gpu_config(opts: DpoBenchOptions, precompute: bool, cuda: bool) -> dict:
    return dict(
        bf16=True,
        use_cpu=not cuda,
        gradient_checkpointing=False,
        report_to=["none"],
        per_device_train_batch_size=opts.gpu_batch_size,
        gradient_accumulation_steps=1,
        max_steps=opts.gpu_steps,
        logging_steps=10**6,
        save_strategy="no",
        seed=opts.seed,
        data_seed=opts.seed,
        max_length=opts.gpu_seq_len + 64,
        learning_rate=1e-6,
        beta=0.1,
        loss_type=["sigmoid"],
        optim="adamw_torch",
        lr_scheduler_type="constant",
        disable_tqdm=True,
        dataloader_num_workers=0,
        precompute_ref_log_probs=precompute,
    )


def bench_gpu_train(opts: DpoBenchOptions, shape: dict | None = None, device: str = "cuda") -> dict:
    """The comparison on the GPU, with MFU.

    `shape` and `device="cpu"` exist only to smoke-test this code path on a machine without a GPU.
    """
    import torch
    from transformers import AutoTokenizer

    from timealign.models.tiny import ensure_tiny_model

    cuda = device == "cuda"
    shape = dict(shape or LLAMA_1B_SHAPE)
    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_model())
    results = {
        "shape": shape,
        "dtype": "bfloat16",
        "device": torch.cuda.get_device_name(0) if cuda else device,
        "peak_tflops": opts.peak_tflops,
    }
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory(prefix="bench-1b-") as tmp:
        tmp = Path(tmp)
        model_dir = tmp / "model"
        n_params = save_random_llama(
            shape,
            tokenizer,
            model_dir,
            seed=opts.seed,
            device=device,
            max_position_embeddings=max(4096, 2 * opts.gpu_seq_len),
        )
        results["params"] = n_params
        base = synthetic_pairs(tokenizer, opts.gpu_steps * opts.gpu_batch_size, tmp)
        dataset = lengthen(tokenizer, base, opts.gpu_seq_len)
        results["pairs"] = len(dataset)
        results["tokens_per_sequence"] = seq_lengths(tokenizer, dataset)
        log(
            f"GPU comparison: Llama-3.2-1B shape, {n_params / 1e9:.3f} B params, {len(dataset)} pairs, "
            f"~{results['tokens_per_sequence']['mean']:.0f} tokens/sequence, bf16, {results['device']}"
        )

        sync = torch.cuda.synchronize if cuda else (lambda: None)
        for label, _ in MODES[:1] if opts.no_precompute else MODES:
            precompute = label == "precompute_ref"
            ref_factor = 0 if precompute else 2  # reference forward per step: 2*N*T, none when precomputed

            def flops(stats, ref_factor=ref_factor):
                return mfu(
                    (6 + ref_factor) * n_params * stats["tokens_per_step"],
                    stats["steps_per_s_median"],
                    opts.peak_tflops,
                )

            results[label] = odpo_vs_trl(
                f"gpu/{label}",
                str(model_dir),
                torch.bfloat16,
                tokenizer,
                dataset,
                gpu_config(opts, precompute, cuda),
                opts,
                sync=sync,
                flops_fn=flops,
            )
            if cuda:
                torch.cuda.empty_cache()
        results["max_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    return results


def report_gpu(g: dict, opts: DpoBenchOptions) -> None:
    print("\n## 3. Offset-DPO vs trl.DPOTrainer on GPU: Llama-3.2-1B-shaped random-init model, bf16")
    if "skipped" in g:
        print(f"skipped: {g['skipped']}")
        return
    tok = g["tokens_per_sequence"]
    print(
        f"{g['device']}: {g['params'] / 1e9:.3f} B params (tied embeddings counted once), "
        f"{g['pairs']} pairs, batch {opts.gpu_batch_size}, ~{tok['mean']:.0f} tokens/sequence; "
        f"peak memory {g['max_memory_gib']:.1f} GiB"
    )
    print(
        f"MFU = achieved FLOP/s / {opts.peak_tflops:g} TFLOP/s peak; FLOPs per step estimated as "
        "6 * params * tokens (policy forward + backward) + 2 * params * tokens (reference forward; "
        "0 with precompute_ref_log_probs), tokens = non-padding tokens of chosen + rejected; "
        "attention FLOPs and padding not counted"
    )
    report_compare("GPU", g, gpu=True)
