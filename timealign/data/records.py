"""What every data loader returns, and the pieces the TicToc and dialog loaders share.

A loader turns input records into typed items (TicToc samples, pair rows, TIMER dialogs) collected in a
`LoadResult`. A record that cannot be used raises a `RecordError` (one subclass per format) that names the file and
the record; with `on_error="skip"` the loader keeps it in `LoadResult.rejects` as `{"source", "id", "reason"}`
(data prep writes them to rejects.jsonl) and goes on with the rest.

`read_records` reads a JSON-list or JSONL data file for every loader, so that they all treat bad files alike:
bytes that are not UTF-8 are kept (as lone surrogates) so that the record holding them can be named (`undecodable`)
instead of the whole file failing with a UnicodeDecodeError; a file that is not JSON, nests deeper than the parser
can go, is a JSON object instead of a list of records, or is empty is an error naming the file.
"""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, TypeVar

from timealign.config.options import RecipeError

ON_ERROR = ("raise", "skip")

T = TypeVar("T")


class RecordError(ValueError):
    """A record that cannot be used; the message names the source (file) and the record id."""

    def __init__(self, source: str, record_id: str | None, reason: str):
        self.source, self.record_id, self.reason = source, record_id, reason
        where = f"{source}: record {record_id!r}" if record_id is not None else source
        super().__init__(f"{where}: {reason}")


class MissingData(FileNotFoundError):
    """The data the recipe points at is not there: a folder without data files, a data file that links to nothing, a
    prepared folder without its dataset. The commands print its one line (exit 2, as for a data.path that does not
    exist); any other FileNotFoundError is a failure inside timealign or a library and keeps its traceback."""


class NoUsableData(RecipeError):
    """Data prep found nothing to train on: every record rejected, or no record at all (exit 2: the recipe points at
    the wrong data, or data that must be fixed first)."""


def nothing_usable(what: str, where: str, rejects: list[dict], loaded: int = 0, why: str = "") -> NoUsableData:
    """The one-line error of a data prep that kept no `what` (pairs, dialogs) from `where` (`data.path=...`)."""
    if rejects:
        first = rejects[0]
        record = f"record {first['id']!r}: " if first.get("id") is not None else ""
        return NoUsableData(
            f"{where}: no usable {what}: all {reject_count(rejects)} records were rejected (first: {first['source']}: "
            f"{record}{first['reason']}); fix those records, or point data.path at the data you meant"
        )
    if loaded:
        return NoUsableData(f"{where}: no {what} from its {loaded} records{why}")
    return NoUsableData(
        f"{where}: no records at all (every data file is an empty list): point data.path at the data you meant"
    )


class DamagedPreparedData(RecipeError):
    """A prepared data folder whose saved dataset cannot be read (a truncated Arrow file, a split removed)."""


def load_saved_datasets(prepared: Path, command: str):
    """The `datasets.DatasetDict` saved in `prepared`/dataset (datasets reads every Arrow stream to its end here);
    a damaged one is a one-line error naming the folder and how to write it again.

    Read into memory, not memory-mapped: `.map` on a memory-mapped split writes its result as `cache-*.arrow` beside
    the split, and the next run with the same function read that file back unchecked (the seal leaves such caches
    out): an edited cache (a pair's margin) trained silently, a truncated one was a pyarrow traceback. In memory, no
    map writes or reads a cache on disk, so every run renders and tokenizes from the sealed data (v1 with the tiny
    model: about 4.5 CPU s to build the trainer against 1.1 s on a cache hit; the prepared data is a few MB)."""
    from datasets import load_from_disk

    path = Path(prepared) / "dataset"
    try:
        data = load_from_disk(str(path), keep_in_memory=True)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError and names no file
        detail = " ".join(str(err).split())[:200]
        raise DamagedPreparedData(
            f"{prepared}: the prepared data cannot be read ({type(err).__name__}: {detail}); it was written by "
            f"timealign: remove the folder (training prepares it again) or write it again with `{command} "
            f"out={prepared}`"
        ) from None
    return data


def reject_count(rejects: list[dict]) -> int:
    """Records rejected: a whole file's reject counts the records it holds (`records`), any other one counts 1."""
    return sum(r.get("records") or 1 for r in rejects)


def reject_reasons(rejects: list[dict]) -> dict[str, int]:
    """Records rejected per reason (the text before its first colon), a whole file's reject counting the records
    it holds, as `reject_count` does: the manifest's `reject_reasons` adds up to its `rejects`."""
    counts: dict[str, int] = {}
    for reject in rejects:
        reason = reject["reason"].split(":")[0]
        counts[reason] = counts.get(reason, 0) + (reject.get("records") or 1)
    return counts


