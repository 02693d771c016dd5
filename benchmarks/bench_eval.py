"""Evaluator throughput per backend on identical rendered TicToc prompts (prints numbers; not a test).

python benchmarks/bench_eval.py [model=tiny] [n=128] [max_new_tokens=32] [batch_size=16]
.venv-vllm/bin/python benchmarks/bench_eval.py source=v1 n=0 json=results/bench/eval.json
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

from benchmarks.harness import REPO_ROOT, Command, best_time, run_benchmark, write_json  # noqa: E402
from timealign.config.schema import opt  # noqa: E402

V1_DEFAULT = REPO_ROOT.parent / "shared" / "data" / "tictoc-v1"
HF_ORDERS = ("original", "length", "prefix")

DETAILS = """Runs the hf backend always and the vllm backend when vLLM is importable (run it with the vLLM
environment's
python to get both). Prompts are the synthetic held-out TicToc samples rendered by the shared PromptRenderer, cycled
to `n`, or (source=v1) the TicToc v1 held-out split, prepared and rendered as eval/run.py does. Greedy, the same
max_new_tokens for both. Goal (issue 4): vLLM >= 5x the hf backend's samples/s.

Prompt order and reuse (issue 14). Both backends get the prompts in calls of their `cache_chunk`, as an evaluation
(`cached_generate`) does. hf orders (`hf_orders`): original (the split's order, no regrouping), length (the
backend's `group_by_length`: each call batched longest first) and prefix (sorted by text, so prompts sharing a prefix
are batched together). vLLM with automatic prefix caching off and on (`prefix_caching`), the cache emptied before
every timed run, so each run pays for its prefixes once, as one evaluation does. Outputs are compared for exact
equality.

