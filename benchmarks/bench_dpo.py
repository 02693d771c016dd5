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
    Command, check_steps, finish, machine_info, offline_environment, options_record, print_header, quiet_libraries,
    run_benchmark, write_json,
)

PARTS = """Parts:
  1. data prep   `timealign.data.pairs.prepare` on the v1 release (load + pairs + save), best/median of N runs,
                 then rendering every pair into prompt strings (`render_split` + `PromptRenderer`, tiny tokenizer),
                 which happens at train time. Goal: data prep < 5 s on 2 cores.
  2. CPU train   `OffsetDPOTrainer` vs `trl.DPOTrainer` on the tiny model and the tiny recipe's synthetic pairs,
                 alternating runs (ODPO, TRL, then TRL, ODPO, ...: ABBA, which cancels linear drift) for `repeats`
                 rounds, without and with `precompute_ref_log_probs`. Only training steps after a warm-up are timed
                 (a TrainerCallback: on_step_begin of step warmup+1 to on_step_end of the last step); trainer
                 construction (tokenization, reference model loading, reference precompute) is not.
                 Goal: ODPO/TRL >= 1.0. Then an interleaved per-step A/B (`ab_steps`) that is robust to other load
                 on the machine.
  3. GPU train   (only when CUDA is available) the same comparison on a random-init Llama-3.2-1B-shaped model in
                 bf16 at ~1024 tokens per sequence, with MFU from a 6*N*T (+2*N*T reference) FLOP estimate.

Smallest run (smoke test): python benchmarks/bench_dpo.py data_runs=1 steps=3 repeats=1 batch_size=2 pairs=4 \\
    ab_steps=2"""

COMMAND = Command(
    prog="python benchmarks/bench_dpo.py",
    summary=__doc__.split("\n\n")[0],
    options=DpoBenchOptions,
    recipe="none",
    examples=PARTS,
)


def run(opts: DpoBenchOptions) -> int:
    check_steps(opts.warmup, steps=opts.steps, gpu_steps=opts.gpu_steps)
    quiet_libraries()
    import torch

    from benchmarks.dpo_data_prep import bench_data_prep, report_data
    from benchmarks.dpo_gpu import bench_gpu_train, report_gpu
    from benchmarks.dpo_trainers import bench_cpu_train, report_cpu

    started = time.perf_counter()
    results = {"env": machine_info(), "args": options_record(opts)}
    if not opts.skip_data:
        results["data_prep"] = bench_data_prep(opts)
    if not opts.skip_train:
        results["cpu_train"] = bench_cpu_train(opts)
        if torch.cuda.is_available():
            results["gpu_train"] = bench_gpu_train(opts)
        else:
            results["gpu_train"] = {"skipped": "no GPU (torch.cuda.is_available() is False)"}
    finish(results, started)

    print_header("timealign benchmark", results["env"],
                 note="other processes on these cores slow every number below, alternating runs keeps the ODPO/TRL "
                      "ratio fair")
    if "data_prep" in results:
        report_data(results["data_prep"])
    if "cpu_train" in results:
        report_cpu(results["cpu_train"], opts)
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
