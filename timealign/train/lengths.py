"""Preference pairs longer than `training.max_length`: measured with the recipe's tokenizer, handled, counted.

TRL 1.16's DPOTrainer handles an over-length pair on its own, without a word: with `truncation_mode=keep_start` it
drops every pair whose prompt alone fills `max_length`, and its collator cuts every longer prompt + completion at
`max_length`, so the completion loses its end (a tool call its closing tag, every completion its EOS). On TicToc v1
with the tiny recipe (1024 tokens) that was 110 of 694 train pairs dropped and 45 completions cut.

`PairFitter` renders each pair as training will (the shared renderer), tokenizes it exactly as OffsetDPOTrainer does
(the prompt and each completion apart, EOS appended when missing: `timealign.render.tokens`) and applies
`data.overlength`:

- `truncate_prompt` (default): the prompt loses whole turns, oldest first, until the prompt and the longer
  completion fit. A turn is a user message and the assistant/tool messages after it; no message is cut. Always
  kept: the system message(s), the tool schemas, the final question's turn and the turn holding the latest tool
  result (the information whose age the tool-call decision is about: without it the pair no longer teaches that
  decision). A pair that still does not fit is an error naming each record and the length it needs.
- `truncate_prompt_or_drop`: the same, but a pair that still does not fit is left out (counted, named in the log).
- `drop`: every over-length pair is left out (counted, named in the log).
- `error`: any over-length pair stops the run, naming each record.
- `trl`: nothing is changed; TRL drops and cuts as above, and the counts say how many.

The counts (pairs dropped, prompt-truncated, completion-truncated, turns dropped) and the length distribution
(p50/p95/max of prompt + longer completion, in tokens) go to one log line per split, `<output_dir>/lengths.json`
and the W&B run summary (`lengths/<split>/<count>`). `check_against_trainer` then compares them with the dataset
the trainer really built, so a tokenization that differs from ours cannot pass silently.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from timealign.config import RecipeError
from timealign.render import tokens

logger = logging.getLogger("timealign.train.lengths")

OVERLENGTH_MODES = ("truncate_prompt", "truncate_prompt_or_drop", "drop", "error", "trl")
LENGTHS_FILE = "lengths.json"
SHOWN = 10  # records named in a message

# Columns `PairFitter.pair` adds to each rendered row; `PairFitter.finish` removes them.
COLUMNS = {
    "len_prompt": 0,
    "len_chosen": 0,
    "len_rejected": 0,
    "len_full": 0,
    "len_final": 0,
    "turns_dropped": 0,
    "fit": "",
}


def check_mode(mode: str) -> None:
    if mode not in OVERLENGTH_MODES:
        raise RecipeError(f"data.overlength={mode!r} is not one of: {', '.join(OVERLENGTH_MODES)}")


def turns(messages: list[dict]) -> list[list[int]]:
    """Indices of `messages` grouped into turns: a turn starts at each user message (messages before the first
    user message form a turn of their own). System messages belong to no turn: they are always kept."""
    groups: list[list[int]] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "system":
            continue
        if role == "user" or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def droppable_turns(messages: list[dict]) -> list[list[int]]:
    """The turns the prompt may lose, oldest first: all but the final question's and the latest tool result's."""
    groups = turns(messages)
    evidence = max(
        (n for n, g in enumerate(groups) if any(messages[i].get("role") == "tool" for i in g)), default=None
    )
    return [g for n, g in enumerate(groups[:-1]) if n != evidence]


def percentile(values: list[int], q: float) -> int:
    """Nearest-rank percentile (q in 0..100); 0 for no values."""
    if not values:
        return 0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100), at least 1
    return int(ordered[int(rank) - 1])


def record_name(row: dict) -> str:
    where = f"{Path(str(row['source'])).name}: " if row.get("source") else ""  # as data prep's errors name files
    level = f" (elapse level {row['elapse_level']})" if row.get("elapse_level") is not None else ""
    return f"{where}record {row.get('id')!r}{level}"


def _names(rows: list[dict]) -> str:
    """One indented line per record (the first SHOWN) with the tokens it needs, starting with a newline."""
    lines = [f"{record_name(r)}: {r['len_final']} tokens" for r in rows[:SHOWN]]
    if len(rows) > SHOWN:
        lines.append(f"... and {len(rows) - SHOWN} more")
    return "".join(f"\n  {line}" for line in lines)


@dataclass
class PairFitter:
    """Renders one split's pairs within `max_length` per `mode` (see the module docstring); `report` afterwards."""

    renderer: Any
    tokenizer: Any
    max_length: int | None
    mode: str = "truncate_prompt"
    split: str = "train"
    truncation_mode: str = "keep_start"  # TRL's, for what `trl` mode counts
    report: dict = field(default_factory=dict)

    def __post_init__(self):
        check_mode(self.mode)

    @property
    def columns(self) -> dict:
        """The length columns' empty values (for a row the renderer refuses; such rows are left out before
        `finish`)."""
        return dict(COLUMNS)

    # -- measuring, exactly as OffsetDPOTrainer tokenizes a standard (string) pair ------------------------
    def measure(self, rendered: dict) -> tuple[int, int, int]:
        """(prompt tokens, prompt + chosen tokens, prompt + rejected tokens) as the trainer will see them: the prompt
        and each completion tokenized apart (`timealign.render.tokens`)."""
        ids = tokens.pair_ids(self.tokenizer, rendered["prompt"], rendered["chosen"], rendered["rejected"])
        prompt_len = len(ids["prompt_ids"])
        return prompt_len, prompt_len + len(ids["chosen_ids"]), prompt_len + len(ids["rejected_ids"])

    def fits(self, lengths: tuple[int, int, int]) -> bool:
        return self.max_length is None or max(lengths[1], lengths[2]) <= self.max_length

    # -- one pair ------------------------------------------------------------------------------------------
    def pair(self, row: dict) -> dict:
        """The rendered pair (TRL's standard layout) plus the length columns of `COLUMNS`."""
        messages, chosen, rejected, tools = row["prompt"], row["chosen"][0], row["rejected"][0], row["tools"]
        out = self.renderer.pair(messages, chosen, rejected, tools)
        lengths = self.measure(out)
        columns = {
            "len_prompt": lengths[0],
            "len_chosen": lengths[1],
            "len_rejected": lengths[2],
            "len_full": max(lengths[1:]),
            "turns_dropped": 0,
            "fit": "fits",
        }
        if not self.fits(lengths):
            columns["fit"] = "over"
            if self.mode in ("truncate_prompt", "truncate_prompt_or_drop"):
                kept = list(range(len(messages)))
                for n, group in enumerate(droppable_turns(messages), start=1):
                    drop = set(group)
                    kept = [i for i in kept if i not in drop]
                    shorter = self.renderer.pair([messages[i] for i in kept], chosen, rejected, tools)
                    lengths = self.measure(shorter)
                    if self.fits(lengths):
                        out, columns["turns_dropped"], columns["fit"] = shorter, n, "truncated"
                        break
                else:
                    columns["fit"] = "too_long"
        columns["len_final"] = max(lengths[1:]) if columns["fit"] != "fits" else columns["len_full"]
        return {**out, **columns}

    # -- the split -----------------------------------------------------------------------------------------
    def finish(self, rendered):
        """Apply the mode to the rendered split (drop or raise), fill `report`, remove the length columns."""
        cols = rendered.select_columns(
            [c for c in ("id", "source", "elapse_level", *COLUMNS) if c in rendered.column_names]
        ).to_list()
        over = [r for r in cols if r["fit"] != "fits"]
        too_long = [r for r in cols if r["fit"] == "too_long"]
        limit = f"training.max_length={self.max_length}"
        if self.mode == "error" and over:
            raise RecipeError(
                f"{len(over)} of {len(cols)} {self.split} pairs are longer than {limit} (prompt + "
                f"completion; data.overlength=error):{_names(over)}\nRaise training.max_length, or set "
                "data.overlength=truncate_prompt (drop their oldest turns) or data.overlength=drop"
            )
        if self.mode == "truncate_prompt" and too_long:
            need = max(r["len_final"] for r in too_long)
            raise RecipeError(
                f"{len(too_long)} of {len(cols)} {self.split} pairs do not fit {limit} even with every older turn "
                "left out of the prompt (kept: system message, tool schemas, the latest tool result's turn, the final "
                "question, the whole completions); TRL would drop them or cut their completions (losing the closing "
                f"tag and EOS):{_names(too_long)}\nRaise training.max_length to at least {need}, or set "
                "data.overlength=truncate_prompt_or_drop to leave them out (counted), or data.overlength=trl for "
                "TRL's own dropping and cutting"
            )
        leave_out = {"drop": ("over", "too_long"), "truncate_prompt_or_drop": ("too_long",)}.get(self.mode, ())
        dropped = [i for i, r in enumerate(cols) if r["fit"] in leave_out]
        if dropped:
            logger.warning(
                "%s: left out %d pairs longer than %s (data.overlength=%s):%s",
                self.split,
                len(dropped),
                limit,
                self.mode,
                _names([cols[i] for i in dropped]),
            )
            gone = set(dropped)
            rendered = rendered.select([i for i in range(len(cols)) if i not in gone])
        self.report = self._report(cols, set(dropped))
        if cols and self.report["kept"] == 0:  # TRL would fail on the empty set (StopIteration, num_samples=0)
            t = self.report["tokens"]
            raise RecipeError(
                f"all {len(cols)} {self.split} pairs are left out by {limit} (data.overlength={self.mode}; prompt + "
                f"completion p50 {t['p50']} / max {t['max']} tokens): nothing to train on: raise training.max_length "
                f"({t['max']}: every pair fits)"
            )
        logger.info(summary_line(self.report))
        return rendered.remove_columns([c for c in COLUMNS if c in rendered.column_names])

    def _report(self, cols: list[dict], dropped: set[int]) -> dict:
        full = [r["len_full"] for r in cols]
        final = [r["len_final"] for i, r in enumerate(cols) if i not in dropped]
        report = {
            "split": self.split,
            "max_length": self.max_length,
            "mode": self.mode,
            "pairs": len(cols),
            "tokens": {"p50": percentile(full, 50), "p95": percentile(full, 95), "max": max(full, default=0)},
            "over_length": sum(r["fit"] != "fits" for r in cols),
            "prompt_truncated": sum(r["fit"] == "truncated" for r in cols),
            "turns_dropped": sum(r["turns_dropped"] for r in cols),
            "dropped": len(dropped),
            "chosen_truncated": 0,
            "rejected_truncated": 0,
            "kept": len(cols) - len(dropped),
            "max_tokens_trained": max(final, default=0),
        }
        if self.mode == "trl" and self.max_length is not None:  # what TRL will do to them
            limit = self.max_length
            if self.truncation_mode == "keep_start":  # prompts that fill max_length go; longer sequences are cut
                kept = [r for r in cols if r["len_prompt"] < limit]
                report.update(
                    chosen_truncated=sum(r["len_chosen"] > limit for r in kept),
                    rejected_truncated=sum(r["len_rejected"] > limit for r in kept),
                )
            else:  # keep_end: nothing goes; the collator cuts each sequence's start (the prompt's) instead
                kept = cols
                report["prompt_truncated"] = sum(r["len_full"] > limit for r in cols)
            report.update(
                dropped=len(cols) - len(kept),
                kept=len(kept),
                max_tokens_trained=min(limit, max((r["len_full"] for r in kept), default=0)),
            )
        return report


