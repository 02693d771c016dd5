"""What a run scored, per arm and seed, and the checks `rescore=` and `merge=` make of it before any work.

A held-out sample's ids say which samples were scored, not what their prompts said: a copy of the v1 folder with
every system prompt edited keeps the ids. So every run and rescore keeps, per arm and seed, `scored_on` in real.json's
`runs.<arm>-seed<seed>`: the prepared data's fingerprint (`timealign.data.fingerprint`) as its parts, the hash of the
source files' content (`files`: what every arm of a run shares), the data format's version and the data settings,
and every setting that changes a rendered prompt (`timealign.eval.data_identity.RENDER_SETTINGS`, which a test holds
to the render code). They are compared part by part, not by the fingerprint's hash: a setting that a newer timealign
added is not a difference (the hash changes with it), one that both know and that differs is.

- `rescore=RUN data=...`: every arm and seed RUN scored must have scored what this data and RUN's options give now
  (for a run written before `scored_on` was kept: the fingerprint of the prepared data its evaluator report names,
  from that folder's manifest.json under RUN's models/, where it is still there);
- `merge=`: all runs share `files`, and an arm in two runs its format version, data settings and prompt settings.
Runs that kept neither are compared by their held-out samples only, as before (`settings.data.sample_sha256`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from timealign.config import RecipeError
from timealign.eval.data_identity import RENDER_SETTINGS
from timealign.experiment.real.arms import ARMS
from timealign.experiment.seeds import load_run

SHOWN = 4  # differences named in a message


def parts(found) -> dict:
    """A data fingerprint (`timealign.data.fingerprint.Fingerprint`) as the parts that are compared."""
    files = hashlib.sha256(json.dumps(found.sources, sort_keys=True).encode()).hexdigest()
    return {"fingerprint": found.sha256, "files": files, "format_version": found.format_version,
            "settings": found.settings}  # fmt: skip


def scored_on(recipe) -> dict:
    """What an evaluation with `recipe` scores (the module docstring)."""
    from timealign.data.prepared import fingerprint_of

    prompts = {}
    for key in RENDER_SETTINGS:
        section, name = key.split(".", 1)
        prompts[key] = getattr(getattr(recipe, section), name)
    # as real.json holds it (tuples as lists), so that a record read back compares equal
    return json.loads(json.dumps({**parts(fingerprint_of(recipe)), "prompts": prompts}, default=str))


def read_run(path: str, option: str) -> tuple[Path, dict]:
    """(folder, real.json) of a finished run; one line when the file is not an experiment-real run's real.json."""
    folder, summary = load_run(path, option)
    settings = summary.get("settings") if isinstance(summary, dict) else None
    arms = summary.get("arms") if isinstance(summary, dict) else None
    if not isinstance(settings, dict) or not isinstance(settings.get("options"), dict) or not isinstance(arms, dict):
        raise RecipeError(f"{option}: {folder / 'real.json'} is not an experiment-real run's real.json (no "
                          "settings.options or arms); give a finished run's folder")  # fmt: skip
    unknown = sorted(set(arms) - set(ARMS))
    if not arms or unknown or not all(isinstance(by_seed, dict) and by_seed for by_seed in arms.values()):
        raise RecipeError(f"{option}: {folder / 'real.json'} is not an experiment-real run's real.json (its arms: "
                          f"{', '.join(arms) or 'none'}; experiment-real's: {', '.join(ARMS)}); give a finished "
                          "run's folder")  # fmt: skip
    return folder, summary


