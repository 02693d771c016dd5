"""Failed generations of an evaluation: counted per suite, reported, and fatal above `eval.max_failed_share`.

A suite scores what generated and leaves failed samples out, so an evaluation whose every request failed would
otherwise end with n=0, NAR n/a and exit 0. The runner counts each suite's generations (`count_generations` in
`timealign.backends.cache`, whatever the suite's report looks like) and writes the counts as the report's
`failures` block (`samples`, `failed`, `share`, `max_failed_share`, `first_errors`), as a line of report.md and in
the log. When a suite's failed share is above `eval.max_failed_share`, the run stops with `EvaluationFailed`
(exit 1) after writing its reports into its run folder; the run is not published (`<out>/latest` and the top-level
copies keep the previous run) and its run.json says why. Failed samples are not cached: a rerun retries them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from timealign.backends.base import BackendError
from timealign.backends.cache import GenerationTally

logger = logging.getLogger("timealign.eval")


class EvaluationFailed(BackendError):
    """More than eval.max_failed_share of a suite's generations failed."""


def failure_summary(suite: str, tally: GenerationTally, max_failed_share: float) -> dict:
    """The report's `failures` block; logs a warning when any generation failed."""
    share = tally.failed / tally.samples if tally.samples else 0.0
    summary = {
        "samples": tally.samples,
        "failed": tally.failed,
        "share": round(share, 6),
        "max_failed_share": max_failed_share,
        "first_errors": list(tally.errors),
    }
    if tally.failed:
        logger.warning(
            "%s: %d of %d generations failed (%.1f%%; eval.max_failed_share=%g); first: %s",
            suite,
            tally.failed,
            tally.samples,
            100 * share,
            max_failed_share,
            tally.errors[0],
        )
    return summary


def failure_markdown(summary: dict) -> str:
    """report.md's line on failed generations ("" when none failed)."""
    if not summary["failed"]:
        return ""
    over = " - **above eval.max_failed_share: the evaluation failed**" if _over(summary) else ""
    return (
        f"\n**failed generations: {summary['failed']} of {summary['samples']}** "
        f"({100 * summary['share']:.1f}%, eval.max_failed_share={summary['max_failed_share']:g}){over}; "
        f"first: `{summary['first_errors'][0][:200]}`\n"
    )


def _over(summary: dict) -> bool:
    return summary["share"] > summary["max_failed_share"]


def check_failures(reports: dict[str, dict], run_dir: Path) -> None:
    """Raise `EvaluationFailed` (and mark the run failed in its run.json) when a suite failed too often."""
    from timealign.eval.runs import now, write_run_info

    over = {name: r["failures"] for name, r in reports.items() if _over(r["failures"])}
    if not over:
        return
    counts = "; ".join(f"{name}: {s['failed']} of {s['samples']} generations failed" for name, s in over.items())
    first = next(iter(over.values()))["first_errors"][0][:300]
    message = (
        f"{counts}, more than eval.max_failed_share={next(iter(over.values()))['max_failed_share']:g} "
        f"(first: {first}). The reports are in {run_dir} (not published as latest); fix the server or "
        "backend and rerun with the same out= (finished samples are cached), or raise eval.max_failed_share"
    )
    write_run_info(run_dir, finished=now(), complete=False, failed=message)
    raise EvaluationFailed(message)