def summary_line(report: dict) -> str:
    """One line: the length distribution against max_length and what happened to the longer pairs."""
    t = report["tokens"]
    head = (
        f"{report['split']} pairs: prompt + longer completion p50 {t['p50']} / p95 {t['p95']} / max {t['max']} "
        f"tokens vs training.max_length={report['max_length']}"
    )
    if report["max_length"] is None:
        return head + " (no limit)"
    return (
        head + f"; {report['over_length']} of {report['pairs']} longer (data.overlength={report['mode']}): "
        f"{report['prompt_truncated']} prompt-truncated ({report['turns_dropped']} oldest turns left out), "
        f"{report['dropped']} dropped, {report['chosen_truncated']} chosen and {report['rejected_truncated']} "
        f"rejected completions cut; {report['kept']} pairs trained"
    )


def trainer_counts(dataset, max_length: int | None, truncation_mode: str = "keep_start") -> dict:
    """What TRL's tokenized dataset (prompt_ids, chosen_ids, rejected_ids) will do at `max_length`."""
    prompt = [len(x) for x in dataset["prompt_ids"]]
    chosen = [p + len(x) for p, x in zip(prompt, dataset["chosen_ids"])]
    rejected = [p + len(x) for p, x in zip(prompt, dataset["rejected_ids"])]
    if max_length is None:
        return {"kept": len(prompt), "chosen_truncated": 0, "rejected_truncated": 0}
    cut = truncation_mode == "keep_start"
    return {
        "kept": len(prompt),
        "chosen_truncated": sum(n > max_length for n in chosen) if cut else 0,
        "rejected_truncated": sum(n > max_length for n in rejected) if cut else 0,
    }


