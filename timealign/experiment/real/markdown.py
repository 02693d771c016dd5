"""real.md: the report's text, made from real.json alone."""

from __future__ import annotations

from timealign.eval.bootstrap import fmt_interval
from timealign.experiment.real.arms import ARMS
from timealign.experiment.real.options import READABLE_CURVE_SAMPLES
from timealign.experiment.report import fmt


def before_after(before: dict, after: dict, key: str) -> str:
    """A TIMER table cell: `before -> after [interval of after]`."""
    return f"{fmt(before[key])} -> {fmt(after[key])} {fmt_interval(after.get('intervals', {}).get(key))}"


def rescore_markdown(summary: dict) -> list[str]:
    """A rescored run's lines (`rescore=`): where its models were trained and first scored, and per arm and seed the
    decisions made alike."""
    r = summary.get("rescore")
    if not r:
        return []
    lines = ["", f"Scored again (`rescore=`): the models of `{r['from']}`, trained and first scored there with "
             f"eval.backend={r['eval_backend']} on {r['device']}. The same decision as there:", ""]  # fmt: skip
    for key, a in r["agreement"].items():
        shown = ", ".join(a["differ"][:10]) + (" ..." if len(a["differ"]) > 10 else "")
        lines.append(f"- {key}: {a['same']} of {a['of']} samples" + (f" (differ: {shown})" if a["differ"] else ""))
    return lines


def cell_order(key: str) -> tuple:
    """high/small, high/medium, high/large, medium/small, ...: the registry's classes, then the gap levels."""
    from timealign.suites.tictoc.metrics import LEVEL_NAMES
    from timealign.suites.tictoc.volatility import class_order

    sensitivity, level = key.rsplit("/", 1)
    return (*class_order(sensitivity), LEVEL_NAMES.index(level) if level in LEVEL_NAMES else len(LEVEL_NAMES), level)


def cell_text(c: dict | None) -> str:
    """`NAR (calls on prefer-Tool / prefer-noTool)` for a cell holding both labels; `calls R` for a cell holding one
    (the n column says which); n/a where the cell holds no sample."""
    if c is None:
        return "n/a"
    tool, no_tool = c["attempt_rate_prefer_tool"], c["attempt_rate_prefer_no_tool"]
    if tool is None or no_tool is None:
        return "n/a" if tool is None and no_tool is None else f"calls {fmt(no_tool if tool is None else tool)}"
    return f"{fmt(c['nar'])} ({fmt(tool)} / {fmt(no_tool)})"


def per_cell_markdown(summary: dict) -> list[str]:
    """The first tables (issue 49): per arm, NAR and calls per sensitivity class x gap level for the arm's seeds, the
    elapsed-time rule and the volatility-aware reference on the same samples. Only where real.json has the cells
    (summaries written before them print none)."""
    from timealign.suites.tictoc.volatility import describe_fit

    arms = {arm: by_seed for arm, by_seed in summary["arms"].items()
            if any(a.get("by_cell") for a in by_seed.values())}  # fmt: skip
    if not arms:
        return []
    firsts = [next(iter(by_seed.values())) for by_seed in arms.values()]
    clock = next((a["clock_rule"] for a in firsts if a.get("clock_rule")), None)
    reference = next((a["volatility_rule"] for a in firsts if a.get("volatility_rule")), None)
    lines = [
        "",
        "## Per sensitivity class and gap level: each arm, the elapsed-time rule, the volatility-aware reference",
        "",
        "n: the cell's samples (prefer-Tool / prefer-noTool). A cell holding both labels: NAR (calls on prefer-Tool "
        "/ prefer-noTool); a cell holding one: its call rate (right on prefer-Tool, wrong on prefer-noTool).",
    ]
    if clock:
        lines[-1] += f" The rule: {clock['rule']}; NAR {fmt(clock['nar'])} {fmt_interval(clock['nar_interval'])}."
    if reference:
        lines[-1] += (f" The reference: {describe_fit(reference)}; NAR {fmt(reference['nar'])} "
                      f"{fmt_interval(reference['nar_interval'])}. It {reference['reads']}.")  # fmt: skip
    shown = {arm: by_seed for arm, by_seed in arms.items() if arm != "clock"} or arms  # clock: the rule's column
    for arm, by_seed in shown.items():
        seeds = list(by_seed) if ARMS[arm].trained else list(by_seed)[:1]  # untrained: one number for every seed
        first = by_seed[seeds[0]]
        columns = [] if arm == "clock" else [(f"seed {seed}", by_seed[seed]) for seed in seeds]
        if first.get("clock_rule"):
            columns.append((f"the rule ({first['clock_rule']['seconds']:g} s)", first["clock_rule"]))
        if first.get("volatility_rule"):
            columns.append(("the reference", first["volatility_rule"]))
        own = first.get("by_cell") or {}  # a merge may join a run made before the cells existed
        keys = sorted({k for _, c in columns for k in c.get("by_cell") or {}} | set(own), key=cell_order)
        lines += ["", f"**{arm}**: {summary['settings']['arms'][arm]}", ""]
        lines += ["| class / gap | n | " + " | ".join(name for name, _ in columns) + " |",
                  "|---" * (len(columns) + 2) + "|"]  # fmt: skip
        for key in keys:
            c = own.get(key) or next((b["by_cell"][key] for _, b in columns if key in (b.get("by_cell") or {})), None)
            n = f"{c['n']} ({c['tp'] + c['fn']} / {c['tn'] + c['fp']})" if c else "n/a"
            cells = [cell_text((block.get("by_cell") or {}).get(key)) for _, block in columns]
            lines.append(f"| {key.replace('/', ' / ')} | {n} | " + " | ".join(cells) + " |")
        lines.append(f"| all | {first['n']} | " + " | ".join(cell_text(block) for _, block in columns) + " |")
    return lines


