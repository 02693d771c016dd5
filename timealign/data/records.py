"""What every data loader returns, and the pieces the TicToc and dialog loaders share.

A loader turns input records into typed items (TicToc samples, pair rows, TIMER dialogs) collected in a
`LoadResult`. A record that cannot be used raises a `RecordError` (one subclass per format) that names the file and
the record; with `on_error="skip"` the loader keeps it in `LoadResult.rejects` as `{"source", "id", "reason"}`
(data prep writes them to rejects.jsonl) and goes on with the rest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generic, Iterable, TypeVar

ON_ERROR = ("raise", "skip")

T = TypeVar("T")


class RecordError(ValueError):
    """A record that cannot be used; the message names the source (file) and the record id."""

    def __init__(self, source: str, record_id: str | None, reason: str):
        self.source, self.record_id, self.reason = source, record_id, reason
        where = f"{source}: record {record_id!r}" if record_id is not None else source
        super().__init__(f"{where}: {reason}")


@dataclass
class LoadResult(Generic[T]):
    """The items a loader produced and the records it rejected (with `on_error="skip"`)."""

    samples: list[T] = field(default_factory=list)
    rejects: list[dict] = field(default_factory=list)  # {"source", "id", "reason"}

    @property
    def dialogs(self) -> list[T]:
        """`samples` under the name the dialog loaders' callers use."""
        return self.samples

    def extend(self, other: "LoadResult[T]") -> None:
        self.samples += other.samples
        self.rejects += other.rejects

    def reject(self, source: str, record_id: str | None, reason: str) -> None:
        self.rejects.append({"source": source, "id": record_id, "reason": reason})

    def add(self, on_error: str, make: Callable[[], T]) -> None:
        """Keep the item `make()` builds from one record; its `RecordError` is raised (`on_error="raise"`) or kept
        as a reject (`"skip"`)."""
        try:
            item = make()
        except RecordError as err:
            if on_error != "skip":
                raise
            self.reject(err.source, err.record_id, err.reason)
            return
        self.samples.append(item)


def check_on_error(on_error: str) -> None:
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")


def data_files(path: Path) -> list[Path]:
    """A file itself, or the .json and .jsonl files of a folder (sorted); FileNotFoundError when there are none."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl") and p.is_file())
        if not files:
            raise FileNotFoundError(f"{path}: no .json or .jsonl files")
        return files
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    return [path]


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