def check_against_trainer(report: dict, dataset, max_length: int | None, truncation_mode: str = "keep_start") -> None:
    """The counts of `report` must be what TRL built: else our measuring differs from TRL's and the counts lie."""
    actual = trainer_counts(dataset, max_length, truncation_mode)
    expected = {k: report[k] for k in actual}
    if actual != expected:
        raise RecipeError(
            f"{report['split']} pairs: TRL's tokenized dataset has {actual} but the length check "
            f"counted {expected} (data.overlength={report['mode']}): the two tokenize differently, so "
            "pairs would be dropped or cut without being counted. Please report this; data.overlength=trl trains as "
            "TRL does and counts what it does"
        )


def write_reports(reports: dict[str, dict], output_dir: str | Path) -> Path:
    """`<output_dir>/lengths.json`: {split: report} (whole or absent)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / LENGTHS_FILE
    tmp = out / f".{LENGTHS_FILE}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(reports, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def summary_metrics(reports: dict[str, dict]) -> dict[str, int]:
    """Flat W&B summary keys: lengths/<split>/<count>."""
    keys = (
        "pairs",
        "over_length",
        "prompt_truncated",
        "turns_dropped",
        "dropped",
        "chosen_truncated",
        "rejected_truncated",
        "kept",
        "max_tokens_trained",
    )
    out = {}
    for split, report in reports.items():
        out.update({f"lengths/{split}/{k}": report[k] for k in keys})
        out.update({f"lengths/{split}/tokens_{k}": v for k, v in report["tokens"].items()})
    return out


class LengthReportCallback(TrainerCallback):
    """Puts the length counts into the W&B run summary when training starts (the run is open by then)."""

    def __init__(self, reports: dict[str, dict]):
        self.metrics = summary_metrics(reports)

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or "wandb" not in (args.report_to or []):
            return
        import wandb

        if wandb.run is not None:
            wandb.run.summary.update(self.metrics)
