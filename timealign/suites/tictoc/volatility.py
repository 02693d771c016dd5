"""The volatility-aware reference (issue 49): the elapsed-time rule with one threshold per sensitivity class, fit on
the recipe's train split, scored beside every TicToc number next to the global rule (`timealign.backends.clock`).

TicToc's labels depend on what the information is: a stock price is stale in seconds, a delivery estimate in days.
Each sample's scenario has a `sensitivity` class in the scenario registry (high / medium / low,
`timealign.data.scenarios`). The reference calls when the last tool result is older than its class's threshold, or
when there is none (as the global rule). It reads the registry's class, which a model must infer from the scenario,
so it is a reference for what a model could reach, not a baseline of equal standing with the global rule.

Fit (`fit_volatility_rule`), on the train rows only, never on the samples it scores:
- NAR = (attempt rate on prefer-Tool + (1 - attempt rate on prefer-noTool)) / 2 over all train rows, so with P
  prefer-Tool and N prefer-noTool rows in all, a class's rows contribute right_calls_c / (2P) + right_answers_c / (2N)
  whatever the other classes do: each class is fit alone, on the integer score N right_calls_c + P right_answers_c.
- "Call when age > t" changes its decisions only at the class's tool-result ages a_1 < ... < a_k: every t in one of
  the intervals [0, a_1), [a_1, a_2), ..., [a_k, inf) decides alike on the train rows. The best-scoring intervals are
  kept; of those the widest in log space (an interval touching 0 or infinity is infinitely wide), ties to the lowest
  (calling more); the threshold is its geometric midpoint sqrt(lo hi), 0 for [0, hi) and a_k for [a_k, inf) (of
  the class's train rows it then calls none with a tool result; a result older than all of them is called).
- Rows with no earlier tool result always call and are counted in P and N, not in the fit.
- A class the train rows do not hold is decided with the threshold fit the same way on all train rows, one class
  (`fallback`; the report lists the classes that used it).

Which train rows (`volatility_train_rows`): every labelled sample of `data.train_split` as data prep reads it, after
the validation carve-out (`data.validation_share`: the validation trajectories are not in the fit) and BEFORE label
balancing (`data.balance_train_labels` keeps a subsample; per scenario it drops whole scenarios). Without balancing
that is the prepared folder's train split as it is; with it, the same stages of data prep
(`timealign.data.pairs.prepare`: load, build pairs, set aside validation) are run again from the sources, without
generating answers or writing anything, and checked against the prepared folder (its train rows among them, none of
its validation rows, as many as its train pairs + `balance_dropped`). The fit is kept in memory per prepared folder,
so the evaluations one process makes of one data set load the sources once.
"""

from __future__ import annotations

import copy
import json
import math
from collections import Counter
from pathlib import Path

from timealign.backends.clock import clock_reply, tool_result_age
from timealign.render.chat_api import reply_string
from timealign.suites.tictoc.metrics import PREFER_NO_TOOL, PREFER_TOOL, summarize

CLASSES = ("high", "medium", "low")
LABEL = "the volatility-aware reference"
READS = "reads the registry's sensitivity class, which a model must infer from the scenario"
_FITS: dict[tuple[str, str, str], dict] = {}  # (prepared folder, its fingerprint, train split) -> fit


def class_order(name: str) -> tuple[int, str]:
    """high, medium, low (the registry's classes, fastest-going stale first), then any other alphabetically."""
    return (CLASSES.index(name) if name in CLASSES else len(CLASSES), name)


def _age(row: dict) -> float | None:
    try:
        return tool_result_age(row["prompt"])
    except ValueError as err:
        raise ValueError(f"sample {row.get('id')!r} (elapse level {row.get('elapse_level')}): {err}") from err


