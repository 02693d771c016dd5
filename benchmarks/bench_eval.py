"""Evaluator throughput per backend on identical rendered TicToc prompts (prints numbers; not a test).

    python benchmarks/bench_eval.py [model=tiny] [n=128] [max_new_tokens=32] [batch_size=16]
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root, for benchmarks.*

from benchmarks.harness import Command, best_time, run_benchmark  # noqa: E402
from timealign.config.schema import opt  # noqa: E402

DETAILS = """Runs the hf backend always and the vllm backend when vLLM is importable (run it with the vLLM environment's
python to get both). Prompts are the synthetic held-out TicToc samples rendered by the shared PromptRenderer, cycled
to `n`. Greedy, the same max_new_tokens for both. Goal (issue 4): vLLM >= 5x the hf backend's samples/s.

Smallest run (smoke test): python benchmarks/bench_eval.py n=4 max_new_tokens=4 batch_size=4 trajectories=2 repeats=1"""


@dataclass
class EvalBenchOptions:
    model: str = opt("tiny", "model folder, hub id, or tiny / tiny-agent")
    n: int = opt(128, "prompts")
    max_new_tokens: int = opt(32, "new tokens per prompt (greedy), the same for every backend")
    batch_size: int = opt(16, "hf backend batch size")
    trajectories: int = opt(16, "synthetic trajectories per split for prompts")
    max_model_len: int = opt(4096, "vllm max_model_len")
    dtype: str = opt("float32", "model dtype of both backends")
    repeats: int = opt(3, "timed runs per backend; the best is reported")
    hf_threads: int | None = opt(None, "torch threads for the hf backend (default: torch's). On a CPU shared with "
                                       "other jobs, 2 OpenMP threads on 2 cores can run 5x slower than 1 thread")


COMMAND = Command(prog="python benchmarks/bench_eval.py", summary=__doc__.split("\n\n")[0], options=EvalBenchOptions,
                  recipe="none", examples=DETAILS)


def tictoc_prompts(tokenizer, n: int, trajectories: int) -> list[str]:
    from timealign.config import DataSection
    from timealign.data.pairs import load_prepared, prepare
    from timealign.render.chat import PromptRenderer

    with tempfile.TemporaryDirectory() as tmp:
        prepare(DataSection(synthetic_trajectories=trajectories), Path(tmp))
        rows = load_prepared(tmp)["test"].to_list()
    renderer = PromptRenderer.for_data(tokenizer, DataSection())
    rendered = [renderer.prompt(r["prompt"], r["tools"]) for r in rows]
    return [rendered[i % len(rendered)] for i in range(n)]


def measure(backend, prompts: list[str], max_new_tokens: int, repeats: int) -> tuple[float, list[str]]:
    """Best of `repeats` timed runs after a warm-up (the least disturbed run on a shared machine)."""
    return best_time(lambda: backend.generate(prompts, max_new_tokens=max_new_tokens, desc=None), repeats,
                     warmup=lambda: backend.generate(prompts[:2], max_new_tokens=max_new_tokens, desc=None))


def run(opts: EvalBenchOptions) -> int:
    logging.disable(logging.INFO)  # only the numbers (the CLI turns on INFO logging)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

    import torch

    from timealign.backends.hf import HFBackend
    from timealign.tiny import resolve_model_path

    model = resolve_model_path(opts.model)
    if opts.hf_threads:
        torch.set_num_threads(opts.hf_threads)
    print(f"model {opts.model} ({model}); {opts.n} prompts; max_new_tokens {opts.max_new_tokens}; greedy; "
          f"torch threads {torch.get_num_threads()}; dtype {opts.dtype}; best of {opts.repeats}; "
          f"load average {os.getloadavg()[0]:.1f}")
    results = {}
    start = time.perf_counter()
    hf = HFBackend(model, batch_size=opts.batch_size, dtype=opts.dtype)
    hf_load = time.perf_counter() - start
    prompts = tictoc_prompts(hf.tokenizer, opts.n, opts.trajectories)
    lengths = [len(ids) for ids in hf.tokenizer(prompts, add_special_tokens=True)["input_ids"]]
    print(f"prompt tokens: mean {sum(lengths) / len(lengths):.0f}, max {max(lengths)}")
    seconds, outputs = measure(hf, prompts, opts.max_new_tokens, opts.repeats)
    results["hf"] = (hf_load, seconds, outputs)
    tokenizer = hf.tokenizer
    del hf
    gc.collect()

    try:
        import vllm  # noqa: F401
    except ImportError:
        print("vllm: not importable here (run with the vLLM environment's python to include it)")
    else:
        from timealign.backends.vllm import VLLMBackend

        start = time.perf_counter()
        vb = VLLMBackend(model, dtype=opts.dtype, max_model_len=opts.max_model_len, enforce_eager=True)
        vllm_load = time.perf_counter() - start
        seconds, outputs = measure(vb, prompts, opts.max_new_tokens, opts.repeats)
        results["vllm"] = (vllm_load, seconds, outputs)
        vb.close()

    print(f"\n{'backend':<8}{'load s':>9}{'gen s':>9}{'samples/s':>11}{'new tok/s':>11}   "
          f"(hf batch size {opts.batch_size})")
    for name, (load, seconds, outputs) in results.items():
        new_tokens = sum(len(ids) for ids in tokenizer(outputs, add_special_tokens=False)["input_ids"])
        print(f"{name:<8}{load:>9.1f}{seconds:>9.2f}{len(prompts) / seconds:>11.1f}{new_tokens / seconds:>11.0f}")
    if "vllm" in results:
        speedup = results["hf"][1] / results["vllm"][1]
        same = sum(a == b for a, b in zip(results["hf"][2], results["vllm"][2]))
        print(f"\nvllm / hf samples/s: {speedup:.1f}x (goal >= 5x: {'met' if speedup >= 5 else 'NOT met'}); "
              f"identical greedy outputs: {same}/{len(prompts)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(COMMAND, argv, run)


if __name__ == "__main__":  # the vLLM engine spawns a process: keep this guard
    sys.exit(main())