Smallest run (smoke test):
  python benchmarks/bench_eval.py n=4 max_new_tokens=4 batch_size=4 trajectories=2 repeats=1"""


@dataclass
class EvalBenchOptions:
    model: str = opt("tiny", "model folder, hub id, or tiny / tiny-agent")
    source: str = opt("synthetic", "synthetic (generated held-out samples) | v1 (the TicToc v1 release at data_path)")
    data_path: str = opt(str(V1_DEFAULT), "source=v1: the TicToc v1 folder")
    n: int = opt(128, "prompts (synthetic: cycled to n; v1: the first n of the held-out split, 0: all)")
    max_new_tokens: int = opt(32, "new tokens per prompt (greedy), the same for every backend")
    batch_size: int = opt(16, "hf backend batch size")
    trajectories: int = opt(16, "synthetic trajectories per split for prompts")
    max_model_len: int = opt(4096, "vllm max_model_len")
    dtype: str = opt("float32", "model dtype of both backends")
    repeats: int = opt(3, "timed runs per backend; the best is reported")
    hf_threads: int | None = opt(
        None,
        "torch threads for the hf backend (default: torch's). On a CPU shared with "
        "other jobs, 2 OpenMP threads on 2 cores can run 5x slower than 1 thread",
    )
    hf_orders: str = opt(
        "original,length,prefix",
        "hf prompt orders to time, comma-separated: original | length "
        "(longest first) | prefix (sorted by text: shared prefixes adjacent)",
    )
    prefix_caching: str = opt("both", "vllm: off | on | both (automatic prefix caching)")
    skip_hf: bool = opt(False, "time only vllm")
    json: str | None = opt(None, "also write every number to this JSON file (e.g. results/bench/eval.json)")


COMMAND = Command(
    prog="python benchmarks/bench_eval.py",
    summary=__doc__.split("\n\n")[0],
    options=EvalBenchOptions,
    recipe="none",
    examples=DETAILS,
)


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


def v1_prompts(tokenizer, path: str, n: int) -> list[str]:
    """The TicToc v1 held-out split, prepared and rendered as `eval/run.py recipe=tiny data.source=v1` does."""
    from timealign.config import load_recipe
    from timealign.render.chat import PromptRenderer
    from timealign.suites.tictoc.suite import heldout_rows
    from timealign.suites.tictoc.suite import tictoc_prompts as render

    if not Path(path).is_dir():
        raise SystemExit(f"source=v1: no TicToc v1 folder at {path} (set data_path=)")
    with tempfile.TemporaryDirectory() as tmp:
        recipe = load_recipe("tiny", {"data.source": "v1", "data.path": str(path), "data.prepared_dir": tmp})
        rows = heldout_rows(recipe)
    prompts = render(PromptRenderer.for_data(tokenizer, recipe.data), rows)
    return prompts[:n] if n else prompts


def in_chunks(backend, prompts: list[str], max_new_tokens: int) -> list[str]:
    """What one evaluation does (`cached_generate`): the prompts in calls of `backend.cache_chunk`."""
    out: list[str] = []
    for start in range(0, len(prompts), backend.cache_chunk):
        out += backend.generate(prompts[start : start + backend.cache_chunk], max_new_tokens=max_new_tokens, desc=None)
    return out


def measure(backend, prompts: list[str], max_new_tokens: int, repeats: int) -> tuple[float, list[str]]:
    """Best of `repeats` timed runs after a warm-up (the least disturbed run on a shared machine)."""
    return best_time(
        lambda: in_chunks(backend, prompts, max_new_tokens),
        repeats,
        warmup=lambda: backend.generate(prompts[:2], max_new_tokens=max_new_tokens, desc=None),
    )


def ordering(name: str, prompts: list[str], lengths: list[int], chunk: int) -> tuple[list[int], list[int]]:
    """(the order the prompts are passed in, the order the hf backend batches them) for the hf order `name`:
    original (as given, no regrouping), length (HFBackend.group_by_length: each call of `chunk` prompts longest
    first), prefix (passed sorted by text, so prompts sharing a prefix are adjacent; no regrouping)."""
    given = list(range(len(prompts)))
    if name == "original":
        return given, given
    if name == "length":
        batched = []
        for start in range(0, len(given), chunk):
            batched += sorted(given[start : start + chunk], key=lambda i: -lengths[i])
        return given, batched
    if name == "prefix":
        given = sorted(given, key=lambda i: prompts[i])
        return given, given
    raise SystemExit(f"hf_orders: unknown order {name!r} (known: {', '.join(HF_ORDERS)})")


def padding_share(order: list[int], lengths: list[int], batch_size: int, chunk: int) -> float:
    """Share of pad slots when the hf backend batches the prompts in `order`, `batch_size` at a time within calls of
    `chunk` prompts."""
    slots = real = 0
    for call in range(0, len(order), chunk):
        part = order[call : call + chunk]
        for start in range(0, len(part), batch_size):
            batch = [lengths[i] for i in part[start : start + batch_size]]
            slots += max(batch) * len(batch)
            real += sum(batch)
    return (slots - real) / slots


def measure_vllm(vb, prompts: list[str], max_new_tokens: int, repeats: int) -> tuple[float, list[str], float]:
    """Best of `repeats` runs, the prefix cache emptied before each: (seconds, outputs, cached share of the prompt
    tokens in the best run)."""
    vb.generate(prompts[:2], max_new_tokens=max_new_tokens, desc=None)  # warm-up
    best, outputs, cached = float("inf"), None, 0.0
    for _ in range(repeats):
        vb.llm.reset_prefix_cache()
        sent, hit = vb.prompt_tokens, vb.cached_prompt_tokens
        start = time.perf_counter()
        outputs = in_chunks(vb, prompts, max_new_tokens)
        seconds = time.perf_counter() - start
        if seconds < best:
            best, cached = seconds, (vb.cached_prompt_tokens - hit) / max(1, vb.prompt_tokens - sent)
    return best, outputs, cached


def run(opts: EvalBenchOptions) -> int:
    logging.disable(logging.INFO)  # only the numbers (the CLI turns on INFO logging)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

    import torch
    from transformers import AutoTokenizer

    from timealign.backends.hf import HFBackend
    from timealign.models import resolve_model_path

    model = resolve_model_path(opts.model)
    if opts.hf_threads:
        torch.set_num_threads(opts.hf_threads)
    tokenizer = AutoTokenizer.from_pretrained(model)
    if opts.source == "v1":
        prompts = v1_prompts(tokenizer, opts.data_path, opts.n)
    elif opts.source == "synthetic":
        prompts = tictoc_prompts(tokenizer, opts.n, opts.trajectories)
    else:
        raise SystemExit(f"source must be synthetic or v1, got {opts.source!r}")
    lengths = [len(ids) for ids in tokenizer(prompts, add_special_tokens=True)["input_ids"]]
    print(
        f"model {opts.model} ({model}); {len(prompts)} {opts.source} prompts; max_new_tokens {opts.max_new_tokens}; "
        f"greedy; torch threads {torch.get_num_threads()}; dtype {opts.dtype}; best of {opts.repeats}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"prompt tokens: mean {sum(lengths) / len(lengths):.0f}, max {max(lengths)}")
    results = {
        "args": dict(vars(opts)),
        "prompts": len(prompts),
        "prompt_tokens_mean": sum(lengths) / len(lengths),
        "hf": {},
        "vllm": {},
    }
    runs = {}  # name -> (load s, gen s, outputs in the original order)

    if not opts.skip_hf:
        start = time.perf_counter()
        hf = HFBackend(model, batch_size=opts.batch_size, dtype=opts.dtype)
        hf_load = time.perf_counter() - start
        for name in [x.strip() for x in opts.hf_orders.split(",") if x.strip()]:
            given, batched = ordering(name, prompts, lengths, hf.cache_chunk)
            hf.group_by_length = name == "length"
            seconds, out = measure(hf, [prompts[i] for i in given], opts.max_new_tokens, opts.repeats)
            outputs = [None] * len(prompts)
            for i, text in zip(given, out):
                outputs[i] = text
            runs[f"hf/{name}"] = (hf_load, seconds, outputs)
            results["hf"][name] = {
                "seconds": seconds,
                "samples_per_s": len(prompts) / seconds,
                "padding_share": padding_share(batched, lengths, opts.batch_size, hf.cache_chunk),
            }
        del hf
        gc.collect()

    try:
        import vllm  # noqa: F401
    except ImportError:
        print("vllm: not importable here (run with the vLLM environment's python to include it)")
    else:
        from timealign.backends.vllm import VLLMBackend

        settings = {"off": [False], "on": [True], "both": [False, True]}.get(opts.prefix_caching)
        if settings is None:
            raise SystemExit(f"prefix_caching must be off, on or both, got {opts.prefix_caching!r}")
        for caching in settings:
            name = "prefix_caching_" + ("on" if caching else "off")
            start = time.perf_counter()
            vb = VLLMBackend(
                model,
                dtype=opts.dtype,
                max_model_len=opts.max_model_len,
                enforce_eager=True,
                enable_prefix_caching=caching,
            )
            load = time.perf_counter() - start
            seconds, outputs, cached = measure_vllm(vb, prompts, opts.max_new_tokens, opts.repeats)
            vb.close()
            del vb
            gc.collect()
            runs[f"vllm/{name}"] = (load, seconds, outputs)
            results["vllm"][name] = {
                "seconds": seconds,
                "samples_per_s": len(prompts) / seconds,
                "cached_prompt_token_share": cached,
                "load_s": load,
            }

    print(
        f"\n{'run':<28}{'load s':>9}{'gen s':>9}{'samples/s':>11}{'new tok/s':>11}  (hf batch size {opts.batch_size})"
    )
    for name, (load, seconds, outputs) in runs.items():
        new_tokens = sum(len(ids) for ids in tokenizer(outputs, add_special_tokens=False)["input_ids"])
        extra = ""
        kind, setting = name.split("/")
        if kind == "hf":
            extra = f"  padding {100 * results['hf'][setting]['padding_share']:.0f}%"
        else:
            extra = (
                f"  prompt tokens from the cache {100 * results['vllm'][setting]['cached_prompt_token_share']:.0f}%"
            )
        print(
            f"{name:<28}{load:>9.1f}{seconds:>9.2f}{len(prompts) / seconds:>11.2f}{new_tokens / seconds:>11.0f}{extra}"
        )
    reference = runs.get("hf/original") or next(iter(runs.values()), None)
    if reference is not None:
        same = {name: sum(a == b for a, b in zip(reference[2], r[2])) for name, r in runs.items()}
        results["identical_outputs"] = same
        print(
            "\nidentical greedy outputs vs "
            + ("hf/original" if "hf/original" in runs else next(iter(runs)))
            + ": "
            + ", ".join(f"{name} {n}/{len(prompts)}" for name, n in same.items())
        )
    hf_s = runs.get("hf/original", (None, None))[1]
    vl = [r[1] for name, r in runs.items() if name.startswith("vllm/")]
    if hf_s and vl:
        speedup = hf_s / min(vl)
        results["vllm_over_hf"] = speedup
        print(f"vllm / hf samples/s: {speedup:.1f}x (goal >= 5x: {'met' if speedup >= 5 else 'NOT met'})")
    if {"vllm/prefix_caching_off", "vllm/prefix_caching_on"} <= set(runs):
        gain = runs["vllm/prefix_caching_off"][1] / runs["vllm/prefix_caching_on"][1]
        results["prefix_caching_speedup"] = gain
        print(f"vllm prefix caching on / off samples/s: {gain:.2f}x")
    write_json(opts.json, results)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_benchmark(COMMAND, argv, run)


if __name__ == "__main__":  # the vLLM engine spawns a process: keep this guard
    sys.exit(main())
