"""TicToc evaluation: render each held-out sample's prompt, generate, detect a tool-call attempt, score NAR."""

from __future__ import annotations

from pathlib import Path

from timealign.eval.cache import cached_generate, suite_cache_dir
from timealign.eval.metrics import tictoc_report
from timealign.eval.suites import EvalContext, register_suite
from timealign.eval.tool_calls import detect_family, is_tool_call
from timealign.rendering import PromptRenderer


def evaluate_tictoc(backend, rows: list[dict], *, timestamps: bool = True, prompt_mode: str = "none",
                    family: str | None = None, max_new_tokens: int = 24, desc: str = "TicToc",
                    cache_dir: str | Path | None = None, elapsed: bool = False) -> dict:
    """Score one backend on prepared pair rows (the `prompt` and `tools` columns; labels from `label`).

    Generation goes through `cached_generate`: finished samples are cached in `cache_dir/tictoc.jsonl` (a killed run
    resumes), and a sample whose generation fails is listed under `errors` (and in its sample record) and left out
    of the metrics instead of stopping the run. Returns the report (overall NAR and attempt rates, breakdowns) plus
    per-sample records.
    """
    tokenizer = backend.tokenizer
    family = family or detect_family(tokenizer.chat_template)
    renderer = PromptRenderer(tokenizer, timestamps=timestamps, prompt_mode=prompt_mode, elapsed=elapsed)
    prompts = [renderer.prompt(r["prompt"], r["tools"]) for r in rows]
    gens = cached_generate(backend, prompts, suite="tictoc", cache_dir=cache_dir, max_new_tokens=max_new_tokens,
                           desc=desc)
    outputs = gens.outputs
    attempted = [is_tool_call(text, family) if text is not None else None for text in outputs]
    scored = [i for i, text in enumerate(outputs) if text is not None]
    report = tictoc_report([rows[i] for i in scored], [attempted[i] for i in scored])
    resolve = getattr(backend, "resolve_sampling", None)
    report["settings"] = {"timestamps": timestamps, "elapsed": elapsed and timestamps, "prompt_mode": prompt_mode,
                          "family": family,
                          "backend": backend.name, "max_new_tokens": max_new_tokens,
                          "sampling": resolve() if resolve else None}
    report["generation"] = gens.summary()
    report["errors"] = [{"id": rows[i]["id"], "elapse_level": rows[i]["elapse_level"], "error": err}
                        for i, err in sorted(gens.errors.items())]
    report["samples"] = []
    for i, (r, called, text) in enumerate(zip(rows, attempted, outputs, strict=True)):
        sample = {"id": r["id"], "elapse_level": r["elapse_level"], "label": r["label"], "tool_call": called,
                  "output": text}
        if i in gens.errors:
            sample["error"] = gens.errors[i]
        report["samples"].append(sample)
    return report


@register_suite("tictoc", "TicToc tool-call alignment (NAR, attempt rates) on the recipe's held-out split")
def run_tictoc_suite(backend, ctx: EvalContext) -> dict:
    from timealign.data.prepare import load_prepared
    from timealign.train.dpo import ensure_prepared

    recipe = ctx.recipe
    data = load_prepared(ensure_prepared(recipe))
    if recipe.data.eval_split not in data:
        raise ValueError(f"prepared data has no {recipe.data.eval_split!r} split (has: {', '.join(data)})")
    rows = data[recipe.data.eval_split].to_list()
    if recipe.eval.max_samples:
        rows = rows[: recipe.eval.max_samples]
    report = evaluate_tictoc(backend, rows, timestamps=ctx.timestamps, prompt_mode=ctx.prompt_mode,
                             family=ctx.family, max_new_tokens=recipe.eval.max_new_tokens,
                             cache_dir=suite_cache_dir(ctx), elapsed=recipe.data.elapsed)
    report["markdown"] = markdown_summary(report)
    return report


def markdown_summary(report: dict) -> str:
    o = report["overall"]

    def fmt(v):
        return "n/a" if v is None else f"{v:.3f}"

    lines = ["| metric | value |", "|---|---|",
             f"| samples | {o['n']} |", f"| NAR | {fmt(o['nar'])} |",
             f"| attempt rate, prefer-Tool | {fmt(o['attempt_rate_prefer_tool'])} |",
             f"| attempt rate, prefer-noTool | {fmt(o['attempt_rate_prefer_no_tool'])} |",
             f"| tool calls | {o['tool_calls']} |"]
    failed = len(report.get("errors") or [])
    if failed:
        lines.append(f"| failed samples (not scored; see `errors`) | {failed} |")
    lines.append("")
    for group in ("by_sensitivity", "by_elapse_level", "by_length"):
        lines += [f"**{group.replace('_', ' ')}**", "", "| bucket | n | NAR | attempt (Tool) | attempt (noTool) |",
                  "|---|---|---|---|---|"]
        for bucket, m in report[group].items():
            lines.append(f"| {bucket} | {m['n']} | {fmt(m['nar'])} | {fmt(m['attempt_rate_prefer_tool'])} | "
                         f"{fmt(m['attempt_rate_prefer_no_tool'])} |")
        lines.append("")
    return "\n".join(lines)