def _best_threshold(cases: list[tuple[float, str]], prefer_tool: int, prefer_no_tool: int) -> dict:
    """The threshold of one class's (age, label) cases (module docstring): the score of each interval of equal
    decisions, the best intervals, the chosen one and the threshold inside it."""
    ages = sorted({age for age, _ in cases})
    tool_at, answer_at = Counter(), Counter()
    for age, label in cases:
        (tool_at if label == PREFER_TOOL else answer_at)[age] += 1
    # Intervals [lo, hi) of thresholds deciding alike: the calls are the cases with age > lo.
    bounds = ([0.0] if not ages or ages[0] > 0 else []) + ages
    tools_left, answers_up_to = sum(tool_at.values()), 0
    best, chosen = None, []
    for i, lo in enumerate(bounds):
        hi = bounds[i + 1] if i + 1 < len(bounds) else math.inf
        tools_left -= tool_at[lo]  # prefer-Tool cases older than lo: called, right
        answers_up_to += answer_at[lo]  # prefer-noTool cases at most lo old: answered, right
        score = prefer_no_tool * tools_left + prefer_tool * answers_up_to  # the class's NAR share x 2PN
        if best is None or score > best:
            best, chosen = score, [(lo, hi)]
        elif score == best:
            chosen.append((lo, hi))

    def log_width(interval: tuple[float, float]) -> float:
        lo, hi = interval
        return math.inf if lo == 0 or hi == math.inf else math.log(hi) - math.log(lo)

    widest = max(log_width(i) for i in chosen)
    lo, hi = next(i for i in chosen if log_width(i) == widest)  # ties: the lowest (calls most)
    seconds = 0.0 if lo == 0 else lo if hi == math.inf else math.sqrt(lo * hi)
    return {"seconds": seconds, "interval": [lo, None if hi == math.inf else hi], "optimal_intervals": len(chosen)}


def fit_volatility_rule(train_rows: list[dict]) -> dict:
    """One threshold per sensitivity class fit on `train_rows` (prepared pair rows: `prompt`, `label`,
    `sensitivity`), as the module docstring says. Returns `thresholds` ({class: seconds}), `fallback` (the one
    threshold of all rows), per class the interval it lies in and the train counts, and the rule's train NAR."""
    if not train_rows:
        raise ValueError("the volatility-aware reference has no train rows to fit its thresholds on")
    aged = [(row, _age(row)) for row in train_rows]
    prefer_tool = sum(1 for row in train_rows if row["label"] == PREFER_TOOL)
    prefer_no_tool = sum(1 for row in train_rows if row["label"] == PREFER_NO_TOOL)
    if prefer_tool + prefer_no_tool != len(train_rows):
        odd = next(r for r in train_rows if r["label"] not in (PREFER_TOOL, PREFER_NO_TOOL))
        raise ValueError(f"train sample {odd.get('id')!r} has label {odd['label']!r}, not prefer_tool/prefer_no_tool")
    classes = {}
    for name in sorted({row["sensitivity"] for row in train_rows}, key=class_order):
        cases = [(age, row["label"]) for row, age in aged if row["sensitivity"] == name and age is not None]
        rows = [row for row in train_rows if row["sensitivity"] == name]
        classes[name] = _best_threshold(cases, prefer_tool, prefer_no_tool) | {
            "train_rows": len(rows),
            "train_prefer_tool": sum(1 for r in rows if r["label"] == PREFER_TOOL),
        }
    everyone = [(age, row["label"]) for row, age in aged if age is not None]
    fallback = _best_threshold(everyone, prefer_tool, prefer_no_tool)
    thresholds = {name: fit["seconds"] for name, fit in classes.items()}
    calls = [age is None or age > thresholds[row["sensitivity"]] for row, age in aged]
    return {
        "thresholds": thresholds,
        "fallback": fallback["seconds"],
        "classes": classes,
        "fallback_fit": fallback,
        "train": summarize([row["label"] for row in train_rows], calls),
    }


def fit_class_thresholds(train_rows: list[dict]) -> dict[str, float]:
    """{sensitivity class: seconds} fit on `train_rows` (`fit_volatility_rule`)."""
    return fit_volatility_rule(train_rows)["thresholds"]


def threshold_for(sensitivity: str, thresholds: dict[str, float], fallback: float | None = None) -> float:
    """The class's threshold; `fallback` for a class the fit did not see (an error without one)."""
    if sensitivity in thresholds:
        return thresholds[sensitivity]
    if fallback is None:
        raise ValueError(f"no threshold for sensitivity class {sensitivity!r} (fit on: {', '.join(thresholds)})")
    return fallback


def volatility_calls(
    messages: list[dict], sensitivity: str, thresholds: dict[str, float], fallback: float | None = None
) -> bool:
    """The reference's decision: call when there is no earlier tool result or it is older than the class's
    threshold (`tool_result_age`, as the global rule)."""
    age = tool_result_age(messages)
    return age is None or age > threshold_for(sensitivity, thresholds, fallback)


def volatility_replies(requests: list[str], classes: list[str], fit: dict) -> list[str]:
    """The reference's replies to the clock backend's request strings (`clock_request`), one class each: the
    global rule's reply at the class's threshold, so they go through the same detection as the rule's."""
    out = []
    for request, sensitivity in zip(requests, classes, strict=True):
        decoded = json.loads(request)
        seconds = threshold_for(sensitivity, fit["thresholds"], fit["fallback"])
        out.append(reply_string(clock_reply(decoded["messages"], decoded["tools"], seconds)))
    return out


