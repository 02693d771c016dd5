"""TimelyChat and dialog loaders and validation: records become `TimerDialog`s for TIMER-style SFT and evaluation.

Layouts (one record each; a JSON list, JSONL, or a folder of them):
- timelychat (the TimelyChat authors' evaluation layout): `speaker_list` and `context` (same length: the dialog so
  far), `target_speaker`, `time_elapsed` ("20 minutes", "1 hour 30 minutes", ...), `timely_response` (the reply after
  the delay), `untimely_response` (the instant reply; optional), and optionally `id`, `narrative`, `duration`.
- dialogs (training data in general): `{"id"?, "turns": [{"speaker", "utterance", "delay"?}, ...],
  "untimely_response"?}`; `delay` is the time elapsed before that turn (a phrase, an ISO-8601 duration, or a number
  of minutes; default 0); the last turn is the target.
- hub (`timealign.data.hub.load_timelychat_release`): a release as published (hub id or local folder), either
  layout, detected per record.
- in memory (`dialog_records`): records already loaded, e.g. from the synthetic generator.

Everything becomes a `TimerDialog`: speakers, utterances and minutes per turn, the last turn being the target, plus
the instant (untimely) alternative of the target if there is one. Utterances are whitespace-normalised (runs of
spaces and newlines become one space: the no-special-tokens format separates turns with newlines).

Bad input (not a mapping, `speaker_list` and `context` of different lengths, an empty utterance or speaker, an
unparseable interval, a TIMER marker such as `<UTT>` inside the text, text that is not valid UTF-8, a record id seen
before in the same load, ...) raises `DialogFormatError` naming the file and the record; with `on_error="skip"` the
rest is kept and each reject is returned with its reason (data prep, `timealign.data.timer_prep`, writes them to
`rejects.jsonl`). A TimelyChat record is a two-party dialog: at most two speakers, and `target_speaker` is one of
`speaker_list`'s (the dialogs layout may have more speakers). A file that is empty, not JSON, a JSON object instead
of a list of records, or a pretty-printed value in a `.jsonl` file is an error naming the file
(`timealign.data.records.read_records`; skip mode rejects the file and reads the others).

`timer_sequences` gives the training sequences of one dialog (with their trained turns), as the TIMER trainer uses
them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from timealign.data.records import LoadResult, RecordError, check_on_error, data_files, read_records, undecodable
from timealign.render.intervals import IntervalParseError, parse_minutes
from timealign.render.timer import TIMER_TOKENS, TimerTurn

LAYOUTS = ("timelychat", "dialogs")
_SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "eval": "eval",
    "test": "eval",
    "valid": "eval",
    "validation": "eval",
    "dev": "eval",
}


class DialogFormatError(RecordError):
    """A dialog record that cannot be used; the message names the file and the record."""


@dataclass
class TimerDialog:
    id: str
    speakers: list[str]
    utterances: list[str]
    minutes: list[float]  # elapsed before each turn (context turns: 0)
    instant_response: str | None = None  # the target turn's untimely alternative (tau = 0)
    source: str = ""
    split: str = "train"
    narrative: str | None = None
    # Each turn's interval as the data wrote it ("1 hour 30 minutes"; None where it was a number or not given): the
    # TimelyChat suite's interval_reading=paper reads gold intervals from it as the authors' script does. Not part of
    # a prepared row (`to_row`), which keeps the minutes.
    elapsed_texts: list[str | None] | None = field(default=None, compare=False)

    def turns(self) -> list[TimerTurn]:
        return [TimerTurn(s, u, m) for s, u, m in zip(self.speakers, self.utterances, self.minutes)]

    @property
    def context(self) -> list[TimerTurn]:
        return self.turns()[:-1]

    @property
    def target_speaker(self) -> str:
        return self.speakers[-1]

    @property
    def target_minutes(self) -> float:
        return self.minutes[-1]

    def to_row(self) -> dict:
        return {
            "id": self.id,
            "speakers": self.speakers,
            "utterances": self.utterances,
            "minutes": self.minutes,
            "instant_response": self.instant_response,
            "source": self.source,
            "split": self.split,
            "narrative": self.narrative,
        }

    @classmethod
    def from_row(cls, row: dict) -> "TimerDialog":
        return cls(
            id=row["id"],
            speakers=list(row["speakers"]),
            utterances=list(row["utterances"]),
            minutes=[float(m) for m in row["minutes"]],
            instant_response=row.get("instant_response"),
            source=row.get("source") or "",
            split=row.get("split") or "train",
            narrative=row.get("narrative"),
        )


def timer_sequences(dialog: TimerDialog, loss_turns: str = "all", emit_instant_counterpart: bool = False):
    """(turns, trained turns, turns whose interval is trained) for the training sequences of one dialog.

    The dialog itself (turns per `loss_turns`, utterance and interval both trained), and with
    `emit_instant_counterpart` (when the dialog has an untimely response) the same context with the target at
    tau = 0 and the untimely response. In the counterpart only the reply is trained, conditioned on tau = 0 (the
    paper's "mutual exclusivity": the same context, another interval, another reply): its interval is given, not
    trained, because its context is exactly the delayed sequence's, and training "0 minutes" there would teach the
    model that one context calls for both intervals. Its context is not trained again either.
    """
    from timealign.render.timer import TimerRenderer

    turns = dialog.turns()
    train = TimerRenderer.train_turn_indices(len(turns), loss_turns)
    out = [(turns, train, train)]
    if emit_instant_counterpart and dialog.instant_response:
        instant = turns[:-1] + [TimerTurn(dialog.target_speaker, dialog.instant_response, 0.0)]
        out.append((instant, [len(instant) - 1], []))
    return out


# ---------------------------------------------------------------------------------------------- validation


def _text(value: Any, source: str, rid: str, what: str) -> str:
    if not isinstance(value, str):
        raise DialogFormatError(source, rid, f"{what} must be a string, got {type(value).__name__}")
    text = " ".join(value.split())
    if not text:
        raise DialogFormatError(source, rid, f"{what} is empty")
    for marker in TIMER_TOKENS:
        if marker in text:
            raise DialogFormatError(source, rid, f"{what} contains the reserved TIMER marker {marker}")
    return text


def _minutes(value: Any, source: str, rid: str, what: str) -> float:
    try:
        return parse_minutes(value)
    except IntervalParseError as err:
        raise DialogFormatError(source, rid, f"{what}: {err}") from None


def _record_id(record: Any, index: int) -> str:
    if isinstance(record, dict) and record.get("id") not in (None, ""):
        return str(record["id"])
    return f"#{index}"


def detect_layout(record: Any) -> str | None:
    if isinstance(record, dict):
        if "turns" in record:
            return "dialogs"
        if "context" in record or "speaker_list" in record:
            return "timelychat"
    return None


def timelychat_dialog(record: Any, source: str, index: int, split: str = "train") -> TimerDialog:
    """One TimelyChat-layout record as a TimerDialog; raises DialogFormatError."""
    rid = _record_id(record, index)
    if not isinstance(record, dict):
        raise DialogFormatError(source, rid, f"a record must be a JSON object, got {type(record).__name__}")
    for key in ("speaker_list", "context", "target_speaker", "time_elapsed", "timely_response"):
        if key not in record or record[key] is None:
            raise DialogFormatError(source, rid, f"missing `{key}`")
    speakers, context = record["speaker_list"], record["context"]
    if not isinstance(speakers, list) or not isinstance(context, list):
        raise DialogFormatError(source, rid, "`speaker_list` and `context` must be lists")
    if len(speakers) != len(context):
        raise DialogFormatError(
            source,
            rid,
            f"`speaker_list` has {len(speakers)} entries but `context` has "
            f"{len(context)}; they must be the same length",
        )
    if not context:
        raise DialogFormatError(source, rid, "`context` is empty (the target reply needs a dialog before it)")
    spk = [_text(s, source, rid, f"speaker_list[{i}]") for i, s in enumerate(speakers)]
    utt = [_text(u, source, rid, f"context[{i}]") for i, u in enumerate(context)]
    target = _text(record["target_speaker"], source, rid, "`target_speaker`")
    names = ", ".join(repr(s) for s in dict.fromkeys(spk))
    if len(set(spk)) > 2:
        raise DialogFormatError(
            source, rid, f"`speaker_list` has {len(set(spk))} speakers ({names}); a TimelyChat dialog is between two"
        )
    if target not in spk:
        raise DialogFormatError(
            source,
            rid,
            f"`target_speaker` {target!r} is not one of the dialog's speakers ({names}; names are compared exactly)",
        )
    minutes = _minutes(record["time_elapsed"], source, rid, "`time_elapsed`")
    timely = _text(record["timely_response"], source, rid, "`timely_response`")
    instant = record.get("untimely_response")
    if instant is not None:
        instant = _text(instant, source, rid, "`untimely_response`")
    return TimerDialog(
        id=rid,
        speakers=spk + [target],
        utterances=utt + [timely],
        minutes=[0.0] * len(utt) + [minutes],
        instant_response=instant,
        source=source,
        split=split,
        narrative=record.get("narrative") if isinstance(record.get("narrative"), str) else None,
        elapsed_texts=[None] * len(utt) + [elapsed if isinstance(elapsed := record["time_elapsed"], str) else None],
    )


def dialog_from_turns(record: Any, source: str, index: int, split: str = "train") -> TimerDialog:
    """One dialog-layout record (`turns` with speaker, utterance, delay) as a TimerDialog; raises DialogFormatError."""
    rid = _record_id(record, index)
    if not isinstance(record, dict):
        raise DialogFormatError(source, rid, f"a record must be a JSON object, got {type(record).__name__}")
    turns = record.get("turns")
    if not isinstance(turns, list) or len(turns) < 2:
        raise DialogFormatError(source, rid, "`turns` must be a list of at least 2 turns (context + target)")
    spk, utt, mins, texts = [], [], [], []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise DialogFormatError(source, rid, f"turns[{i}] must be an object with speaker, utterance, delay")
        for key in ("speaker", "utterance"):
            if key not in turn:
                raise DialogFormatError(source, rid, f"turns[{i}] has no `{key}`")
        spk.append(_text(turn["speaker"], source, rid, f"turns[{i}].speaker"))
        utt.append(_text(turn["utterance"], source, rid, f"turns[{i}].utterance"))
        delay = turn.get("delay")
        mins.append(0.0 if delay is None else _minutes(delay, source, rid, f"turns[{i}].delay"))
        texts.append(delay if isinstance(delay, str) else None)
    instant = record.get("untimely_response")
    if instant is not None:
        instant = _text(instant, source, rid, "`untimely_response`")
    return TimerDialog(
        id=rid,
        speakers=spk,
        utterances=utt,
        minutes=mins,
        instant_response=instant,
        source=source,
        split=split,
        narrative=record.get("narrative") if isinstance(record.get("narrative"), str) else None,
        elapsed_texts=texts,
    )


def to_dialog(record: Any, source: str, index: int, split: str = "train", layout: str | None = None) -> TimerDialog:
    bad = undecodable(record)
    if bad:
        rid = _record_id(record, index)
        raise DialogFormatError(
            source,
            rid if undecodable(rid) is None else f"#{index}",
            f"text that is not valid UTF-8 at {bad} (is the file in another encoding, e.g. Latin-1? save it as UTF-8)",
        )
    layout = layout or detect_layout(record)
    if layout == "timelychat":
        return timelychat_dialog(record, source, index, split)
    if layout == "dialogs":
        return dialog_from_turns(record, source, index, split)
    raise DialogFormatError(
        source,
        _record_id(record, index),
        "unknown record layout: expected TimelyChat fields (speaker_list, context, ...) or `turns`",
    )


# ---------------------------------------------------------------------------------------------- reading files


def iter_records(file: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(index, record, parse error) for each record of a JSON list or JSONL file (index: the list position, or the
    line number - 1). A file that cannot hold records at all raises DialogFormatError (see `read_records`)."""
    for i, (line, record, error) in enumerate(read_records(file, DialogFormatError)):
        if line is None:
            yield i, record, None
            continue
        reason = None if error is None else f"{line} is not valid JSON: {error.removeprefix('malformed JSON: ')}"
        yield int(line.removeprefix("line ")) - 1, record, reason


def _collect(
    records: Iterable[tuple[int, Any, str | None]],
    source: str,
    split: str,
    layout: str | None,
    on_error: str,
    result: LoadResult[TimerDialog],
) -> None:
    """Dialogs from (index, record, parse error) triples of one source; a record id may be used once per load (in
    `result`): a later record with it is a duplicate naming the first. Records without an id (`#<index>`) are
    distinct within their source."""
    check_on_error(on_error)

    def dialog(index: int, record: Any, parse_error: str | None) -> TimerDialog:
        if parse_error:
            raise DialogFormatError(source, f"#{index}", parse_error)
        made = to_dialog(record, source, index, split, layout)
        explicit = isinstance(record, dict) and record.get("id") not in (None, "")
        key = ("dialog id", made.id) if explicit else ("dialog id", source, made.id)
        first = result.seen.get(key)
        if first is not None:
            if first["source"] == source:
                reason = f"duplicate record id in this file: record #{first['index']} has it too"
            else:
                reason = f"duplicate record id: record #{first['index']} of {first['source']} has it too"
            raise DialogFormatError(source, made.id, reason)
        result.seen[key] = {"source": source, "index": index}
        return made

    for index, record, parse_error in records:
        result.add(on_error, lambda: dialog(index, record, parse_error))


def dialog_records(
    records: Iterable[Any],
    source: str,
    split: str = "train",
    *,
    layout: str | None = None,
    on_error: str = "raise",
    result: LoadResult[TimerDialog] | None = None,
) -> LoadResult[TimerDialog]:
    """Dialogs from records already in memory (`generate_timelychat`'s output, for example).

    `source` names them in errors and rejects; every dialog gets `split`; the layout is detected per record unless
    given. The dialogs and rejects are added to `result` (a new one when None), which is returned.
    """
    result = LoadResult() if result is None else result
    _collect(((i, r, None) for i, r in enumerate(records)), source, split, layout, on_error, result)
    return result


def file_split(file: Path, split_names: dict[str, str] | None = None, default: str = "train") -> str:
    """A file's split from its stem: `train.jsonl` -> the train split; `eval`, `test`, `valid`, `validation`, `dev`
    -> the eval split (`split_names` maps "train"/"eval" to the recipe's split names); other stems: `default`."""
    names = {"train": "train", "eval": "eval", **(split_names or {})}
    stem = re.sub(r"-\d+-of-\d+$", "", file.stem.lower())  # a hub shard: train-00000-of-00002
    role = _SPLIT_ALIASES.get(stem)
    return names[role] if role else default


def load_files(
    path: str | Path | list[Path],
    layout: str | None = None,
    on_error: str = "raise",
    split_names: dict[str, str] | None = None,
) -> LoadResult[TimerDialog]:
    """Every record of a file or folder, or of a list of files (layout detected per record unless given). In a
    folder or a list, a file's stem names its split (see `file_split`); a single file, and folder files with other
    names, go to the train split."""
    names = {"train": "train", "eval": "eval", **(split_names or {})}
    result = LoadResult()
    check_on_error(on_error)
    several = isinstance(path, list) or Path(path).is_dir()
    for file in path if isinstance(path, list) else data_files(Path(path)):
        split = file_split(file, names, names["train"]) if several else names["train"]
        try:
            records = list(iter_records(file))
        except DialogFormatError as err:  # the file as a whole: skip mode rejects it and reads the others
            if on_error != "skip":
                raise
            result.reject(err.source, None, err.reason)
            continue
        _collect(records, str(file), split, layout, on_error, result)
    return result


def load_timelychat(
    path: str | Path, on_error: str = "raise", split_names: dict[str, str] | None = None
) -> LoadResult[TimerDialog]:
    return load_files(path, "timelychat", on_error, split_names)


def load_dialogs(
    path: str | Path, on_error: str = "raise", split_names: dict[str, str] | None = None
) -> LoadResult[TimerDialog]:
    return load_files(path, "dialogs", on_error, split_names)
