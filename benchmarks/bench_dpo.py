#!/usr/bin/env python
"""Throughput numbers for timealign: data prep on the real TicToc v1 release, and offset-DPO training steps/s
against stock `trl.DPOTrainer` on the same model, batch, data and config. Not a test: goals are printed with
whether they were met, nothing fails.

    HF_HUB_OFFLINE=1 python benchmarks/bench_dpo.py [steps=12] [repeats=2] [json=results/bench.json]

The parts live in benchmarks/dpo_data_prep.py, dpo_trainers.py and dpo_gpu.py; the timing and statistics they
share in benchmarks/harness.py and trainer_ab.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root, for benchmarks.*

from benchmarks.dpo_options import DpoBenchOptions  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    Command,
    check_steps,
    finish,
    machine_info,
    offline_environment,
    options_record,
    print_header,
    quiet_libraries,
    run_benchmark,
    write_json,
)

PARTS = """Parts:
  1. data prep   `timealign.data.pairs.prepare` on the v1 release (load + pairs + save), best/median of N runs,
                 then rendering every pair into prompt strings (`render_split` + `PromptRenderer`, tiny tokenizer),
                 which happens at train time. Goal: data prep < 5 s on 2 cores.
  2. CPU train   the offset-DPO speed-ups one at a time against stock `trl.DPOTrainer` on real TicToc v1 pairs
                 (model=tiny: tiny model and tokenizer; model=smol: SmolLM2-135M and its 49k tokenizer, `make
                 bench-smol`): offset, + shared prompt, + precomputed reference, + length-grouped batches,
                 padding-free rows (benchmarks/dpo_variants.py); steps/s, s/pair, tokens/s, padding share, peak
                 RSS, each as a ratio to stock TRL (JSON: dpo.ratio_vs_trl). Goals: shared prompt >= 1.8x, with the
                 precomputed reference >= 2.5x. Each run is a fresh process, the order rotates per round. Then
                 (ab_steps > 0) each variant's interleaved per-step A/B against stock TRL, robust to other load
                 (JSON: dpo.ratio_vs_trl_interleaved).
  2b. sweep      shared prompt vs stock TRL over prompt lengths x completion lengths (synthetic pairs of exact
                 token counts), drawn to sweep_png (benchmarks/dpo_sweep.py).
  3. GPU train   (only when CUDA is available) the same comparison on a random-init Llama-3.2-1B-shaped model in
                 bf16 at ~1024 tokens per sequence, with MFU from a 6*N*T (+2*N*T reference) FLOP estimate.

Smallest run (smoke test): python benchmarks/bench_dpo.py data_runs=1 steps=3 warmup=1 repeats=1 batch_size=2 \\
    pairs=6 sweep_prompts=256 sweep_completions=16 json=/tmp/bench.json"""

COMMAND = Command(
    prog="python benchmarks/bench_dpo.py",
    summary=__doc__.split("\n\n")[0],
    options=DpoBenchOptions,
    recipe="none",
    examples=PARTS,
)


def run(opts: DpoBenchOptions) -> int:
    if opts.worker:
        from benchmarks.dpo_variants import worker_main

        return worker_main(opts)
    check_steps(opts.warmup, steps=opts.steps, gpu_steps=opts.gpu_steps)
    quiet_libraries()
    import torch

    from benchmarks.dpo_data_prep import bench_data_prep, report_data
    from benchmarks.dpo_gpu import bench_gpu_train, report_gpu
    from benchmarks.dpo_sweep import bench_sweep, plot_sweep, report_sweep
    from benchmarks.dpo_variants import bench_variants, report_variants

    started = time.perf_counter()
    results = {"env": machine_info(), "args": options_record(opts)}
    if not opts.skip_data:
        results["data_prep"] = bench_data_prep(opts)
    if not opts.skip_train:
        results["dpo"] = bench_variants(opts)
        if not opts.skip_sweep:
            results["sweep"] = bench_sweep(opts)
            plot_sweep(results["sweep"], Path(opts.sweep_png))
        if torch.cuda.is_available():
            results["gpu_train"] = bench_gpu_train(opts)
        else:
            results["gpu_train"] = {"skipped": "no GPU (torch.cuda.is_available() is False)"}
    finish(results, started)

    print_header(
        "timealign benchmark",
        results["env"],
        note="other processes on these cores slow every number below, alternating runs keeps the ODPO/TRL ratio fair",
    )
    if "data_prep" in results:
        report_data(results["data_prep"])
    if "dpo" in results:
        report_variants(results["dpo"], opts)
    if "sweep" in results:
        report_sweep(results["sweep"], Path(opts.sweep_png))
    if "gpu_train" in results:
        report_gpu(results["gpu_train"], opts)
    print(f"\ntotal wall time: {results['total_s']:.0f} s")
    write_json(opts.json, results)
    return 0


def main(argv: list[str] | None = None) -> int:
    offline_environment()
    return run_benchmark(COMMAND, argv, run)


if __name__ == "__main__":
    sys.exit(main())