def markdown_report(summary: dict, picture: str = "real.png") -> str:
    """real.md, made from real.json alone (a test checks the committed pair agrees)."""
    s = summary["settings"]
    o = s["options"]
    data = s.get("data") or {}
    where = f" on {o['device']}" if o.get("device") else ""  # summaries before the GPU path have no device
    lines = [
        "# Does timealign teach a real model time? (`make experiment-real`)",
        "",
        f"Model `{o['base']}` (SmolLM2-135M-Instruct), recipe `{s['recipe']}`; held-out: {data.get('label', 'n/a')}, "
        f"{summary['test_samples']} samples ({'the whole split' if not o['eval_samples'] else 'a stratified sample'}, "
        f"evaluated with eval.backend={o['eval_backend']}{where}). Trained arms: {o['train_pairs']} label-balanced "
        f"v1 train pairs, {s['steps']} steps of {o['batch_pairs']}, lr {o['learning_rate']:g}, beta {o['beta']:g}, "
        f"full fine-tuning in fp32; seeds {s['seeds']}. Total {summary['seconds']:.0f} s."
        + (f" Trained arms' overrides: `{o['overrides']}`." if o.get("overrides") else ""),
        *rescore_markdown(summary),
        *per_cell_markdown(summary),
        "",
        "## Held-out NAR and attempt rates per arm",
        "",
        "| arm | seed | NAR [95% CI] | calls, prefer-Tool [95% CI] | calls, prefer-noTool [95% CI] |",
        "|---|---|---|---|---|",
    ]
    for arm, by_seed in summary["arms"].items():
        for seed, a in by_seed.items():
            lines.append(
                f"| {arm}: {s['arms'][arm]} | {seed} | {fmt(a['nar'])} {fmt_interval(a['nar_interval'])} | "
                f"{fmt(a['attempt_rate_prefer_tool'])} {fmt_interval(a['attempt_rate_prefer_tool_interval'])} | "
                f"{fmt(a['attempt_rate_prefer_no_tool'])} {fmt_interval(a['attempt_rate_prefer_no_tool_interval'])} |"
            )
    forms = []
    for arm, by_seed in summary["arms"].items():
        for seed, a in by_seed.items():
            f = a.get("call_forms")  # absent from summaries written before it was counted
            if f and f["calls"] and f["tagged"] is not None:
                forms.append(f"- {arm}, seed {seed}: {f['calls']} calls, {f['tagged']} tagged, "
                             f"{f['untagged']} untagged")  # fmt: skip
    if forms:
        lines += ["", "How the counted calls are written (tagged: the `<tool_call>` form trained on; untagged: "
                  "call-shaped JSON without it, e.g. the system prompt's tool-list shape):", "", *forms]  # fmt: skip
    lines += across_seeds_markdown(summary)
    lines += ["", "## Paired differences (the same held-out samples)", ""]
    lines += ["| comparison | NAR a / b | difference [95% CI] | outside noise |", "|---|---|---|---|"]
    for key, d in summary["differences"].items():
        lines.append(
            f"| {key} | {fmt(d['after'])} / {fmt(d['before'])} | {d['difference']:+.3f} "
            f"{fmt_interval(d['interval'])} | {d['outside_noise']} |"
        )
    for group, title in (("by_elapse_level", "gap level"), ("by_sensitivity", "sensitivity")):
        keys = sorted({k for by_seed in summary["arms"].values() for a in by_seed.values() for k in a[group]})
        lines += ["", f"## By {title}: NAR (calls on prefer-Tool / prefer-noTool)", ""]
        lines += ["| arm | seed | " + " | ".join(keys) + " |", "|---" * (len(keys) + 2) + "|"]
        for arm, by_seed in summary["arms"].items():
            for seed, a in by_seed.items():
                cells = [
                    f"{fmt(a[group][k]['nar'])} ({fmt(a[group][k]['attempt_rate_prefer_tool'])} / "
                    f"{fmt(a[group][k]['attempt_rate_prefer_no_tool'])}), n={a[group][k]['n']}"
                    if k in a[group]
                    else "n/a"
                    for k in keys
                ]
                lines.append(f"| {arm} | {seed} | " + " | ".join(cells) + " |")
    if summary["curves"]:
        lines += ["", f"## Learning curves: NAR on {o['curve_samples']} held-out samples while training", ""]
        if o["curve_samples"] < READABLE_CURVE_SAMPLES:
            lines += [
                f"Fewer than {READABLE_CURVE_SAMPLES} samples a point: these points are noise (16 untrained samples "
                "read 0.654 where the whole split reads 0.500).",
                "",
            ]
        for key, points in summary["curves"].items():
            lines.append(f"- {key}: " + ", ".join(f"step {p['step']}: {fmt(p['nar'])}" for p in points))
    train = {k: r["train"] for k, r in summary["runs"].items() if r.get("train")}
    if train:
        lines += ["", "## Training (last logged step)", "", "| run | loss | reward accuracy | reward margin |"]
        lines.append("|---|---|---|---|")
        for key, t in train.items():
            lines.append(
                f"| {key} | {fmt(t.get('loss'))} | {fmt(t.get('rewards/accuracies'))} | "
                f"{fmt(t.get('rewards/margins'))} |"
            )
    timer = summary.get("timer")
    if timer:
        lines += ["", "## TIMER SFT of smol (recipe smol-timer)", ""]
        lines += [
            "Before -> after training, every turn of each held-out dialog scored (delayed = the positive class); "
            "the interval is the after-training number's (95% bootstrap over dialogs). RMSLE in minutes; the target "
            "turn is the one Table 2 of the TimelyChat paper scores.",
            "",
            "| held-out dialogs | turns (delayed) | delay F1 | FPR | RMSLE, every turn | RMSLE, target turn |",
            "|---|---|---|---|---|---|",
        ]
        for name in ("synthetic", "timelychat_sample"):
            b, a = timer[name]["before"], timer[name]["after"]
            cells = [before_after(b, a, key) for key in ("f1", "fpr", "rmsle", "rmsle_target")]
            lines.append(f"| {name} | {a['cases']} ({a['delayed']}) | " + " | ".join(cells) + " |")
        sec, train = timer["seconds"], timer["train"]
        lines += [
            "",
            f"Training: {train['steps']} steps, last loss {fmt(train.get('loss'))} (time "
            f"{fmt(train.get('loss_time'))}, response {fmt(train.get('loss_response'))}). Seconds: "
            f"{sec['before']} scoring the base, {sec['train']} training, {sec['after']} scoring the trained model.",
        ]
    lines += ["", f"![NAR and attempt rates per arm]({picture})", ""]
    return "\n".join(lines)


