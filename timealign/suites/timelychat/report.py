"""The TimelyChat suite's report as markdown: target-turn timing metrics first (the numbers comparable with the
TimelyChat paper's Table 2), all-turn timing metrics beside them, then the response metrics, then the dialog-level
section when it ran."""

from __future__ import annotations

__all__ = ["markdown_summary", "dialog_markdown"]


def markdown_summary(report: dict) -> str:
    """The report as markdown: the target-turn timing metrics first (comparable with TimelyChat Table 2), the
    all-turn metrics beside them, then the response metrics."""
    if "timing" not in report:  # level=dialog
        lines = dialog_markdown(report["dialog_level"]) if report.get("dialog_level") else []
        if report.get("notes"):
            lines += ["", "Notes:", ""] + [f"- {note}" for note in report["notes"]]
        return "\n".join(lines) + "\n"
    o, t, settings = report["overall"], report["timing"], report["settings"]

    def row(prefix: str, rmsle_key: str) -> str:
        return (
            f"| {t[prefix + 'cases']} | {t[prefix + 'delayed_gold']} / {t[prefix + 'instant_gold']} | "
            f"{t[prefix + 'unparsed']} | {fmt(t[prefix + 'precision'])} | {fmt(t[prefix + 'recall'])} | "
            f"{fmt(t[prefix + 'f1'])} | {fmt(t[prefix + 'fpr'])} | {fmt(t[rmsle_key])} |"
        )

    header = [
        "| cases | delayed / instant gold | unparsed | precision | recall | F1 | FPR | RMSLE |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines = [
        (
            f"TimelyChat turn-level evaluation: {o['dialogs']} dialogs (timing_turns={settings['timing_turns']}, "
            f"unparsed={settings['unparsed']}, interval_reading={settings.get('interval_reading', 'strict')}, "
            f"postprocess={str(settings.get('postprocess', False)).lower()})."
        ),
        "",
        (
            "**Response timing prediction, target turn** (delayed = positive class; comparable with TimelyChat "
            "Table 2; keys `target_precision`, `target_recall`, `target_f1`, `target_fpr`, `rmsle_target`)"
        ),
        "",
        *header,
        row("target_", "rmsle_target"),
        "",
        f"TP {t['target_tp']}, FP {t['target_fp']}, TN {t['target_tn']}, FN {t['target_fn']}.",
        "",
        (
            "**Response timing prediction, all turns** (every predicted turn, context turns with gold 0 minutes; "
            "not the Table 2 protocol; keys `precision`, `recall`, `f1`, `fpr`, `rmsle`)"
        ),
        "",
        *header,
        row("", "rmsle"),
        "",
        (
            f"TP {t['tp']}, FP {t['fp']}, TN {t['tn']}, FN {t['fn']}; intervals read from prose: "
            f"{t.get('extracted', 0)}."
        ),
        "",
        "**Time-conditioned response generation, gold interval** (x100 except the 1-5 judge scores; Table 3)",
        "",
        "| replies | BLEU-2 | ROUGE-L | BERTScore | naturalness | time-specificity |",
        "|---|---|---|---|---|---|",
        (
            f"| {o['responses']} | {fmt(o['bleu2'], 2)} | {fmt(o['rouge_l'], 2)} | {fmt(o['bertscore'], 2)} | "
            f"{fmt(o['naturalness'], 2)} | {fmt(o['time_specificity'], 2)} |"
        ),
    ]
    if report.get("dialog_level"):
        lines += [""] + dialog_markdown(report["dialog_level"])
    if report.get("notes"):
        lines += ["", "Notes:", ""] + [f"- {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def fmt(v, digits=3):
    return "n/a" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))


def dialog_markdown(dialog: dict) -> list[str]:
    """The dialog-level section (`timealign.suites.timelychat.dialog`): the judge's mean 1-5 scores (Fig. 3) with
    how many replies were readable, unreadable or failed, the means over dialogs with a delay, and the agent's
    delays."""
    o, st = dialog["overall"], dialog["settings"]
    metrics = (
        ("coherence", "coherence"),
        ("delay_appropriateness", "delay-appropriateness"),
        ("time_specificity", "time-specificity"),
    )
    lines = [
        (
            f"**Dialog-level evaluation** (Sec. 6.3, Fig. 3; keys `dialog_*`): {o['dialogs_completed']} of "
            f"{o['dialogs_simulated']} simulated dialogs completed ({st['turns']} turns after each dialog's first "
            f"utterance; simulated user: {st['partner']}; judge: {st['judge'] or 'none'})."
        ),
        "",
        "| judge metric (1-5) | mean | mean, dialogs with a delay | readable | unreadable | failed |",
        "|---|---|---|---|---|---|",
    ]
    for key, name in metrics:
        lines.append(
            f"| {name} | {fmt(o[f'dialog_{key}'], 2)} | {fmt(o[f'dialog_{key}_with_delay'], 2)} | "
            f"{o[f'dialog_{key}_judged']} | {o[f'dialog_{key}_unparsed']} | {o[f'dialog_{key}_failed']} |"
        )
    if st["judge"] is None:
        lines += ["", "No judge configured: the scores are n/a."]
    lines += [
        "",
        "| agent turns | delayed | delay rate | mean delay (min) | dialogs with a delay | intervals from prose | "
        "unreadable intervals (0 min) |",
        "|---|---|---|---|---|---|---|",
        (
            f"| {o['dialog_agent_turns']} | {o['dialog_agent_delayed_turns']} | {fmt(o['dialog_delay_rate'])} | "
            f"{fmt(o['dialog_mean_delay_minutes'], 1)} | {o['dialogs_with_delay']} | "
            f"{o['dialog_intervals_extracted']} | {o['dialog_intervals_unparsed']} |"
        ),
    ]
    return lines
