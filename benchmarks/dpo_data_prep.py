"""Part 1 of bench_dpo: data prep on the real TicToc v1 release, and rendering every pair into prompt strings.

`timealign.data.pairs.prepare` (load + pairs + save), best/median of N runs into fresh folders, then
`load_prepared` and rendering (`render_split` + `PromptRenderer`, tiny tokenizer), which happens at train time.
Library import time is excluded; one cold CLI run (`data_prep/tictoc.py`) shows what a user waits for, imports
included. Goal: data prep < 5 s on 2 cores.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.dpo_options import DpoBenchOptions
from benchmarks.harness import REPO_ROOT, cold_cli, log, met, quiet, summary, table

DATA_PREP_GOAL_S = 5.0


def bench_data_prep(opts: DpoBenchOptions) -> dict:
    from transformers import AutoTokenizer

    from timealign.config import DataSection
    from timealign.data.pairs import load_prepared, prepare
    from timealign.models.tiny import ensure_tiny_model
    from timealign.render.chat import PromptRenderer
    from timealign.train.dpo import render_split

    path = Path(opts.tictoc).resolve()
    if not path.is_dir():
        log(f"TicToc v1 data not found at {path}: skipping part 1")
        return {"skipped": f"TicToc v1 data not found at {path}"}
    import datasets  # imported (and warmed) before timing: the numbers exclude library import time

    datasets.disable_progress_bars()
    data_section = DataSection(source="v1", path=str(path))
    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_model())
    renderer = PromptRenderer.for_data(tokenizer, data_section)  # as training renders these pairs
    prep_s, render_s, load_s, info, rendered = [], [], [], None, {}
    with tempfile.TemporaryDirectory(prefix="bench-prep-") as tmp:
        for run in range(opts.data_runs):
            out = Path(tmp) / f"run{run}"
            with quiet():
                t0 = time.perf_counter()
                info = prepare(data_section, out)
                t1 = time.perf_counter()
                data = load_prepared(out)
                t2 = time.perf_counter()
                rendered = {split: render_split(data[split], renderer, f"render {split}") for split in data}
                t3 = time.perf_counter()
            prep_s.append(t1 - t0)
            load_s.append(t2 - t1)
            render_s.append(t3 - t2)
            log(
                f"data prep run {run + 1}/{opts.data_runs}: prepare {t1 - t0:.3f} s, "
                f"load_prepared {t2 - t1:.3f} s, render {t3 - t2:.3f} s"
            )
        tokens = rendered_lengths(tokenizer, rendered)  # informative; not timed

    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        cli = cold_cli(
            [
                str(REPO_ROOT / "data_prep" / "tictoc.py"),
                "recipe=tiny",
                "data.source=v1",
                f"data.path={path}",
                f"out={tmp}/data",
            ],
            importtime=True,
        )
    total = [a + b for a, b in zip(prep_s, render_s)]
    return {
        "path": str(path),
        "pairs": info["pairs"],
        "splits": {k: v["pairs"] for k, v in info["splits"].items()},
        "rejects": info["rejects"],
        "prepare_s": summary(prep_s),
        "load_prepared_s": summary(load_s),
        "render_s": summary(render_s),
        "prepare_plus_render_s": summary(total),
        "rendered_tokens_per_sequence": tokens,
        "cli_cold_s": cli,
        "goal": f"data prep < {DATA_PREP_GOAL_S:g} s",
        "goal_met": min(prep_s) < DATA_PREP_GOAL_S,
    }


def rendered_lengths(tokenizer, rendered: dict) -> dict:
    """Tokens of prompt + chosen and prompt + rejected over every rendered pair."""
    lengths = []
    for ds in rendered.values():
        for row in ds:
            prompt = len(tokenizer(row["prompt"])["input_ids"])
            lengths.append(prompt + len(tokenizer(row["chosen"])["input_ids"]))
            lengths.append(prompt + len(tokenizer(row["rejected"])["input_ids"]))
    return {"sequences": len(lengths), "mean": statistics.mean(lengths), "max": max(lengths)}


def report_data(d: dict) -> None:
    print("\n## 1. Data prep: real TicToc v1 release")
    if "skipped" in d:
        print(f"skipped: {d['skipped']}")
        return
    print(
        f"{d['path']}: {d['pairs']} pairs ({', '.join(f'{k} {v}' for k, v in d['splits'].items())}), "
        f"{d['rejects']} rejects; {len(d['prepare_s']['runs'])} runs each, library imports excluded\n"
    )
    rows = []
    for key, name in (
        ("prepare_s", "prepare(): load + pairs + save"),
        ("load_prepared_s", "load_prepared()"),
        ("render_s", "render all pairs (render_split + PromptRenderer, tiny tok.)"),
        ("prepare_plus_render_s", "prepare + render"),
    ):
        s = d[key]
        rows.append([name, f"{s['best']:.3f}", f"{s['median']:.3f}", f"{s['max']:.3f}"])
    cli = d["cli_cold_s"]
    rows.append(["cold CLI: python data_prep/tictoc.py (1 run, with imports)", f"{cli['seconds']:.3f}", "", ""])
    print(table(["step", "best s", "median s", "max s"], rows))
    tok = d["rendered_tokens_per_sequence"]
    print(
        f"\nrendered sequences (prompt + completion, tiny tokenizer): {tok['sequences']}, "
        f"mean {tok['mean']:.0f} tokens, max {tok['max']}"
    )
    imports = cli["top_level_imports_s"]
    if imports["total"]:
        largest = ", ".join(f"{k} {v:.2f} s" for k, v in imports["largest"].items())
        print(f"cold CLI: {imports['total']:.2f} s of its {cli['seconds']:.2f} s are top-level imports ({largest})")
    if cli["returncode"] != 0:
        print(f"note: the CLI run failed with rc {cli['returncode']}")
    print(
        f"goal: {d['goal']} on {os.cpu_count()} cores: {met(d['goal_met'])} "
        f"(best {d['prepare_s']['best']:.3f} s, median {d['prepare_s']['median']:.3f} s)"
    )
