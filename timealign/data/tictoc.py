"""TicToc loaders: the release layouts read into one `TicTocSample` list.

- v1 release (`load_v1`): one JSON file per (label, elapse level), `prefer{Tool,NoTool}_elapse_{k}.json`; the last
  user message's `time` is a list with one timestamp per elapse level. Any other .json/.jsonl file in the folder
  (another spelling, such as `prefertool_elapse_1.json`) is an error listing them: its records would be lost.
- annotated (`load_annotated`, `annotated_records` for records in memory): JSON list or JSONL, one record per
  (trajectory, elapse level) carrying the annotators' mean score `score` (S in [0, 3]), `elapse_level`, optionally
  `direct_answer` and `scenario`.
- hub (`timealign.data.hub.load_tictoc_release`): a release as published (hub id or local folder), in either
  layout, detected from its files.

Each record is checked as `timealign.data.tictoc_layout` describes (a failed check raises `TicTocFormatError`; with
`on_error="skip"` the record is rejected with that reason and the rest kept), its id mapped to a scenario, and no
record may repeat an earlier one: the same (id, elapse level), or the same conversation and tools at the same
elapse level under another id, is rejected as a duplicate naming the earlier record. Pair rows are built from the
samples by `timealign.data.tictoc_pairs`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from datetime import tzinfo
from pathlib import Path
from typing import Any, Iterable

from timealign.data.records import LoadResult, MissingData, broken_link, check_on_error, data_files, read_records
from timealign.data.scenarios import Scenario, UnknownScenarioError, get_scenario, resolve_scenario_id
from timealign.data.tictoc_layout import (
    PREFER_NO_TOOL,
    PREFER_TOOL,
    V1_FILE,
    V1_LEVELS,
    V1_RELEASE_FILES,
    TicTocFormatError,
    TicTocSample,
    check_history,
    check_record,
    label_from_score,
    record_id,
    timezone_for,
)

logger = logging.getLogger(__name__)


def _resolve(record: dict, source: str, rid: str, unknown: str) -> Scenario:
    name = record.get("scenario")
    if name is not None and not isinstance(name, str):
        raise TicTocFormatError(source, rid, f"`scenario` must be a string, got {type(name).__name__} {name!r}")
    try:
        if name:
            try:
                return get_scenario(name)
            except KeyError:
                return resolve_scenario_id(name, unknown=unknown)
        return resolve_scenario_id(rid, unknown=unknown)
    except UnknownScenarioError as err:
        raise TicTocFormatError(source, rid, str(err)) from None


def unique_sample(result: LoadResult, sample: TicTocSample, position: str, has_id: bool) -> TicTocSample:
    """The sample, unless an earlier kept one has the same (id, elapse level), or the same conversation and tools at
    the same elapse level: then a TicTocFormatError naming both."""
    content = hashlib.sha256(
        json.dumps([sample.history, sample.tools], sort_keys=True, default=str, ensure_ascii=True).encode()
    ).hexdigest()
    id_key = ("tictoc id", sample.id if has_id else (sample.source, sample.id), sample.elapse_level)
    content_key = ("tictoc content", content, sample.elapse_level)
    mine = {
        "source": sample.source,
        "id": sample.id,
        "position": position,
        "label": sample.label,
        "score": sample.score,
        "content": content,
    }
    for key in (id_key, content_key):
        first = result.seen.get(key)
        if first is None:
            continue
        earlier = f"record {first['id']!r} ({first['position']}) of {first['source']}"
        if key is content_key and first["id"] != sample.id:
            how = "the same conversation and tools at the same elapse level under another id"
        elif first["label"] != sample.label:
            how = (
                f"same id and elapse level, but labelled {first['label']} there and {sample.label} here: "
                "contradicting labels"
            )
        elif first["content"] != content:
            how = "same id and elapse level, another conversation (an id names one trajectory per elapse level)"
        elif first["score"] != sample.score:
            how = f"same id, elapse level and conversation, score {first['score']} there and {sample.score} here"
        else:
            how = "an exact copy (same id, elapse level, conversation and label)"
        raise TicTocFormatError(sample.source, sample.id, f"this record ({position}) duplicates {earlier}: {how}")
    result.seen[id_key] = result.seen[content_key] = mine
    return sample


def _stray_reason(path: Path) -> str:
    """Why a .json/.jsonl file of a v1 folder is not read."""
    match = V1_FILE.match(path.name)
    if match:
        return f"elapse level {match.group(2)} in the file name; levels are 0-{V1_LEVELS - 1}"
    loose = re.match(V1_FILE.pattern, path.name, re.IGNORECASE)
    if loose:
        kind = "Tool" if loose.group(1).lower() == "tool" else "NoTool"
        return f"differs only in letter case from prefer{kind}_elapse_{loose.group(2)}.json"
    return "matches no prefer{Tool,NoTool}_elapse_{0,1,2}.json name"


def load_v1(
    folder: str | Path,
    *,
    on_error: str = "raise",
    unknown: str = "error",
    assume_timezone: str | None = None,
    orientation: str = "tool_high",
) -> LoadResult[TicTocSample]:
    """The v1 release folder: label and elapse level come from each file's name.

    Every other .json/.jsonl file there is an error listing them all (`on_error="skip"`: one reject per file), and
    so is a link to nothing (to itself, or to a missing file). A release file that is not there is a warning naming
    it (a partial copy reads the rest).
    `assume_timezone`: the zone of times written without one (None: such a time is an error). A record that
    carries its annotators' scores (`score`: their mean S, or `scores`: one per annotator) keeps S, read with
    `orientation`; it must agree with the file's label.
    """
    check_on_error(on_error)
    label_from_score(0.0, orientation)  # validates the orientation up front
    zone = timezone_for(assume_timezone)
    folder = Path(folder)
    named = sorted(p for p in folder.glob("*") if p.suffix.lower() in (".json", ".jsonl"))
    candidates = [p for p in named if p.is_file()]
    files = [p for p in candidates if V1_FILE.match(p.name) and int(V1_FILE.match(p.name).group(2)) < V1_LEVELS]
    stray = [p for p in candidates if p not in files]
    result = LoadResult()
    for path in named:  # a link to nothing is no file: without this it would be dropped without a word
        problem = broken_link(path)
        if problem is None:
            continue
        reason = f"{problem}; replace it with the data file or remove it"
        if on_error != "skip":
            raise TicTocFormatError(str(path), None, reason)
        result.reject(str(path), None, reason)
    if stray:
        if on_error != "skip":
            listed = "; ".join(f"{p.name} ({_stray_reason(p)})" for p in stray)
            raise TicTocFormatError(
                str(folder),
                None,
                f"{len(stray)} data file(s) that a TicToc v1 folder does not hold, so their records "
                f"would be lost: {listed}. v1 files are named exactly "
                "prefer{Tool,NoTool}_elapse_{0,1,2}.json: rename or move the others",
            )
        for path in stray:
            result.reject_file(str(path), f"not a TicToc v1 file name: {_stray_reason(path)}")
    if not files:
        raise MissingData(f"{folder}: no prefer{{Tool,NoTool}}_elapse_{{k}}.json files (TicToc v1 layout)")
    missing = [name for name in V1_RELEASE_FILES if not (folder / name).exists() and not (folder / name).is_symlink()]
    if missing:  # a partial copy trains on the rest: say which records it lacks
        logger.warning(
            "%s: no %s (the TicToc v1 release holds %s): only the other files' records are read; copy the missing "
            "file(s) in, unless you left them out on purpose",
            folder,
            ", ".join(missing),
            ", ".join(V1_RELEASE_FILES),
        )
    for path in files:
        kind, level = V1_FILE.match(path.name).groups()
        label, level = (PREFER_TOOL if kind == "Tool" else PREFER_NO_TOOL), int(level)
        source = str(path)
        try:
            entries = read_records(path, TicTocFormatError, jsonl=False)
        except TicTocFormatError as err:
            if on_error != "skip":
                raise
            result.reject(err.source, None, err.reason)
            continue
        for idx, (_, record, _) in enumerate(entries):
            rid = record_id(record, idx)

            def make(record=record, rid=rid, idx=idx):
                sample = _v1_sample(record, rid, source, label, level, unknown, zone, orientation)
                return unique_sample(result, sample, f"#{idx}", rid == record.get("id"))

            result.add(on_error, make)
    return result


def _v1_score(record: dict, source: str, rid: str, label: str, orientation: str) -> float | None:
    """The annotators' mean S of a v1 record that carries it (`score`, or `scores` per annotator), else None."""
    if record.get("score") is None and record.get("scores") is None:
        return None
    raw = record.get("score") if record.get("score") is not None else record.get("scores")
    values = raw if isinstance(raw, list) else [raw]
    if not values or any(not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 3 for v in values):
        raise TicTocFormatError(source, rid, f"annotator scores must be numbers in [0, 3], got {raw!r}")
    score = sum(values) / len(values)
    said = label_from_score(score, orientation)
    if said != label:
        raise TicTocFormatError(
            source,
            rid,
            f"score S={score:g} means {said or 'a tie'} with "
            f"data.score_orientation={orientation}, but the file says {label} (set "
            "data.score_orientation to match the release)",
        )
    return score


