"""The TicToc release as published on the hub (`yizecheng/TicToc`): `train.parquet` and `test.parquet`.

One row per sample (trajectory x gap), columns:
- `id`: `<scenario>_<trajectory>_tv1|tv2|tv3`; the suffix is the gap: tv1 -> elapse level 0 (small), tv2 -> 1
  (medium), tv3 -> 2 (large), the levels of the v1 files' `elapse_{0,1,2}`;
- `history`: the messages (`role`, `content`, ISO `time` with a timezone; assistant `tool_calls` whose
  `function.arguments` is a JSON string; tool messages with `name`); the last one, the user's question, has one time;
- `function`: the tool schemas;
- `preference`: a string naming `tool`, `direct` or `any` (letter case ignored);
- `pref_score`: the annotators' mean S in [0, 3] (0 Direct, 1 Lean-Direct, 2 Lean-Tool, 3 Tool: App. D.2);
- `__file__`: the scenario's source file (optional: without it the scenario comes from the id).

`history` and `function` are read in either encoding: Arrow lists of structs, or JSON strings. A struct column gives
every element every field of the column (a user message gets `tool_calls: null`, a tool schema the properties of
every other tool as null), so in that encoding a null field is read as absent; a JSON string is read as written.

The split is the file's (`train.parquet` -> train, `test.parquet` -> test, hub shards `train-00000-of-00001` too).
The scenario is `__file__`'s stem resolved in the registry (`timealign.data.scenarios`), else the id's stem; when
neither resolves, `data.unknown_scenarios=error` stops, `bucket` keeps the name as given (the file's stem, else the
id without `_<trajectory>_tvN`) with sensitivity `unknown`.

Which rows are kept (the paper's Sec. 2.5 retention, 3,016 of 5,592 samples, which is also the set the authors'
get_metric.py scores): a row whose preference is `any`, or whose S is strictly between 0.5 and 2.5, is left out
(`LoadResult.left_out`, counted per split and reason in the manifest; the evaluation report gives its split's count).
Only the columns that decide this are checked on a row left out. A kept row's label is S's side of the tie
(`data.score_orientation`; the release's S has 3 = Tool, so tool_high: S >= 2.5 prefer-Tool, S <= 0.5 prefer-noTool),
and the preference string must name the same action: a row where they disagree is an error (with tool_low, every
kept row does: the error says to set data.score_orientation=tool_high). The pair's offset is |S - 1.5|.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

from timealign.data.records import LoadResult, check_on_error
from timealign.data.scenarios import Scenario, UnknownScenarioError, get_scenario, resolve_scenario_id
from timealign.data.tictoc import unique_sample
from timealign.data.tictoc_layout import (
    PREFER_NO_TOOL,
    PREFER_TOOL,
    TicTocFormatError,
    TicTocSample,
    check_history,
    check_record,
    label_from_score,
    record_id,
    timezone_for,
)

HUB_COLUMNS = ("id", "history", "function", "preference", "pref_score")
HUB_FILE = re.compile(r"^(train|test)(-\d{5}-of-\d{5})?\.parquet$", re.IGNORECASE)
GAP_SUFFIX = re.compile(r"_tv([123])$")
LEFT_OUT_ANY = "preference any"
LEFT_OUT_UNCERTAIN = "uncertain score (0.5 < S < 2.5)"
RETENTION_RULE = (
    "rows whose preference is 'any' or whose annotators' mean S is strictly between 0.5 and 2.5 are left out of "
    "training and evaluation (paper Sec. 2.5: 3,016 of 5,592 samples kept; the rows get_metric.py scores)"
)
LAYOUT = (
    "TicToc hub: train.parquet and test.parquet, one row per sample with id (ending _tv1/_tv2/_tv3), history, "
    "function, preference (tool/direct/any), pref_score (the annotators' mean S) and __file__"
)


def is_hub_row(record: Any) -> bool:
    """A record in the published hub layout (its first row decides a file's layout)."""
    return isinstance(record, dict) and {"id", "history", "preference", "pref_score"} <= set(record)


def hub_split(file: Path) -> str | None:
    """The split a file of the layout holds, from its name (`train.parquet`, `test-00000-of-00001.parquet`)."""
    match = HUB_FILE.match(file.name)
    return match.group(1).lower() if match else None


def _arrow_absent(value: Any) -> Any:
    """A value decoded from Arrow structs, its null fields dropped (a struct has every field of its column)."""
    if isinstance(value, dict):
        return {k: _arrow_absent(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_arrow_absent(v) for v in value]
    return value


def _nested(row: dict, column: str, source: str, rid: str) -> Any:
    """`history` / `function` in either encoding: a JSON string as written, Arrow lists of structs without nulls."""
    value = row.get(column)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise TicTocFormatError(
                source,
                rid,
                f"`{column}` is a string that is not JSON ({value[:60]!r}); write it as JSON text or as an Arrow "
                "list of structs",
            ) from None
    if value is None and column == "function":
        return []
    return _arrow_absent(value)


def _preference(value: Any, source: str, rid: str) -> str:
    """`any`, `tool` or `direct`: what the preference string names (letter case ignored)."""
    if not isinstance(value, str):
        raise TicTocFormatError(
            source, rid, f"`preference` must be a string naming tool, direct or any, got {type(value).__name__}"
        )
    text = value.lower()
    if "any" in text:
        return "any"
    named = [kind for kind in ("tool", "direct") if kind in text]
    if len(named) != 1:
        raise TicTocFormatError(
            source, rid, f"`preference` {value!r} names {'both' if named else 'neither'} of tool and direct (or any)"
        )
    return named[0]


def _score(value: Any, source: str, rid: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TicTocFormatError(source, rid, f"`pref_score` must be the annotators' mean S in [0, 3], got {value!r}")
    if not 0.0 <= value <= 3.0:
        raise TicTocFormatError(source, rid, f"`pref_score` must be the annotators' mean S in [0, 3], got {value!r}")
    return float(value)


def _level(rid: str, source: str) -> int:
    match = GAP_SUFFIX.search(rid)
    if match is None:
        raise TicTocFormatError(
            source,
            rid,
            "`id` must end in _tv1, _tv2 or _tv3 (the gap before the final question: small, medium, large)",
        )
    return int(match.group(1)) - 1


def _scenario(row: dict, rid: str, split: str, source: str, unknown: str) -> Scenario:
    """`__file__`'s stem in the registry, else the id's; neither: an error, or the given name (`unknown=bucket`)."""
    file_name = row.get("__file__")
    if file_name is not None and not (isinstance(file_name, str) and file_name.strip()):
        raise TicTocFormatError(source, rid, f"`__file__` must be the scenario's source file name, got {file_name!r}")
    stem = Path(file_name.strip()).stem if file_name else None
    trajectory = GAP_SUFFIX.sub("", rid)
    for name in (stem, trajectory):
        if not name:
            continue
        try:
            found = get_scenario(name)
        except KeyError:
            try:
                found = resolve_scenario_id(name)
            except UnknownScenarioError:
                continue
        return dataclasses.replace(found, split=split)  # the release's split is its file's
    given = stem or re.sub(r"_\d+$", "", trajectory)
    if unknown == "bucket":
        return Scenario(given, "not a scenario of the paper's Table 6", "unknown", "unknown", 0, split)
    raise TicTocFormatError(
        source,
        rid,
        f"scenario {given!r} (from {'__file__' if stem else 'the id'}) is none of the registry's "
        "(timealign/data/scenarios.py): add its stem to ALIASES, or set data.unknown_scenarios=bucket to keep it "
        "under its own name",
    )


def _check_columns(row: Any, source: str, rid: str) -> None:
    check_record(row, source, rid)
    missing = [c for c in HUB_COLUMNS if c not in row]
    if missing:
        raise TicTocFormatError(source, rid, f"no column {', '.join(missing)} (the hub layout: {LAYOUT})")
    if not isinstance(row["id"], str):
        raise TicTocFormatError(source, rid, f"`id` must be a string ending in _tv1/_tv2/_tv3, got {row['id']!r}")


def _hub_sample(
    row: dict, rid: str, file: Path, position: str, split: str, orientation: str, unknown: str, zone, result
) -> TicTocSample | None:
    source = f"{file} {position}"
    _check_columns(row, source, rid)
    level = _level(rid, source)
    kind, score = _preference(row["preference"], source, rid), _score(row["pref_score"], source, rid)
    if kind == "any" or 0.5 < score < 2.5:
        result.leave_out(str(file), rid, split, LEFT_OUT_ANY if kind == "any" else LEFT_OUT_UNCERTAIN)
        return None
    label = label_from_score(score, orientation)
    if label != (PREFER_TOOL if kind == "tool" else PREFER_NO_TOOL):
        fix = (
            "the release's S has 3 = Tool: set data.score_orientation=tool_high"
            if orientation != "tool_high"
            else "the row contradicts itself: fix its preference or its pref_score"
        )
        raise TicTocFormatError(
            source,
            rid,
            f"preference {row['preference']!r} but S={score:g} means {label} with data.score_orientation="
            f"{orientation}; {fix}",
        )
    tools = _nested(row, "function", source, rid)
    history = check_history(
        _nested(row, "history", source, rid), source, rid, final_time_is_list=False, tools=tools, zone=zone
    )
    sample = TicTocSample(
        id=rid,
        scenario=_scenario(row, rid, split, source, unknown),
        history=history,
        tools=list(tools),
        elapse_level=level,
        label=label,
        score=score,
        source=str(file),
    )
    return unique_sample(result, sample, position, True)


def read_parquet_rows(file: Path) -> list[dict]:
    """A parquet file's rows as Python values (pyarrow); a file pyarrow cannot read is an error naming it."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(file).to_pylist()
    except Exception as err:  # noqa: BLE001 - pyarrow's errors (ArrowInvalid, OSError...) name no file
        raise TicTocFormatError(
            str(file), None, f"not a readable parquet file: {' '.join(str(err).split())}"
        ) from None


def load_hub(
    files: list[Path],
    *,
    orientation: str = "tool_high",
    on_error: str = "raise",
    unknown: str = "error",
    assume_timezone: str | None = None,
) -> LoadResult[TicTocSample]:
    """The samples of the release's parquet files (module docstring); rows the retention rule leaves out are in
    `left_out`, bad rows raise TicTocFormatError naming file, row and id (`on_error="skip"`: rejected)."""
    check_on_error(on_error)
    label_from_score(0.0, orientation)  # validates the orientation up front
    zone = timezone_for(assume_timezone)
    result: LoadResult[TicTocSample] = LoadResult()
    for file in files:
        split = hub_split(file)
        if split is None:
            raise TicTocFormatError(
                str(file), None, "a hub-layout file is named train.parquet or test.parquet (its split); rename it"
            )
        try:
            rows = read_parquet_rows(file)
        except TicTocFormatError as err:
            if on_error != "skip":
                raise
            result.reject(err.source, None, err.reason)
            continue
        for idx, row in enumerate(rows):
            rid = record_id(row, idx)

            def make(row=row, rid=rid, position=f"row {idx}"):
                return _hub_sample(row, rid, file, position, split, orientation, unknown, zone, result)

            result.add(on_error, make)
    return result


def left_out_counts(left_out: list[dict]) -> dict:
    """The manifest's `left_out`: the rule, the total and per split the count of each reason."""
    by_split: dict[str, dict[str, int]] = {}
    for row in left_out:
        reasons = by_split.setdefault(row["split"], {})
        reasons[row["reason"]] = reasons.get(row["reason"], 0) + 1
    return {"rule": RETENTION_RULE, "rows": len(left_out), "by_split": dict(sorted(by_split.items()))}
