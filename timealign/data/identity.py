"""What data an evaluation scored, named the same way in every report, log line, W&B run and model-card row.

    {"source": "v1", "path": "../shared/data/tictoc-v1", "split": "test", "samples": 64, "available": 685,
     "fingerprint": "3f2a...", "prepared": "pairs-3f2a9c1b7d2e", "sample_sha256": "...", "sampling": "stratified",
     "max_samples": 64, "seed": 0, "by_label": {...}, "label": "v1 tictoc-v1/test n=64 [3f2a9c1b7d2e]"}

- `fingerprint`: the prepared data's fingerprint (`timealign.data.fingerprint`: data settings, source files'
  content, format version) when the suite read prepared data; for a file given to a suite directly
  (`timelychat.data=`) the hash of its files' content; for generated items the hash of what generates them.
- `sample_sha256`: the hash of the scored sample's ids (sorted): equal exactly when two evaluations scored the same
  samples.
- `label`: one short line without absolute paths (the path's last component), for tables and W&B names.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable

from timealign.data.sampling import sample_key


def _sha256(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def sample_sha256(rows: Iterable[dict]) -> str:
    return _sha256(sorted(sample_key(r) for r in rows))


def short_path(path: str | None) -> str | None:
    """The last component of a path (a hub id stays whole): what labels and run names show."""
    if not path:
        return None
    p = Path(str(path))
    if not p.is_absolute() and not str(path).startswith((".", "~")) and str(path).count("/") == 1 and not p.exists():
        return str(path)  # owner/name on the hub
    return p.name or str(path)


def data_label(identity: dict) -> str:
    """`SOURCE PATH/SPLIT n=N [FINGERPRINT12]`: which data, which split, how many samples."""
    where = short_path(identity.get("path"))
    split = identity.get("split")
    head = identity.get("source") or "?"
    body = "/".join(str(p) for p in (where, split) if p)
    fingerprint = (identity.get("fingerprint") or "")[:12]
    return " ".join(
        p for p in (head, body, f"n={identity.get('samples')}", f"[{fingerprint}]" if fingerprint else "") if p
    )


def data_tag(identity: dict) -> str:
    """A W&B-name-safe short form: `SOURCE-SPLIT-FINGERPRINT8`."""
    parts = [identity.get("source") or "data", identity.get("split"), (identity.get("fingerprint") or "")[:8]]
    return "-".join(str(p) for p in parts if p)


def finish(identity: dict, rows: list[dict]) -> dict:
    identity["samples"] = len(rows)
    identity["sample_sha256"] = sample_sha256(rows)
    identity["label"] = data_label(identity)
    return identity


def prepared_identity(
    data, folder: str | Path, kind: str, split: str, rows: list[dict], sample_info: dict | None = None
) -> dict:
    """The identity of `rows`, drawn from `split` of the prepared data in `folder` (the recipe's `data` section)."""
    from timealign.data.fingerprint import read_fingerprint

    found = read_fingerprint(folder, kind)
    identity = {
        "source": data.source,
        "path": None if data.source == "synthetic" else data.path,
        "split": split,
        "kind": kind,
        "fingerprint": found.sha256 if found else None,
        "prepared": Path(folder).name,
        **(sample_info or {}),
    }
    return finish(identity, rows)


def files_identity(source: str, path: str | Path, rows: list[dict], split: str | None = None, **extra) -> dict:
    """The identity of rows read straight from a file or folder (its files' content hashed)."""
    from timealign.data.fingerprint import source_files

    identity = {
        "source": source,
        "path": str(path),
        "split": split,
        "fingerprint": _sha256(source_files(path)),
        **extra,
    }
    return finish(identity, rows)


def generated_identity(source: str, settings: dict, rows: list[dict], split: str | None = None) -> dict:
    """The identity of generated items (a synthetic held-out set, a suite's generated questions)."""
    identity = {
        "source": source,
        "path": None,
        "split": split,
        "settings": settings,
        "fingerprint": _sha256({"source": source, **settings}),
    }
    return finish(identity, rows)


def same_data(a: dict | None, b: dict | None) -> bool:
    """Two identities name the same data set and split (the sample drawn from it may differ)."""
    if not a or not b:
        return False
    return a.get("fingerprint") == b.get("fingerprint") and a.get("split") == b.get("split")