def _v1_sample(
    record: Any,
    rid: str,
    source: str,
    label: str,
    level: int,
    unknown: str,
    zone: tzinfo | None = None,
    orientation: str = "tool_high",
) -> TicTocSample:
    check_record(record, source, rid)
    tools = record.get("function")
    tools = [] if tools is None else tools
    history = check_history(record.get("history"), source, rid, final_time_is_list=True, tools=tools, zone=zone)
    final = dict(history[-1], time=history[-1]["time"][level])
    return TicTocSample(
        id=rid,
        scenario=_resolve(record, source, rid, unknown),
        history=history[:-1] + [final],
        tools=list(tools),
        elapse_level=level,
        label=label,
        source=source,
        score=_v1_score(record, source, rid, label, orientation),
    )


def _annotated_sample(
    record: Any, rid: str, source: str, orientation: str, unknown: str, zone: tzinfo | None = None
) -> TicTocSample:
    check_record(record, source, rid)
    tools = record.get("function", record.get("tools"))
    tools = [] if tools is None else tools
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except (json.JSONDecodeError, RecursionError):
            raise TicTocFormatError(
                source, rid, f"the tool schemas are a string that is not JSON: {tools[:80]!r}"
            ) from None
    history = check_history(record.get("history"), source, rid, final_time_is_list=False, tools=tools, zone=zone)
    level = record.get("elapse_level")
    if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level < V1_LEVELS:
        raise TicTocFormatError(source, rid, f"`elapse_level` must be 0, 1 or 2, got {level!r}")
    score = record.get("score")
    if not isinstance(score, (int, float)) or isinstance(score, bool) or not 0.0 <= score <= 3.0:
        raise TicTocFormatError(source, rid, f"`score` must be the annotators' mean in [0, 3], got {score!r}")
    stated = record.get("score_orientation")
    if stated is not None and stated != orientation:
        raise TicTocFormatError(
            source,
            rid,
            f"record says score_orientation={stated!r} but the recipe uses {orientation!r} "
            "(set data.score_orientation to match the data)",
        )
    label = label_from_score(float(score), orientation)
    if label is None:
        raise TicTocFormatError(source, rid, "score 1.5 is an exact tie: no preferred action")
    direct = record.get("direct_answer")
    if direct is not None and not isinstance(direct, str):
        raise TicTocFormatError(source, rid, f"`direct_answer` must be a string, got {type(direct).__name__}")
    return TicTocSample(
        id=rid,
        scenario=_resolve(record, source, rid, unknown),
        history=history,
        tools=list(tools),
        elapse_level=level,
        label=label,
        score=float(score),
        direct_answer=direct,
        source=source,
    )