def recorded(folder: Path, summary: dict, arm: str, seed: int | str) -> dict | None:
    """What the run in `folder` scored on one arm and seed: its `scored_on`, else the fingerprint of the prepared data
    its evaluator report names (no prompt settings: an older report does not say the recipe's), else None."""
    from timealign.data.fingerprint import read_fingerprint

    runs = summary.get("runs")
    facts = runs.get(f"{arm}-seed{seed}") if isinstance(runs, dict) else None
    if isinstance(facts, dict) and isinstance(facts.get("scored_on"), dict):
        return facts["scored_on"]
    report_file = folder / "eval" / f"{arm}-seed{seed}" / "tictoc.json"
    if not report_file.is_file():
        return None
    try:
        prepared = (json.loads(report_file.read_text()).get("data") or {}).get("prepared")
    except (ValueError, AttributeError) as err:
        raise RecipeError(f"{report_file}: not an evaluator report ({err}); the run's eval/ is damaged") from None
    manifests = sorted(folder.glob(f"models/*/data/{prepared}/manifest.json")) if prepared else []
    found = read_fingerprint(manifests[0].parent, "pairs") if manifests else None
    return parts(found) if found else None


def differences(theirs: dict, mine: dict) -> list[str]:
    """`what: theirs -> mine` for each part that differs (module docstring: keys only one side knows are not)."""
    lines = []
    for key, what in (("format_version", "data format version"), ("files", "the data files' content")):
        if key in theirs and key in mine and theirs[key] != mine[key]:
            lines.append(f"{what} {str(theirs[key])[:12]} -> {str(mine[key])[:12]}")
    for block in ("settings", "prompts"):
        a, b = theirs.get(block) or {}, mine.get(block) or {}
        lines += [f"{key} {a[key]} -> {b[key]}" for key in sorted(set(a) & set(b)) if a[key] != b[key]]
    return lines


def shown(lines: list[str]) -> str:
    return "; ".join(lines[:SHOWN]) + (f"; ... ({len(lines)} differences)" if len(lines) > SHOWN else "")


def check_rescore(folder: Path, summary: dict, mine: dict[tuple[str, int], dict], data: str) -> None:
    """Refuse a rescore whose data or prompt settings are not those RUN scored (one line, before any scoring)."""
    there = summary["settings"]["options"].get("data")
    for (arm, seed), identity in mine.items():
        theirs = recorded(folder, summary, arm, seed)
        lines = differences(theirs, identity) if theirs else []
        if lines:
            raise RecipeError(f"rescore: {arm} seed {seed} of {folder} was scored on other data or prompts than "
                              f"data={data} gives now ({shown(lines)}; fingerprint {str(theirs['fingerprint'])[:12]} "
                              f"there, data={there}; {identity['fingerprint'][:12]} here): give data= the run's v1 "
                              "folder, as it was")  # fmt: skip


def check_merge(runs: list[tuple[Path, dict]]) -> None:
    """Refuse runs that scored other data, or an arm on other settings or prompts (module docstring), in one line
    naming both runs."""
    first: tuple[Path, str, dict] | None = None  # the first arm and seed with a record: its data files
    seen: dict[str, tuple[Path, str, dict]] = {}  # arm -> its first record
    for folder, summary in runs:
        for arm, by_seed in summary["arms"].items():
            for seed in by_seed:
                identity = recorded(folder, summary, arm, seed)
                if identity is None:
                    continue
                key = f"{arm}-seed{seed}"
                if first is None:
                    first = (folder, key, identity)
                elif "files" in identity and identity["files"] != first[2].get("files", identity["files"]):
                    raise RecipeError(f"merge: {folder} ({key}) and {first[0]} ({first[1]}) scored other data (the "
                                      f"data files' content {identity['files'][:12]} and {first[2]['files'][:12]}): "
                                      "only runs on the same data merge")  # fmt: skip
                if arm not in seen:
                    seen[arm] = (folder, key, identity)
                    continue
                lines = differences(seen[arm][2], identity)
                if lines:
                    raise RecipeError(f"merge: {folder} ({key}) and {seen[arm][0]} ({seen[arm][1]}) scored {arm} "
                                      f"on other data or prompts ({shown(lines)}): only runs on the same data "
                                      "merge")  # fmt: skip