def records_in(path: str | Path) -> int | None:
    """How many records a data file holds (None when it cannot be read as records)."""
    try:
        return len(read_records(Path(path), RecordError))
    except (RecordError, OSError):
        return None


@dataclass
class LoadResult(Generic[T]):
    """The items a loader produced and the records it rejected (with `on_error="skip"`)."""

    samples: list[T] = field(default_factory=list)
    rejects: list[dict] = field(default_factory=list)  # {"source", "id", "reason"}
    # Good records that a documented rule of the layout leaves out (the hub release's uncertain preferences): not
    # rejects, but counted in the manifest with their reason. {"source", "id", "split", "reason"}
    left_out: list[dict] = field(default_factory=list)
    # Duplicate checks: a key of a kept item (e.g. ("id", record id, elapse level)) -> what the loader needs to name
    # that earlier record when a later one has the same key.
    seen: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def dialogs(self) -> list[T]:
        """`samples` under the name the dialog loaders' callers use."""
        return self.samples

    def extend(self, other: "LoadResult[T]") -> None:
        self.samples += other.samples
        self.rejects += other.rejects
        self.left_out += other.left_out
        for key, first in other.seen.items():
            self.seen.setdefault(key, first)

    def reject(self, source: str, record_id: str | None, reason: str) -> None:
        self.rejects.append({"source": source, "id": record_id, "reason": reason})

    def reject_file(self, source: str, reason: str) -> None:
        """A whole file rejected (`on_error="skip"`): its reject line counts the records it holds (`records`)."""
        self.rejects.append({"source": source, "id": None, "reason": reason, "records": records_in(source)})

    def leave_out(self, source: str, record_id: str | None, split: str, reason: str) -> None:
        """A good record that a rule of its layout leaves out (not a reject: nothing is wrong with it)."""
        self.left_out.append({"source": source, "id": record_id, "split": split, "reason": reason})

    def add(self, on_error: str, make: Callable[[], T | None]) -> None:
        """Keep the item `make()` builds from one record; its `RecordError` is raised (`on_error="raise"`) or kept
        as a reject (`"skip"`). `make()` returns None for a record it left out (`leave_out`)."""
        try:
            item = make()
        except RecordError as err:
            if on_error != "skip":
                raise
            self.reject(err.source, err.record_id, err.reason)
            return
        if item is not None:
            self.samples.append(item)


def check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR:
        raise RecipeError(f"data.on_error={on_error!r} is not one of: {', '.join(ON_ERROR)}")


def broken_link(path: Path) -> str | None:
    """Why `path` is a symbolic link that leads to no file (a loop back to itself, or a target that is not there),
    else None. `Path.is_file()` is False for both, so a folder listing would drop such a file without a word."""
    if not path.is_symlink():
        return None
    try:
        path.stat()
    except OSError as err:
        target = os.readlink(path)
        if err.errno == errno.ELOOP:
            return f"a symbolic link that leads back to itself (-> {target}): a loop that holds no data"
        if err.errno == errno.ENOENT:
            return f"a symbolic link to {target}, which does not exist"
        return f"a symbolic link to {target} that cannot be followed ({err.strerror})"
    return None


def data_files(path: Path) -> list[Path]:
    """A file itself, or the .json and .jsonl files of a folder (sorted; `.JSON` counts too); MissingData when
    there are none, or when one is a link to nothing (to itself, or to a file not there)."""
    if path.is_dir():
        named = sorted(p for p in path.iterdir() if p.suffix.lower() in (".json", ".jsonl"))
        for p in named:
            problem = broken_link(p)
            if problem:
                raise MissingData(f"{p}: {problem}; replace it with the data file or remove it")
        files = [p for p in named if p.is_file()]
        if not files:
            raise MissingData(f"{path}: no .json or .jsonl files")
        return files
    if not path.exists():
        raise MissingData(f"{path}: no such file or folder")
    return [path]


# ---------------------------------------------------------------------------------------------- reading data files