def _rebuilt_train_rows(data) -> list[dict]:
    """The train rows of data prep before label balancing, built again from the sources (module docstring)."""
    from timealign.data.pairs import load_samples, set_aside_validation
    from timealign.data.tictoc_pairs import build_pairs

    loaded = load_samples(data)
    margins = {PREFER_TOOL: data.margin_prefer_tool, PREFER_NO_TOOL: data.margin_prefer_no_tool}
    # generated answers change no row's id, label or times; data prep builds the unanswered with latest_tool_result
    strategy = "latest_tool_result" if data.direct_answer == "generate" else data.direct_answer
    pairs = build_pairs(
        loaded.samples,
        default_margins=margins,
        direct_answer=strategy,
        min_margin=data.min_margin,
        on_error=data.on_error,
    )
    rows = pairs.samples
    if data.validation_share > 0:
        rows = set_aside_validation(rows, data.train_split, data.validation_share, data.validation_by)
    return [r for r in rows if r["split"] == data.train_split]


def _key(row: dict) -> tuple:
    return row["id"], row["elapse_level"], row["label"]


def volatility_train_rows(data, folder: str | Path) -> tuple[list[dict], dict]:
    """The rows the reference is fit on (module docstring) and what they are: split, count, whether rebuilt.

    Rebuilt rows must be the prepared folder's: its train rows among them, none of its other splits' (the
    validation trajectories), as many as its train rows and those label balancing dropped; else a ValueError."""
    from timealign.data.fingerprint import MANIFEST
    from timealign.data.pairs import load_prepared

    datasets = load_prepared(folder)
    prepared = datasets[data.train_split].to_list() if data.train_split in datasets else []
    if not data.balance_train_labels:
        rows, how = prepared, "the prepared train split (no label balancing)"
    else:
        rows, how = _rebuilt_train_rows(data), "rebuilt from the sources as data prep reads them, before balancing"
        dropped = json.loads((Path(folder) / MANIFEST).read_text()).get("balance_dropped", 0)
        rebuilt = {_key(r) for r in rows}
        elsewhere = {_key(r) for split, d in datasets.items() if split != data.train_split for r in d.to_list()}
        if len(rows) != len(prepared) + dropped or not {_key(r) for r in prepared} <= rebuilt or rebuilt & elsewhere:
            raise ValueError(
                f"the volatility-aware reference rebuilt {len(rows)} {data.train_split} rows from the sources that "
                f"are not {folder}'s {len(prepared)} + {dropped} dropped by label balancing: the sources or data "
                "prep changed since it was prepared (prepare the data again)"
            )
    info = {
        "split": data.train_split,
        "rows": len(rows),
        "balanced_rows_trained_on": len(prepared),
        "unbalanced": True,
        "validation_set_aside": data.validation_share > 0,
        "how": how,
    }
    return rows, info


def fit_for_recipe(recipe, folder: str | Path) -> dict:
    """The reference fit on the recipe's train rows in the prepared `folder` (kept per folder and fingerprint):
    `fit_volatility_rule`'s result plus `fit_on` (`volatility_train_rows`' info)."""
    from timealign.data.fingerprint import MANIFEST

    fingerprint = json.loads((Path(folder) / MANIFEST).read_text()).get("fingerprint", {}).get("sha256", "")
    key = (str(Path(folder).resolve()), str(fingerprint), recipe.data.train_split)
    if key not in _FITS:
        rows, info = volatility_train_rows(recipe.data, folder)
        if not rows:
            raise ValueError(
                f"the volatility-aware reference is fit on data.train_split={recipe.data.train_split!r}, which "
                f"{folder} does not hold: set data.train_split to the split the data was trained on"
            )
        _FITS[key] = fit_volatility_rule(rows) | {"fit_on": info}
    return copy.deepcopy(_FITS[key])  # a caller's changes never reach the next evaluation's fit


def human_seconds(seconds: float) -> str:
    """A threshold as one reads it: 25.5 s, 21.0 min, 5.2 h, 12.4 days (the JSON keeps the seconds)."""
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.3g} s"


def describe_fit(reference: dict) -> str:
    """One phrase for a report: the thresholds per class and the rows they were fit on."""
    fit_on = reference["fit_on"]
    shown = ", ".join(f"{name} {human_seconds(seconds)}" for name, seconds in reference["thresholds"].items())
    fallback = reference.get("fallback_classes") or []
    if fallback:
        shown += f"; {', '.join(fallback)} (no train rows): {human_seconds(reference['fallback_seconds'])}"
    return (
        f"one threshold per sensitivity class, {shown}, fit on the {fit_on['rows']} {fit_on['split']} samples "
        "before label balancing"
    )