def across_seeds_markdown(summary: dict) -> list[str]:
    """The across-seed tables (when some arm ran on two or more seeds) and, for a merge, the runs merged."""
    spread = summary.get("across_seeds")  # absent from summaries written before seeds were summarised
    if not spread or not any(len(a["seeds"]) > 1 for a in spread["arms"].values()):
        return []
    lines = ["", "## Across seeds", "", "An untrained arm (base, clock) is one number whatever the seed.", ""]
    lines += ["| arm | seeds | NAR per seed | mean | min - max |", "|---|---|---|---|---|"]
    for arm, a in spread["arms"].items():
        per_seed = ", ".join(f"{fmt(v)} (s{seed})" for seed, v in zip(a["seeds"], a["values"]))
        lines.append(f"| {arm} | {len(a['seeds'])} | {per_seed} | {fmt(a['mean'])} | {fmt(a['min'])} - "
                     f"{fmt(a['max'])} |")  # fmt: skip
    lines += ["", "| comparison | difference per seed [95% CI] | mean | min - max | every seed outside noise | "
              "same sign on every seed |", "|---|---|---|---|---|---|"]  # fmt: skip
    for name, c in spread["differences"].items():
        per_seed = "; ".join(
            f"s{seed}: {v:+.3f} {fmt_interval(ci)}" if v is not None else f"s{seed}: n/a"
            for seed, v, ci in zip(c["seeds"], c["differences"], c["intervals"])
        )
        mean = "n/a" if c["mean"] is None else f"{c['mean']:+.3f}"
        low_high = "n/a" if c["min"] is None else f"{c['min']:+.3f} - {c['max']:+.3f}"
        lines.append(f"| {name} | {per_seed} | {mean} | {low_high} | {c['every_seed_outside_noise']} | "
                     f"{c['same_sign']} |")  # fmt: skip
    sources = summary["settings"].get("sources")
    parallel = summary["settings"].get("parallel")
    if sources and parallel:
        own = parallel["seconds_of_the_runs"]
        lines += ["", f"Run as {parallel['units']} processes, {parallel['processes']} at a time (`parallel=`), and "
                  f"merged: {summary['seconds']:.0f} s from the first start to the last end, {own:.0f} s on the "
                  "runs' own clocks (each slowed by the sharing); differences between arms of different runs are "
                  "paired from their per-sample decisions:", ""]  # fmt: skip
    elif sources:
        lines += ["", "Merged from these runs (`merge=`); differences between arms of different runs are paired from "
                  "their per-sample decisions:", ""]  # fmt: skip
    for src in sources or ():
        lines.append(f"- {src['run']}: arms {', '.join(src['arms'])}, seeds {src['seeds']}, on {src['device']}, "
                     f"{src['seconds'] or 0:.0f} s")  # fmt: skip
    return lines
