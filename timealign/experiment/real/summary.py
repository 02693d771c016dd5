"""The numbers of a run: per arm and seed its NAR, attempt rates, breakdowns and decisions, the paired differences,
the curves and the settings (`analyse`, the content of real.json)."""

from __future__ import annotations

from timealign.experiment.real.arms import ARMS, COMPARISONS, RECIPE, TRAINED
from timealign.experiment.real.options import RealOptions
from timealign.experiment.seeds import across_seeds, decisions, sample_keys

RATES = ("n", "nar", "attempt_rate_prefer_tool", "attempt_rate_prefer_no_tool")


def cells(block: dict, keep: tuple[str, ...] = RATES) -> dict:
    return {name: {k: row.get(k) for k in keep} for name, row in block.items()}


def rates(block: dict) -> dict:
    """NAR and attempt rates with their intervals, and the cells per sensitivity class x gap level (with the
    confusion counts: which labels a cell holds), of a TicToc report or of a rule's block in it."""
    intervals = (block.get("intervals") or {}).get("metrics") or {}
    return {
        **{k: block["overall"][k] for k in RATES},
        "nar_interval": intervals.get("nar"),
        "attempt_rate_prefer_tool_interval": intervals.get("attempt_rate_prefer_tool"),
        "attempt_rate_prefer_no_tool_interval": intervals.get("attempt_rate_prefer_no_tool"),
        "by_cell": cells(block.get("by_sensitivity_and_level") or {}, (*RATES, "tp", "fn", "tn", "fp")),
    }


def rules(report: dict) -> dict:
    """The elapsed-time rule and the volatility-aware reference on the samples of `report` (issue 49): for a model,
    its report's `clock_rule` and `volatility_rule`; for the clock arm, the report itself is the rule. Absent from
    reports made before they existed (then None)."""
    settings = report.get("settings") or {}
    if settings.get("backend") == "clock":
        clock = {"rule": settings.get("rule"), "seconds": settings.get("clock_seconds"), **rates(report)}
    else:
        block = report.get("clock_rule")
        clock = {"rule": block["rule"], "seconds": block["seconds"], **rates(block)} if block else None
    block = report.get("volatility_rule")
    reference = None
    if block:
        keep = ("thresholds", "fallback_seconds", "fallback_classes", "fit_on", "reads")
        reference = {**{k: block[k] for k in keep}, **rates(block)}
    return {"clock_rule": clock, "volatility_rule": reference}


def arm_numbers(report: dict, keys: list[str]) -> dict:
    """NAR with its interval, attempt rates per label, the breakdowns by gap level and sensitivity, and per
    sensitivity class x gap level the arm's, the elapsed-time rule's and the volatility-aware reference's numbers."""
    numbers = rates(report)
    return {
        **{k: v for k, v in numbers.items() if k != "by_cell"},
        "by_elapse_level": cells(report.get("by_elapse_level") or {}),
        "by_sensitivity": cells(report.get("by_sensitivity") or {}),
        "by_cell": numbers["by_cell"],
        **rules(report),
        "call_forms": call_forms(report),
        "decisions": decisions(report, keys),  # in the order of the summary's `samples`
    }


def call_forms(report: dict) -> dict:
    """How the counted calls are written: `tagged` with the family's call marker (smol: `<tool_call>`, as trained),
    or `untagged` (call-shaped JSON without it, e.g. `{"type": "function", "function": {...}}`, the shape of the
    system prompt's tool list). A model that only echoes its tool list is counted as calling; this tells them apart."""
    import re

    from timealign.render.families import FAMILIES

    family = FAMILIES.get(report["settings"].get("family") or "")
    calls = [s["output"] for s in report["samples"] if s.get("tool_call")]
    if family is None:
        return {"calls": len(calls), "tagged": None, "untagged": None}
    tagged = sum(bool(re.search(family.call_markers, text)) for text in calls)
    return {"calls": len(calls), "tagged": tagged, "untagged": len(calls) - tagged}


def analyse(reports, runs, opts: RealOptions, arms, seeds, steps) -> dict:
    """The summary: per arm and seed its numbers, the paired differences, the curves, the settings."""
    from timealign.eval.bootstrap import paired_differences, suite_units

    first = reports[arms[0]][seeds[0]]
    keys = sample_keys(first)["keys"]
    differences = {}
    for a, b in COMPARISONS:
        if a in reports and b in reports:
            for seed in seeds:
                d = paired_differences(
                    suite_units(reports[b][seed], "tictoc"),
                    suite_units(reports[a][seed], "tictoc"),
                    resamples=opts.resamples,
                )["metrics"]["nar"]
                differences[f"{a} - {b}, seed {seed}"] = {
                    k: d[k] for k in ("before", "after", "difference", "interval", "outside_noise")
                }
    summary = {
        "settings": {
            "arms": {a: ARMS[a].description for a in arms},
            "seeds": list(seeds),
            "steps": steps,
            "options": {k: getattr(opts, k) for k in opts.__dataclass_fields__},
            "recipe": RECIPE,
            "data": first.get("data"),
        },
        "test_samples": first["overall"]["n"],
        "samples": sample_keys(first),
        "arms": {a: {str(s): arm_numbers(reports[a][s], keys) for s in seeds} for a in arms},
        "differences": differences,
        "curves": {
            key: [{"step": p["step"], "nar": p.get("nar")} for p in facts.get("curve") or []]
            for key, facts in runs.items()
            if facts.get("curve")
        },
        "runs": runs,
    }
    summary["across_seeds"] = across_seeds(summary, TRAINED)
    return summary
