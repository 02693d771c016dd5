"""The capped held-out sample (`eval.max_samples`, `live_eval.max_samples`): seeded, stratified, the same everywhere.

Taking the first N rows of a split measures whatever the split happens to start with (the TicToc v1 test split starts
with 97 prefer-noTool pairs, so its first 64 rows leave NAR undefined). Instead `stratified_sample` draws:

- per label (TicToc: prefer-Tool / prefer-noTool; TIMER dialogs: a delayed / an instant target reply), a share
  proportional to the label's size (largest remainder), and at least one row of every label when N allows, so a
  metric that needs every label (NAR is the mean of the two per-label rates) is defined on any N >= the number of
  labels;
- within a label, rows spread over the scenarios in proportion to their size (systematic sampling over a
  seeded order of each scenario's rows), where the rows name a scenario;
- the order is a hash of (seed, sample id), not a random stream: the same rows for the same data and seed in every
  process, run and checkpoint (so `timealign.eval.compare` pairs the samples of two checkpoints), and a row keeps
  its place when other rows are added to the split. The sample of N is contained in the sample of N + 1 within
  each label.

The seed is `data.seed`. The rows come back in their order in the split.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Callable, Sequence

SAMPLING = "stratified"  # the name reports carry (data.sampling)


def sample_key(row: dict) -> str:
    """A row's id in the sample: TicToc pairs repeat a trajectory id at several elapse levels."""
    rid = str(row.get("id"))
    return f"{rid}@{row['elapse_level']}" if "elapse_level" in row else rid


def _unit(seed: int, text: str) -> float:
    """A number in [0, 1) fixed by (seed, text)."""
    digest = hashlib.sha256(f"{seed}\0{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _largest_remainder(sizes: dict[str, int], n: int) -> dict[str, int]:
    """`n` split over the groups in proportion to `sizes`, at least 1 per group when n >= the number of groups."""
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    groups = sorted(sizes)
    floor = len(groups) if n >= len(groups) else 0
    quota = {g: min(sizes[g], 1 if floor else 0) for g in groups}
    left = n - sum(quota.values())
    rest = {g: sizes[g] - quota[g] for g in groups}
    pool = sum(rest.values())
    exact = {g: left * rest[g] / pool if pool else 0.0 for g in groups}
    for g in groups:
        quota[g] += int(exact[g])
    left = n - sum(quota.values())
    for g in sorted(groups, key=lambda g: (-(exact[g] - int(exact[g])), g)):
        if left <= 0:
            break
        if quota[g] < sizes[g]:
            quota[g] += 1
            left -= 1
    return quota


def _spread_order(
    indices: list[int], rows: Sequence[dict], seed: int, group_of: Callable[[dict], str | None]
) -> list[int]:
    """The rows of one label in drawing order: every scenario's rows at evenly spaced, seeded positions."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i in indices:
        by_group[str(group_of(rows[i]) or "")].append(i)
    keyed = []
    for group, members in by_group.items():
        members.sort(key=lambda i: _unit(seed, sample_key(rows[i])))
        offset = _unit(seed, f"group:{group}")
        for rank, i in enumerate(members):
            keyed.append(((rank + offset) / len(members), _unit(seed, sample_key(rows[i])), i))
    return [i for *_, i in sorted(keyed)]


def stratified_sample(
    rows: Sequence[dict],
    n: int | None,
    *,
    seed: int,
    label_of: Callable[[dict], str],
    group_of: Callable[[dict], str | None] = lambda row: None,
) -> tuple[list[dict], dict]:
    """At most `n` of `rows` (all of them when n is None or >= len(rows)), stratified by `label_of` and spread over
    `group_of` (module docstring); returns (rows in split order, a description for the report)."""
    total = len(rows)
    by_label: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_label[str(label_of(row))].append(i)
    info = {
        "sampling": "all" if n is None or n >= total else SAMPLING,
        "max_samples": n,
        "seed": seed,
        "available": total,
        "available_by_label": {k: len(v) for k, v in sorted(by_label.items())},
    }
    if n is None or n >= total:
        chosen = list(range(total))
    else:
        quota = _largest_remainder({k: len(v) for k, v in by_label.items()}, n)
        chosen = sorted(
            i
            for label, members in by_label.items()
            for i in _spread_order(members, rows, seed, group_of)[: quota[label]]
        )
    picked = [rows[i] for i in chosen]
    counts: dict[str, int] = defaultdict(int)
    for row in picked:
        counts[str(label_of(row))] += 1
    info["by_label"] = dict(sorted(counts.items()))
    missing = [label for label in by_label if not counts.get(label)]
    if missing:
        info["missing_labels"] = sorted(missing)
    return picked, info


# ---------------------------------------------------------------------------------------------- the two kinds


def pair_label(row: dict) -> str:
    return str(row["label"])


def pair_scenario(row: dict) -> str | None:
    return row.get("scenario")


def dialog_label(row: dict) -> str:
    """A TIMER dialog's stratum: whether its target reply comes after a delay (the class delay F1 is about)."""
    minutes = row.get("minutes")
    target = minutes[-1] if isinstance(minutes, (list, tuple)) and minutes else getattr(row, "target_minutes", 0)
    return "delayed" if (target or 0) > 0 else "instant"


def sample_pairs(rows: Sequence[dict], n: int | None, seed: int) -> tuple[list[dict], dict]:
    """TicToc pairs: stratified by label, spread over scenarios."""
    picked, info = stratified_sample(rows, n, seed=seed, label_of=pair_label, group_of=pair_scenario)
    info["stratified_by"] = ["label", "scenario"]
    return picked, info


def sample_dialogs(rows: Sequence[dict], n: int | None, seed: int) -> tuple[list[dict], dict]:
    """TIMER dialog rows: stratified by delayed / instant target."""
    picked, info = stratified_sample(rows, n, seed=seed, label_of=dialog_label)
    info["stratified_by"] = ["target delayed/instant"]
    return picked, info


# ---------------------------------------------------------------------------------------------- undefined metrics

TICTOC_NEEDS = {
    "nar": ("prefer_tool", "prefer_no_tool"),
    "attempt_rate_prefer_tool": ("prefer_tool",),
    "attempt_rate_prefer_no_tool": ("prefer_no_tool",),
}


def undefined_tictoc_metrics(overall: dict, labels: Sequence[str]) -> dict[str, str]:
    """{metric: why it is undefined} for each TicToc rate that is None, from the labels of the scored samples."""
    present = set(labels)
    reasons = {}
    for metric, needed in TICTOC_NEEDS.items():
        if metric in overall and overall[metric] is None:
            absent = [label for label in needed if label not in present]
            reasons[metric] = (
                f"the scored samples hold no {' and no '.join(absent)} pair"
                if absent
                else "every pair of a needed label was left out (failed generations, or "
                "empty outputs under the paper protocol)"
            )
    return reasons
