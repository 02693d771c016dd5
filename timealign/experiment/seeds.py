"""A real-model result across seeds: per-sample decisions kept in real.json, the across-seed summary, and the merge of
runs made apart (`python -m timealign.experiment.real merge=RUN,RUN,... out=...`).

A seed changes what an arm trains on (the label-balanced subset of the v1 train split and its order), never what it is
scored on: every run of the whole split scores the same 685 samples (`settings.data.sample_sha256` says so), so the
NAR of one seed can be paired with another seed's control on the same samples. Untrained arms (base, clock) decide
greedily and ignore the seed: one seed's decisions stand for every seed.

Decisions are one character per held-out sample, in the report's order: `1` called a tool, `0` answered, `-` not
counted (a failed generation, or an empty output under the paper protocol). With the samples' keys and labels they
rebuild the evaluator's bootstrap units (`timealign.suites.tictoc.metrics.tictoc_units`), so paired differences
between runs made apart are the same computation as within one run.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from timealign.config import RecipeError

LABELS = {"prefer_tool": "T", "prefer_no_tool": "N"}
# Options that decide what an arm is and what it is scored on: runs merged must agree on every one (the value: what
# a run written before the option existed ran with).
SAME_IN_EVERY_RUN = {
    **dict.fromkeys(("base", "train_pairs", "batch_pairs", "learning_rate", "beta", "eval_samples", "eval_backend")),
    "heldout": "test",
    "overrides": "",
}


def sample_keys(report: dict) -> dict:
    """{"keys": ["id@elapse_level", ...], "labels": "TN..."}: the held-out samples in report order."""
    samples = report.get("samples") or []
    return {
        "keys": [f"{s['id']}@{s['elapse_level']}" for s in samples],
        "labels": "".join(LABELS[s["label"]] for s in samples),
    }


def decisions(report: dict, keys: list[str] | None = None) -> str:
    """One character per sample: 1 called, 0 answered, - not counted (as `tictoc_units` counts them); in report
    order, or in the order of `keys` (another report's `sample_keys`: every arm's decisions line up with one list)."""
    from timealign.suites.tictoc.metrics import is_counted

    protocol = (report.get("settings") or {}).get("protocol", "timealign")
    decided = "".join(
        ("1" if s["tool_call"] else "0") if is_counted(s, protocol) else "-" for s in report.get("samples") or []
    )
    return decided if keys is None else realign(decided, sample_keys(report)["keys"], keys)


def realign(decided: str, keys: list[str], order: list[str]) -> str:
    """Decisions listed by `keys`, put in `order` (the same samples, maybe listed otherwise); ValueError if the
    samples differ."""
    if keys == order:
        return decided
    by_key = dict(zip(keys, decided, strict=True))
    if set(by_key) != set(order):
        raise ValueError(f"the decisions are on other samples ({len(set(by_key) ^ set(order))} differ)")
    return "".join(by_key[k] for k in order)


def units(samples: dict, decided: str):
    """The bootstrap units of one arm and seed, rebuilt from its decisions (the module docstring)."""
    from timealign.suites.tictoc.metrics import tictoc_units

    names = {v: k for k, v in LABELS.items()}
    rows = []
    for key, label, d in zip(samples["keys"], samples["labels"], decided, strict=True):
        sample_id, level = key.rsplit("@", 1)
        rows.append({"id": sample_id, "elapse_level": level, "label": names[label],
                     "tool_call": None if d == "-" else d == "1"})  # fmt: skip
    return tictoc_units({"settings": {"protocol": "timealign"}, "samples": rows})


def paired(samples: dict, after: str, before: str, resamples: int) -> dict:
    """NAR(after) - NAR(before) on the same samples, the paired bootstrap of `timealign.eval.bootstrap`."""
    from timealign.eval.bootstrap import paired_differences

    d = paired_differences(units(samples, before), units(samples, after), resamples=resamples)["metrics"]["nar"]
    return {k: d[k] for k in ("before", "after", "difference", "interval", "outside_noise")}


def difference_key(a: str, b: str, seed: int | str) -> str:
    return f"{a} - {b}, seed {seed}"


def across_seeds(summary: dict, trained: dict[str, bool]) -> dict:
    """Per arm its NAR on every seed (mean, min, max); per comparison its paired difference on every seed (mean, min,
    max, whether every seed's interval excludes 0 and whether every seed has the same sign). An untrained arm is one
    number whatever the seed."""
    arms = {}
    for arm, by_seed in summary["arms"].items():
        nars = {int(s): a["nar"] for s, a in by_seed.items() if a["nar"] is not None}
        if nars:
            arms[arm] = {"seeds": sorted(nars), **spread([nars[s] for s in sorted(nars)]), "trained": trained[arm]}
    comparisons: dict[str, dict] = {}
    for key, d in summary["differences"].items():
        name, seed = key.rsplit(", seed ", 1)
        c = comparisons.setdefault(name, {"seeds": [], "differences": [], "intervals": [], "outside_noise": []})
        c["seeds"].append(int(seed))
        c["differences"].append(d["difference"])
        c["intervals"].append(d["interval"])
        c["outside_noise"].append(d["outside_noise"])
    for c in comparisons.values():
        order = sorted(range(len(c["seeds"])), key=c["seeds"].__getitem__)
        for k in ("seeds", "differences", "intervals", "outside_noise"):
            c[k] = [c[k][i] for i in order]
        values = [v for v in c["differences"] if v is not None]
        c.update(spread(values))
        c["every_seed_outside_noise"] = bool(c["outside_noise"]) and all(c["outside_noise"])
        c["same_sign"] = bool(values) and (all(v > 0 for v in values) or all(v < 0 for v in values))
    return {"arms": arms, "differences": comparisons}


def spread(values: list[float]) -> dict:
    if not values:
        return {"values": [], "mean": None, "min": None, "max": None}
    return {"values": values, "mean": statistics.fmean(values), "min": min(values), "max": max(values)}


# ------------------------------------------------------------------------------------------------------ merge


def load_run(path: str, option: str = "merge") -> tuple[Path, dict]:
    """(the run's folder, its real.json) for a folder holding real.json or the file itself; one line (naming
    `option`) if neither."""
    p = Path(path)
    file = p / "real.json" if p.is_dir() else p
    if not file.is_file():
        raise RecipeError(f"{option}: {path}: no real.json there (give a finished run's folder or its real.json)")
    try:
        return file.parent, json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise RecipeError(f"{option}: {file}: not JSON ({e.msg} at line {e.lineno}); give a real.json") from None


def agreement(folder: Path, original: dict, rescored: dict) -> dict:
    """Per arm and seed of a rescored run (`rescore=`): on how many held-out samples it decides as the original
    run (in `folder`) did in its own evaluation, and the keys of those that differ (id@elapse_level)."""
    keys = rescored["samples"]["keys"]
    out = {}
    for arm, by_seed in rescored["arms"].items():
        for seed, numbers in by_seed.items():
            their_keys, theirs = run_decisions(folder, original, arm, seed)
            if theirs is None:
                raise RecipeError(f"rescore: {folder} kept no per-sample decisions of {arm} seed {seed} (neither in "
                                  "real.json nor in eval/): nothing to compare with")  # fmt: skip
            theirs = realign(theirs, their_keys["keys"], keys)
            differ = [k for k, a, b in zip(keys, numbers["decisions"], theirs, strict=True) if a != b]
            out[f"{arm}-seed{seed}"] = {"same": len(keys) - len(differ), "of": len(keys), "differ": differ}
    return out


def run_decisions(folder: Path, summary: dict, arm: str, seed: str) -> tuple[dict | None, str | None]:
    """(sample keys, decisions) of one arm and seed: from real.json, else from the run's evaluator report beside it
    (eval/<arm>-seed<seed>/tictoc.json, for runs written before real.json kept them); (None, None) when neither."""
    numbers = summary["arms"][arm][seed]
    if numbers.get("decisions") is not None and summary.get("samples"):
        return summary["samples"], numbers["decisions"]
    report_file = folder / "eval" / f"{arm}-seed{seed}" / "tictoc.json"
    if report_file.is_file():
        report = json.loads(report_file.read_text())
        return sample_keys(report), decisions(report)
    return None, None


def merge_runs(paths: list[str], trained: dict[str, bool], comparisons, resamples: int) -> dict:
    """One summary of runs made apart (seeds, arms): they must agree on SAME_IN_EVERY_RUN and score the same held-out
    samples; an arm and seed in two runs is refused. Differences the runs computed are kept; the others between
    arms of different runs are computed from their decisions (an untrained arm's from any seed)."""
    runs = [load_run(p) for p in paths]
    first_path, first = runs[0]
    sha = (first["settings"].get("data") or {}).get("sample_sha256")
    for folder, s in runs[1:]:
        for key, before in SAME_IN_EVERY_RUN.items():
            mine = first["settings"]["options"].get(key, before)
            theirs = s["settings"]["options"].get(key, before)
            if mine != theirs:
                raise RecipeError(f"merge: {folder} has {key}={theirs}, {first_path} {key}={mine}: only runs of the "
                                  "same settings merge (rerun one with the other's)")  # fmt: skip
        if (s["settings"].get("data") or {}).get("sample_sha256") != sha:
            raise RecipeError(f"merge: {folder} scored other held-out samples than {first_path} (settings.data."
                              "sample_sha256 differs): only runs on the same samples merge")  # fmt: skip
    arms: dict[str, dict[str, dict]] = {}
    owner: dict[tuple[str, str], Path] = {}
    samples, decided, repeated = None, {}, []
    merged = {"differences": {}, "curves": {}, "runs": {}}
    for folder, s in runs:
        for arm, by_seed in s["arms"].items():
            for seed, numbers in by_seed.items():
                keys, d = run_decisions(folder, s, arm, seed)
                if (arm, seed) in owner:
                    if trained[arm] or not same_numbers(arms[arm][seed], numbers):
                        raise RecipeError(f"merge: {arm} seed {seed} is in {owner[arm, seed]} and in {folder}: give "
                                          "each trained arm and seed once (an untrained one twice only when both "
                                          "runs scored it the same)")  # fmt: skip
                    repeated.append(f"{arm} seed {seed}: {owner[arm, seed]} and {folder}")
                    if d is None:
                        continue  # the same numbers; keep the copy whose decisions are known
                owner[arm, seed] = folder
                if d is not None:
                    samples = samples or keys
                    try:
                        d = realign(d, keys["keys"], samples["keys"])
                    except ValueError as err:
                        raise RecipeError(f"merge: {folder}: {arm} seed {seed}: {err}") from None
                    decided[arm, seed] = d
                arms.setdefault(arm, {})[seed] = {**numbers, "decisions": d}
        for part in ("differences", "curves", "runs"):
            merged[part].update(s.get(part) or {})
    arms = {a: dict(sorted(arms[a].items(), key=lambda kv: int(kv[0]))) for a in trained if a in arms}
    seeds = sorted({int(seed) for by_seed in arms.values() for seed in by_seed})
    for a, b in comparisons:
        if a not in arms or b not in arms:
            continue
        for seed in seeds:
            key = difference_key(a, b, seed)
            after, before = stand_in(decided, trained, a, seed), stand_in(decided, trained, b, seed)
            if key not in merged["differences"] and after is not None and before is not None:
                merged["differences"][key] = {**paired(samples, after, before, resamples), "merged": True}
    settings = dict(first["settings"])
    settings.update(
        seeds=seeds,
        arms={
            a: first["settings"]["arms"].get(a)
            or next(s["settings"]["arms"][a] for _, s in runs if a in s["settings"]["arms"])
            for a in arms
        },
        sources=[
            {
                "run": path,
                "arms": list(s["arms"]),
                "seeds": s["settings"]["seeds"],
                "device": s["settings"]["options"].get("device", "cpu"),
                "machine": s["settings"].get("machine"),
                "seconds": s.get("seconds"),
            }
            for path, (_, s) in zip(paths, runs, strict=True)
        ],
    )
    settings["repeated"] = repeated  # untrained arms scored in two runs, with the same numbers
    settings["options"] = {**settings["options"], "seeds": ",".join(map(str, seeds)), "merge": ",".join(paths)}
    summary = {
        "settings": settings,
        "test_samples": first["test_samples"],
        "samples": samples,
        "arms": arms,
        "differences": dict(sorted(merged["differences"].items(), key=lambda kv: order_key(kv[0], comparisons))),
        "curves": merged["curves"],
        "runs": merged["runs"],
        "seconds": round(sum(s.get("seconds") or 0 for _, s in runs), 1),
    }
    rescored = [s["rescore"] for _, s in runs if s.get("rescore")]
    if rescored:  # runs made by `rescore=`: where their models were first scored, and the decisions made alike
        summary["rescore"] = {
            "from": ", ".join(r["from"] for r in rescored),
            **{k: ", ".join(sorted({str(r[k]) for r in rescored})) for k in ("eval_backend", "device")},
            "agreement": {key: a for r in rescored for key, a in r["agreement"].items()},
        }
    summary["across_seeds"] = across_seeds(summary, trained)
    return summary


def same_numbers(a: dict, b: dict) -> bool:
    """Two scorings of an untrained arm agree: the same NAR, attempt rates and sample count (greedy, deterministic)."""
    keys = ("n", "nar", "attempt_rate_prefer_tool", "attempt_rate_prefer_no_tool")
    return all(a.get(k) == b.get(k) for k in keys)


def stand_in(decided: dict, trained: dict[str, bool], arm: str, seed: int) -> str | None:
    """The arm's decisions on this seed; an untrained arm's from any seed (it ignores the seed)."""
    if (arm, str(seed)) in decided:
        return decided[arm, str(seed)]
    if not trained[arm]:
        return next((d for (a, _), d in sorted(decided.items()) if a == arm), None)
    return None


def order_key(key: str, comparisons) -> tuple[int, int]:
    name, seed = key.rsplit(", seed ", 1)
    names = [f"{a} - {b}" for a, b in comparisons]
    return (names.index(name) if name in names else len(names), int(seed))
