"""TicToc evaluation: render each held-out sample's prompt, generate, detect a tool-call attempt, score NAR.

Prompts are rendered by the renderer training used (`PromptRenderer.for_data` on the recipe's `data` section, with
the evaluation-time `timestamps` / `prompt_mode` of the eval command), so a sample's prompt here is the prompt part
of its training pair (`tests/test_render_parity.py` checks it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from timealign.backends.cache import cached_generate
from timealign.backends.chat import ChatBackend
from timealign.backends.clock import ClockBackend
from timealign.config import DataSection
from timealign.config.schema import opt
from timealign.render.chat import PromptRenderer
from timealign.render.checkpoint import trained_prompt_protocol
from timealign.render.families import detect_family
from timealign.render.paper import PaperRenderer, UnrenderableSample
from timealign.render.tool_calls import PROTOCOLS, is_empty_output, is_tool_call
from timealign.suites.registry import EvalContext, Suite, suite_cache_dir
from timealign.suites.tictoc.metrics import paper_dropped, tictoc_report, tictoc_units
from timealign.suites.tictoc.requests import ChatRequestRenderer, ClockRequestRenderer

logger = logging.getLogger(__name__)


def tictoc_prompts(renderer: PromptRenderer | PaperRenderer, rows: list[dict]) -> list[str]:
    """The generation prompt of each prepared pair row (its `prompt` messages and `tools`)."""
    return [renderer.prompt(r["prompt"], r["tools"]) for r in rows]


def renderable(renderer: PromptRenderer | PaperRenderer, rows: list[dict]) -> tuple[list[dict], list[str], list[dict]]:
    """Rows and prompts of the samples the protocol can render, plus the others with the reason.

    Only the paper protocol refuses samples (`UnrenderableSample`: what the authors' code raised on and skipped,
    e.g. Ministral's 9-character tool-call ids); any other error is a bug and propagates.
    """
    kept, prompts, refused = [], [], []
    for row in rows:
        try:
            prompts.append(renderer.prompt(row["prompt"], row["tools"]))
        except UnrenderableSample as err:
            refused.append({"id": row["id"], "elapse_level": row["elapse_level"], "reason": str(err)})
            continue
        kept.append(row)
    return kept, prompts, refused


def detect(outputs: list[str | None], family: str, protocol: str) -> tuple[list, list]:
    """Each output's tool-call attempt and whether it is empty (left out under `paper`); None for a failed one."""
    attempted = [is_tool_call(text, family, protocol) if text is not None else None for text in outputs]
    # paper: empty or [ERROR] outputs leave the denominator, as the authors' get_metric.py drops them
    left_out = paper_dropped if protocol == "paper" else is_empty_output
    empty = [left_out(text, family) if text is not None else None for text in outputs]
    return attempted, empty


def evaluate_tictoc(
    backend,
    rows: list[dict],
    renderer: PromptRenderer | None = None,
    *,
    family: str | None = None,
    max_new_tokens: int = 24,
    desc: str = "TicToc",
    cache_dir: str | Path | None = None,
    protocol: str = "timealign",
) -> dict:
    """Score one backend on prepared pair rows (the `prompt` and `tools` columns; labels from `label`).

    `renderer` renders the prompts (default: the recipe defaults, `PromptRenderer.for_data` on a default
    `DataSection`: timestamps on, no elapsed badge, no system-prompt addition). Generation goes through
    `cached_generate`: finished samples are cached in `cache_dir/tictoc.jsonl` (a killed run resumes), and a sample
    whose generation fails is listed under `errors` (and in its sample record) and left out of the metrics instead of
    stopping the run. `protocol` decides tool-call detection and whether empty outputs count (`tool_calls` module
    table); empty outputs are counted (`empty_outputs`) under every protocol. Returns the report (overall NAR and
    attempt rates, breakdowns) plus per-sample records.
    """
    tokenizer = backend.tokenizer
    family = family or detect_family(tokenizer.chat_template)
    renderer = renderer or PromptRenderer.for_data(tokenizer, DataSection())
    rows, prompts, unrenderable = renderable(renderer, rows)
    if unrenderable:
        logger.warning(
            "%d of %d samples cannot be rendered in the %s protocol and are not scored (the authors' "
            "code skipped them too); first: %s: %s",
            len(unrenderable),
            len(rows) + len(unrenderable),
            renderer.protocol,
            unrenderable[0]["id"],
            unrenderable[0]["reason"],
        )
    gens = cached_generate(
        backend, prompts, suite="tictoc", cache_dir=cache_dir, max_new_tokens=max_new_tokens, desc=desc
    )
    outputs = gens.outputs
    attempted, empty = detect(outputs, family, protocol)
    scored = [i for i, text in enumerate(outputs) if text is not None]
    report = tictoc_report(
        [rows[i] for i in scored], [attempted[i] for i in scored], [empty[i] for i in scored], protocol
    )
    resolve = getattr(backend, "resolve_sampling", None)
    report["settings"] = {
        "timestamps": renderer.timestamps,
        "elapsed": renderer.elapsed and renderer.timestamps,
        "elapsed_separator": getattr(renderer, "elapsed_separator", "direct") if renderer.elapsed else "direct",
        "prompt_mode": renderer.prompt_mode,
        "family": family,
        "prompt_protocol": renderer.protocol,
        "protocol": protocol,
        "backend": backend.name,
        "max_new_tokens": max_new_tokens,
        "sampling": resolve() if resolve else None,
    }
    report["generation"] = gens.summary()
    report["unrenderable"] = unrenderable
    report["errors"] = [
        {"id": rows[i]["id"], "elapse_level": rows[i]["elapse_level"], "error": err}
        for i, err in sorted(gens.errors.items())
    ]
    report["samples"] = []
    for i, (r, called, is_empty, text) in enumerate(zip(rows, attempted, empty, outputs, strict=True)):
        sample = {
            "id": r["id"],
            "elapse_level": r["elapse_level"],
            "label": r["label"],
            "tool_call": called,
            "empty_output": is_empty,
            "output": text,
        }
        if i in gens.errors:
            sample["error"] = gens.errors[i]
        report["samples"].append(sample)
    return report


def heldout_sample(recipe) -> tuple[list[dict], dict]:
    """The recipe's held-out split of prepared pairs (prepared first if needed) and the identity of the data
    (`timealign.data.identity`); with `eval.max_samples` a seeded sample stratified by label and spread over the
    scenarios (`timealign.data.sampling`), the same rows live evaluation scores with `live_eval.max_samples`."""
    from timealign.data.identity import prepared_identity
    from timealign.data.pairs import load_prepared
    from timealign.data.prepared import ensure_prepared
    from timealign.data.sampling import sample_pairs

    folder = ensure_prepared(recipe, kind="pairs")
    data = load_prepared(folder)
    if recipe.data.eval_split not in data:
        raise ValueError(f"prepared data has no {recipe.data.eval_split!r} split (has: {', '.join(data)})")
    rows, info = sample_pairs(data[recipe.data.eval_split].to_list(), recipe.eval.max_samples, recipe.data.seed)
    identity = prepared_identity(recipe.data, folder, "pairs", recipe.data.eval_split, rows, info)
    identity["from_recipe"] = True
    left_out = not_scored(folder, recipe.data.eval_split)
    if left_out is not None:
        identity["left_out"] = left_out
    return rows, identity


def not_scored(folder, split: str) -> dict | None:
    """The release rows of `split` that data prep left out by the release's retention rule (the hub release: the
    rows get_metric.py does not score), from the prepared folder's manifest; None when the data has no such rule."""
    import json

    from timealign.data.fingerprint import MANIFEST

    left_out = json.loads((Path(folder) / MANIFEST).read_text()).get("left_out")
    if left_out is None:
        return None
    reasons = left_out["by_split"].get(split, {})
    return {"rows": sum(reasons.values()), "by_reason": reasons, "rule": left_out["rule"]}


def heldout_rows(recipe) -> list[dict]:
    """The rows of `heldout_sample`."""
    return heldout_sample(recipe)[0]


def warn_undefined(report: dict, where: str) -> list[str]:
    """A logged warning (and a report note) for each rate the scored samples leave undefined, naming why."""
    from timealign.data.sampling import undefined_tictoc_metrics

    labels = [s["label"] for s in report.get("samples") or [] if "error" not in s]
    notes = [
        f"{metric} is undefined on {where}: {why}"
        for metric, why in undefined_tictoc_metrics(report["overall"], labels).items()
    ]
    for note in notes:
        logger.warning(note)
    return notes


@dataclass
class TicTocOptions:
    detection: str | None = opt(
        None,
        "how a reply counts as a tool-call attempt: timealign (pattern by pattern, see "
        "timealign/render/tool_calls.py) | paper (the TicToc authors' signature "
        "match; empty outputs leave the denominator); None: the recipe's "
        "data.protocol. Prompts follow data.protocol, not this",
    )


def run_tictoc_suite(backend, ctx: EvalContext) -> dict:
    recipe = ctx.recipe
    family = ctx.family
    clock = isinstance(backend, ClockBackend)
    if clock:  # the elapsed-time rule: the samples' times in, chat replies out (timealign/backends/clock.py)
        if family not in (None, "api"):
            raise ValueError(f"eval.backend=clock returns chat replies, detected as family api; got family={family}")
        family = "api"
        renderer = ClockRequestRenderer()
    elif isinstance(backend, ChatBackend):  # API models: chat requests in, reply messages out (tictoc/requests.py)
        if family not in (None, "api"):
            raise ValueError(f"eval.backend=chat returns chat messages, detected as family api; got family={family}")
        family = "api"
        renderer = ChatRequestRenderer.for_data(recipe.data, timestamps=ctx.timestamps, prompt_mode=ctx.prompt_mode)
    else:
        renderer = PromptRenderer.for_data(
            backend.tokenizer,
            recipe.data,
            timestamps=ctx.timestamps,
            prompt_mode=ctx.prompt_mode,
            family=family,
            reasoning=recipe.eval.reasoning,
        )
    # The rule renders no prompt: its replies are read as the recipe's data.protocol says, as a model's would be.
    default_detection = getattr(recipe.data, "protocol", "timealign") if clock else renderer.protocol
    detection = (ctx.options.detection if ctx.options is not None else None) or default_detection
    trained = None if clock else trained_prompt_protocol(ctx.checkpoint)
    if trained is not None and trained != renderer.protocol:
        logger.warning(
            "the checkpoint %s was trained on data.protocol=%s prompts but is evaluated with data.protocol=%s "
            "prompts: its scores are on a prompt format it never saw (pass data.protocol=%s to evaluate "
            "it as trained)",
            ctx.checkpoint,
            trained,
            renderer.protocol,
            trained,
        )
    if detection not in PROTOCOLS:
        raise ValueError(f"tictoc.detection must be one of {', '.join(PROTOCOLS)}, got {detection!r}")
    rows, identity = heldout_sample(recipe)
    report = evaluate_tictoc(
        backend,
        rows,
        renderer,
        family=family,
        max_new_tokens=recipe.eval.max_new_tokens,
        cache_dir=None if clock else suite_cache_dir(ctx),  # the rule is recomputed: a changed rule never reads old
        protocol=detection,
    )
    report["data"] = identity
    report["notes"] = warn_undefined(report, f"the {identity['label']} sample")
    report["settings"]["trained_prompt_protocol"] = trained
    if clock:
        report["settings"]["clock_seconds"] = backend.seconds
        report["settings"]["rule"] = backend.rule
    else:  # what the elapsed-time rule scores on the very samples this model's rates are over (it needs no model)
        report["clock_rule"] = clock_on_same_samples(
            report,
            rows,
            recipe.eval.clock_seconds,
            resamples=recipe.eval.bootstrap,
            confidence=recipe.eval.confidence,
        )
    # beside the global rule, for a model's report and the rule's own: one threshold per class, fit on train
    report["volatility_rule"] = volatility_reference(recipe, report, rows)
    report["markdown"] = markdown_summary(report)
    return report


def same_samples(report: dict, rows: list[dict]) -> list[dict]:
    """The rows of the samples `report`'s rates count (not failed; under `paper` not empty either), in row order."""
    protocol = report["settings"]["protocol"]
    counted = {
        (s["id"], s["elapse_level"])
        for s in report["samples"]
        if "error" not in s and s["tool_call"] is not None and not (protocol == "paper" and s["empty_output"])
    }
    same = [r for r in rows if (r["id"], r["elapse_level"]) in counted]
    if len(same) != len(counted):
        raise ValueError(
            f"the report counts {len(counted)} samples but {len(same)} rows match them by id and elapse level: "
            "the rows are not the ones the report scored"
        )
    return same


def score_rule_replies(
    rows: list[dict], outputs: list[str], protocol: str, *, resamples: int, confidence: float
) -> dict:
    """A rule's replies to `rows` detected and scored by the same code as a model's (`detect`, `tictoc_report`,
    under `protocol`), with a bootstrap interval of the same kind (`resamples` 0: none)."""
    from timealign.eval.bootstrap import SEED, bootstrap_intervals

    attempted, empty = detect(outputs, "api", protocol)
    result = tictoc_report(rows, attempted, empty, protocol)
    if resamples > 0:
        samples = [
            {"id": r["id"], "elapse_level": r["elapse_level"], "label": r["label"], "tool_call": a, "empty_output": e}
            for r, a, e in zip(rows, attempted, empty, strict=True)
        ]
        units = tictoc_units({"settings": {"protocol": protocol}, "samples": samples})
        result["intervals"] = bootstrap_intervals(units, resamples=resamples, confidence=confidence, seed=SEED)
    return result


def clock_on_same_samples(
    report: dict, rows: list[dict], seconds: float, *, resamples: int = 1000, confidence: float = 0.95
) -> dict:
    """The elapsed-time rule (`timealign.backends.clock`) scored on exactly the samples `report`'s rates are over.

    The samples the model's rates count (not failed; under `paper` not empty either) are taken from `rows` (the
    prepared pairs the report scored), the rule's replies are detected and scored by the same code as the model's
    (`detect`, `tictoc_report`, under the report's detection protocol), with a bootstrap interval of the same kind
    (`resamples` 0: none). Returns the rule, its threshold, `overall` and the breakdowns (and `intervals`).
    """
    protocol = report["settings"]["protocol"]
    same = same_samples(report, rows)
    rule = ClockBackend(seconds)
    outputs = rule.generate(tictoc_prompts(ClockRequestRenderer(), same))
    result = {"rule": rule.rule, "seconds": rule.seconds, "detection": protocol}
    result.update(score_rule_replies(same, outputs, protocol, resamples=resamples, confidence=confidence))
    return result


def volatility_on_same_samples(
    report: dict, rows: list[dict], fit: dict, *, resamples: int = 1000, confidence: float = 0.95
) -> dict:
    """The volatility-aware reference (`timealign.suites.tictoc.volatility`, fit `fit` on the train split) scored on
    exactly the samples `report`'s rates are over, as `clock_on_same_samples` scores the global rule: its replies
    are the rule's at each sample's class threshold. Returns the thresholds, the classes that took the fallback, what
    it was fit on and its train NAR, `overall` and the breakdowns (and `intervals`)."""
    from timealign.suites.tictoc.volatility import READS, class_order, volatility_replies

    protocol = report["settings"]["protocol"]
    same = same_samples(report, rows)
    requests = tictoc_prompts(ClockRequestRenderer(), same)
    outputs = volatility_replies(requests, [r["sensitivity"] for r in same], fit)
    result = {
        "rule": "a tool call when the last tool result is older than its sensitivity class's threshold, or when "
        "there is none",
        "reads": READS,
        "thresholds": fit["thresholds"],
        "fallback_seconds": fit["fallback"],
        "fallback_classes": sorted({r["sensitivity"] for r in same} - set(fit["thresholds"]), key=class_order),
        "fit_on": fit["fit_on"],
        "fit": {"classes": fit["classes"], "fallback": fit["fallback_fit"], "train": fit["train"]},
        "detection": protocol,
    }
    result.update(score_rule_replies(same, outputs, protocol, resamples=resamples, confidence=confidence))
    return result


def volatility_reference(recipe, report: dict, rows: list[dict]) -> dict | None:
    """The reference for `report` (None when the recipe scores its own train split: it would be fit on the samples
    it scores), with a report note saying why it is absent."""
    from timealign.data.prepared import ensure_prepared
    from timealign.suites.tictoc.volatility import fit_for_recipe

    if recipe.data.eval_split == recipe.data.train_split:
        report["notes"].append(
            f"no volatility-aware reference: it is fit on data.train_split={recipe.data.train_split}, the split "
            "scored here, and never on the samples it scores"
        )
        return None
    fit = fit_for_recipe(recipe, ensure_prepared(recipe, kind="pairs"))
    return volatility_on_same_samples(
        report, rows, fit, resamples=recipe.eval.bootstrap, confidence=recipe.eval.confidence
    )


SUITE = Suite(
    "tictoc",
    "TicToc tool-call alignment (NAR, attempt rates) on the recipe's held-out split",
    run_tictoc_suite,
    options=TicTocOptions,
)


def markdown_summary(report: dict) -> str:
    o = report["overall"]
    paper = (report.get("settings") or {}).get("protocol") == "paper"
    empty_note = "left out of the rates, paper protocol" if paper else "scored as no call"

    def fmt(v):
        return "n/a" if v is None else f"{v:.3f}"

    settings = report.get("settings") or {}
    lines = [
        "| metric | value |",
        "|---|---|",
        f"| prompts / detection protocol | {settings.get('prompt_protocol', 'timealign')} / "
        f"{settings.get('protocol', 'timealign')} |",
        *(
            [f"| data | {report['data']['label']} ({report['data'].get('sampling', 'all')}) |"]
            if report.get("data")
            else []
        ),
        f"| samples | {o['n']} |",
        f"| NAR | {fmt(o['nar'])} |",
        f"| attempt rate, prefer-Tool | {fmt(o['attempt_rate_prefer_tool'])} |",
        f"| attempt rate, prefer-noTool | {fmt(o['attempt_rate_prefer_no_tool'])} |",
        f"| tool calls | {o['tool_calls']} |",
        f"| empty outputs ({empty_note}) | {o.get('empty_outputs', 0)} |",
    ]
    left_out = (report.get("data") or {}).get("left_out")
    if left_out is not None:
        reasons = ", ".join(f"{k}: {v}" for k, v in left_out["by_reason"].items()) or "none"
        lines.append(f"| release rows of the split not scored (its retention rule) | {left_out['rows']} ({reasons}) |")
    if settings.get("rule"):
        lines.insert(3, f"| decided by (no model) | the elapsed-time rule: {settings['rule']} |")

    def with_interval(block: dict) -> str:
        interval = ((block.get("intervals") or {}).get("metrics") or {}).get("nar")
        shown = fmt(block["overall"]["nar"])
        if interval is not None and block["overall"]["nar"] is not None:
            shown += f" [{interval[0]:.3f}, {interval[1]:.3f}]"
        return shown

    def attempt_rates(block: dict) -> str:
        o = block["overall"]
        return f"{fmt(o['attempt_rate_prefer_tool'])} / {fmt(o['attempt_rate_prefer_no_tool'])}"

    rule = report.get("clock_rule")
    if rule:
        lines += [
            f"| NAR of the elapsed-time rule on these {rule['overall']['n']} samples ({rule['rule']}) | "
            f"{with_interval(rule)} |",
            f"| its attempt rates, prefer-Tool / prefer-noTool | {attempt_rates(rule)} |",
        ]
    reference = report.get("volatility_rule")
    if reference:
        from timealign.suites.tictoc.volatility import describe_fit

        lines += [
            f"| NAR of the volatility-aware reference on these {reference['overall']['n']} samples "
            f"({describe_fit(reference)}; {reference['reads']}) | {with_interval(reference)} |",
            f"| its attempt rates, prefer-Tool / prefer-noTool | {attempt_rates(reference)} |",
        ]
    failed = len(report.get("errors") or [])
    if failed:
        lines.append(f"| failed samples (not scored; see `errors`) | {failed} |")
    refused = len(report.get("unrenderable") or [])
    if refused:
        lines.append(f"| samples the prompt protocol cannot render (not scored; see `unrenderable`) | {refused} |")
    lines.append("")
    lines += [f"- {note}" for note in report.get("notes") or []] + ([""] if report.get("notes") else [])
    for group in ("by_sensitivity", "by_elapse_level", "by_length"):
        lines += [
            f"**{group.replace('_', ' ')}**",
            "",
            "| bucket | n | NAR | attempt (Tool) | attempt (noTool) |",
            "|---|---|---|---|---|",
        ]
        for bucket, m in report[group].items():
            lines.append(
                f"| {bucket} | {m['n']} | {fmt(m['nar'])} | {fmt(m['attempt_rate_prefer_tool'])} | "
                f"{fmt(m['attempt_rate_prefer_no_tool'])} |"
            )
        lines.append("")
    return "\n".join(lines)