def annotated_records(
    records: Iterable[Any],
    source: str,
    result: LoadResult[TicTocSample] | None = None,
    *,
    orientation: str = "tool_high",
    on_error: str = "raise",
    unknown: str = "error",
    assume_timezone: str | None = None,
    positions: Iterable[str] | None = None,
) -> LoadResult[TicTocSample]:
    """Samples from records already in memory, in the annotated layout (`generate_annotated`'s output, hub rows).

    `source` names them in errors and rejects; a record without an `id` is called `#<index>`. The samples and
    rejects are added to `result` (a new one when None), which is returned; a record repeating one already in
    `result` is a duplicate. `orientation`, `on_error`, `unknown` and `assume_timezone` are as in `load_annotated`;
    `positions` names each record's place in its file for duplicate messages (default `#<index>`).
    """
    check_on_error(on_error)
    zone = timezone_for(assume_timezone)
    result = LoadResult() if result is None else result
    positions = iter(positions) if positions is not None else None
    for idx, record in enumerate(records):
        rid = record_id(record, idx)
        position = next(positions) if positions is not None else f"#{idx}"

        def make(record=record, rid=rid, position=position):
            sample = _annotated_sample(record, rid, source, orientation, unknown, zone)
            return unique_sample(result, sample, position, rid == record.get("id"))

        result.add(on_error, make)
    return result


def load_annotated(
    path: str | Path | list[Path],
    *,
    orientation: str = "tool_high",
    on_error: str = "raise",
    unknown: str = "error",
    assume_timezone: str | None = None,
) -> LoadResult[TicTocSample]:
    """A JSON list or JSONL file (or a folder of them, or a list of such files) of annotated records.

    `assume_timezone`: the zone of times written without one (None: such a time is an error).
    """
    check_on_error(on_error)
    label_from_score(0.0, orientation)  # validates the orientation up front
    timezone_for(assume_timezone)
    result = LoadResult()
    for file in path if isinstance(path, list) else data_files(Path(path)):
        source = str(file)
        try:
            entries = read_records(file, TicTocFormatError)
        except TicTocFormatError as err:
            if on_error != "skip":
                raise
            result.reject(source, None, err.reason)
            continue
        records, positions = [], []
        for idx, (line, record, error) in enumerate(entries):
            if error is not None:
                if on_error != "skip":
                    raise TicTocFormatError(source, line, error)
                result.reject(source, line, error)
                continue
            records.append(record)
            positions.append(line or f"#{idx}")
        annotated_records(
            records,
            source,
            result,
            orientation=orientation,
            on_error=on_error,
            unknown=unknown,
            assume_timezone=assume_timezone,
            positions=positions,
        )
    return result