def read_text(path: Path) -> str:
    """A data file's text as UTF-8 (a leading byte-order mark dropped). A byte that is not UTF-8 becomes a lone
    surrogate (U+DC80-U+DCFF, Python's surrogateescape) instead of failing the whole file: `undecodable` finds the
    record that holds it."""
    return Path(path).read_bytes().decode("utf-8-sig", errors="surrogateescape")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _first_bad_byte(text: str, with_line: bool = True) -> str | None:
    """`byte 0xe9 at line 3` for the first lone surrogate of a text, or None when it is all valid UTF-8."""
    found = _SURROGATE.search(text)
    if found is None:
        return None
    ch = found.group()
    what = f"byte 0x{ord(ch) - 0xDC00:02x}" if ch >= "\udc80" else f"an unpaired surrogate U+{ord(ch):04X}"
    return f"{what} at line {text.count(chr(10), 0, found.start()) + 1}" if with_line else what


def undecodable(record: Any) -> str | None:
    """Where a parsed record holds text that is not valid UTF-8 (`history[2].content: byte 0xe9`), or None. Such
    text cannot be tokenized or saved; it usually means the file was written in another encoding (Latin-1, cp1252)."""
    stack: list[tuple[str, Any]] = [("", record)]  # iterative: records may nest as deep as the JSON parser allows
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            bad = _first_bad_byte(value, with_line=False)
            if bad:
                return f"{where or 'the record'}: {bad}"
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                bad = _first_bad_byte(str(key), with_line=False)
                if bad:
                    return f"a key of {where or 'the record'}: {bad}"
                stack.append((f"{where}.{key}" if where else str(key), item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return None


def _parse(text: str) -> Any:
    """json.loads whose failures are ValueErrors with a reason fit for a person (RecursionError included)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read (more levels than Python's recursion limit)") from None
    except json.JSONDecodeError as err:
        reason = f"malformed JSON: {err}"
        bad = _first_bad_byte(text, with_line="\n" in text.rstrip())
        if bad:
            reason += f"; the text is not valid UTF-8 either ({bad}): save the file as UTF-8"
        raise ValueError(reason) from None


def read_records(
    path: Path, error: type[RecordError], *, jsonl: bool | None = None
) -> list[tuple[str | None, Any, str | None]]:
    """(line, record, parse error) for every record of a data file; `line` is `"line N"` for a JSONL line, None for
    an entry of a JSON list.

    `jsonl`: None decides by the file (a `.json` file or a text starting with `[` is one JSON list, else JSON
    Lines); False requires a JSON list. A JSONL line that is not JSON comes back with its parse error (the loader
    rejects that line and keeps the others). Problems of the file as a whole raise `error(path, None, reason)`:
    empty (no text at all; an explicit `[]` is a list of no records), not JSON, nested too deeply, a JSON object or
    scalar instead of a list of records, a pretty-printed JSON value in a `.jsonl` file.
    """
    source = str(path)
    text = read_text(path)
    if not text.strip():
        raise error(source, None, "empty file: no records (remove it, or fill it)")
    whole = jsonl is False or path.suffix.lower() == ".json" or text.lstrip().startswith("[")
    if not whole:
        lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        out = []
        for n, line in lines:
            try:
                out.append((f"line {n}", _parse(line), None))
            except ValueError as err:
                out.append((f"line {n}", None, str(err)))
        if out[0][2] is not None and len(lines) > 1:
            try:  # one pretty-printed value over several lines: say so once, not once per line
                value = _parse(text)
            except ValueError:
                value = None
            if value is not None:
                raise error(
                    source,
                    None,
                    f"a {_kind(value)} written over {len(lines)} lines, not JSON Lines (one "
                    "record per line): write one record per line, or a JSON list in a .json "
                    "file",
                )
        return out
    try:
        data = _parse(text)
    except ValueError as err:
        reason = str(err)
        first = text.lstrip().splitlines()[0]
        if "Extra data" in reason and first.startswith("{"):
            try:
                json.loads(first)
                reason += " (it looks like JSON Lines: one record per line belongs in a .jsonl file)"
            except (json.JSONDecodeError, RecursionError):
                pass
        raise error(source, None, reason) from None
    if not isinstance(data, list):
        keys = f" with keys {', '.join(sorted(map(str, data))[:8])}" if isinstance(data, dict) else ""
        raise error(source, None, f"expected a JSON list of records (or JSON Lines), got a {_kind(data)}{keys}")
    return [(None, record, None) for record in data]  # `[]` says "no records" on purpose (an empty v1 level file)


def _kind(value: Any) -> str:
    return {dict: "JSON object", list: "JSON list", str: "JSON string"}.get(
        type(value), f"JSON {type(value).__name__}"
    )


def write_jsonl(items: Iterable[dict], path: str | Path) -> Path:
    """One JSON object per line (UTF-8, non-ASCII kept); creates the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item, ensure_ascii=False) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[dict]:
    """Every non-blank line of a JSONL file, parsed."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
