"""Released data sets from the Hugging Face hub, as published: `data.source=hub data.path=yizecheng/TicToc`.

`release_folder(path)` is the release on this machine: `path` itself when it is a local folder (a copy made with
`hf download ORG/NAME --repo-type dataset --local-dir DIR`), else the hub dataset's snapshot from
`huggingface_hub.snapshot_download(repo_type="dataset")`. A snapshot already in the local cache (HF_HUB_CACHE,
default ~/.cache/huggingface/hub: `datasets--ORG--NAME/snapshots/<revision>/<files>`, `refs/main` naming the
revision) is used as it is; with HF_HUB_OFFLINE=1 only the cache is read. A release that cannot be had is a
`RecipeError` (exit 2) saying how to download it and which key to point at the copy.

The layout is read off the files present (.json, .jsonl, .parquet anywhere in the release, hidden folders left out;
docs/hub_data.md):
- TicToc v1 (`load_tictoc_release`): one folder of `prefer{Tool,NoTool}_elapse_{0,1,2}.json` files (`load_v1`;
  a record's annotator scores, `score` or `scores`, become its S);
- TicToc hub (`timealign.data.tictoc_hub`): the layout `yizecheng/TicToc` is published in, `train.parquet` and
  `test.parquet` whose rows carry `id` (ending `_tv1/2/3`), `history`, `function`, `preference` and `pref_score`;
  every other data file beside them is an error listing them (their records would be lost);
- TicToc annotated: files whose records carry `score` (the annotators' mean S) and `elapse_level`
  (`load_annotated`; parquet rows through `annotated_records`);
- TimelyChat (`load_timelychat_release`): files of TimelyChat-layout (`speaker_list`, `context`, ...) or
  dialogs-layout (`turns`) records; a file's name says its split (`train`, `eval`/`test`/`validation`, also as
  hub shards `train-00000-of-00001`).
Anything else is a `RecipeError` listing the files found and the layouts accepted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from timealign.config import RecipeError
from timealign.data.records import LoadResult, RecordError, broken_link, read_records
from timealign.data.tictoc import annotated_records, load_annotated, load_v1
from timealign.data.tictoc_hub import LAYOUT as HUB_LAYOUT
from timealign.data.tictoc_hub import is_hub_row, load_hub
from timealign.data.tictoc_layout import V1_FILE, TicTocSample
from timealign.data.timelychat import TimerDialog, detect_layout, dialog_records, file_split, load_files

DATA_SUFFIXES = (".json", ".jsonl", ".parquet")
TICTOC_LAYOUTS = (
    "TicToc v1: one folder of prefer{Tool,NoTool}_elapse_{0,1,2}.json files (JSON lists of id, "
    f"history, function; optional per-sample score/scores); {HUB_LAYOUT}; TicToc annotated: .json/.jsonl/.parquet "
    "records with score (the annotators' mean S) and elapse_level"
)
TIMELYCHAT_LAYOUTS = (
    "TimelyChat: .json/.jsonl/.parquet records with speaker_list and context (or turns), the "
    "file name naming the split (train, eval, test, validation)"
)


def _download_hint(path: str) -> str:
    return (
        f"download it where the hub is reachable: `hf download {path} --repo-type dataset --local-dir DIR`, "
        f"copy DIR here and set data.path=DIR (or copy the hub cache's datasets--{path.replace('/', '--')} "
        "folder into HF_HUB_CACHE here)"
    )


def release_folder(path: str) -> Path:
    """The release's files on this machine: a local folder as given, else the hub dataset's snapshot (cache first;
    HF_HUB_OFFLINE=1: the cache only). Raises RecipeError when it cannot be had."""
    local = Path(path).expanduser()
    if local.is_dir():
        return local
    if local.exists():
        raise RecipeError(
            f"data.path={path} (data.source=hub): a file; give a hub dataset id (e.g. "
            "yizecheng/TicToc) or the folder of a downloaded release"
        )
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return Path(snapshot_download(repo_id=path, repo_type="dataset"))
    except LocalEntryNotFoundError:
        why = (
            "HF_HUB_OFFLINE=1 allows the cache only"
            if constants.HF_HUB_OFFLINE
            else "the hub cannot be reached from here"
        )
        raise RecipeError(
            f"data.path={path} (data.source=hub): the hub dataset is not in the local cache "
            f"({constants.HF_HUB_CACHE}) and {why}; {_download_hint(path)}"
        ) from None
    except GatedRepoError:
        raise RecipeError(
            f"data.path={path} (data.source=hub): the dataset is gated: accept its terms on "
            f"https://huggingface.co/datasets/{path} and log in (`hf auth login` or HF_TOKEN)"
        ) from None
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise RecipeError(
            f"data.path={path} (data.source=hub): no such dataset on the hub (or it is private: "
            "log in with `hf auth login` or HF_TOKEN); a local release is a folder that exists here"
        ) from None
    except HFValidationError as err:
        raise RecipeError(
            f"data.path={path} (data.source=hub): neither a local folder nor a hub dataset id "
            f"(ORG/NAME): {' '.join(str(err).split())}"
        ) from None
    except (HfHubHTTPError, OSError) as err:
        raise RecipeError(
            f"data.path={path} (data.source=hub): {' '.join(str(err).split())[:300]}; {_download_hint(path)}"
        ) from None


def check_release(data) -> None:
    """With data.source=hub, the release is on this machine (downloaded now, or in the cache): called before any
    work, so that an offline machine stops with the download hint instead of after claiming output_dir."""
    if data.source == "hub" and data.path:
        release_folder(data.path)


def data_files_in(folder: Path, path: str | None = None) -> list[Path]:
    """The .json/.jsonl/.parquet files of a release, any depth, hidden folders (.cache, .git) left out.

    A linked folder is entered once: a link to a folder the walk has entered already (`ln -s . D/a`, a loop the walk
    would follow forever, or a second way into the same files) is a RecipeError naming the link, as is a data file
    that is a link to nothing (itself, or a missing target). `path`: data.path as given, for the message."""
    out = []
    where = f"data.path={path or folder} (data.source=hub)"
    entered = {_folder_key(folder): Path(folder)}  # every folder walked, by (device, inode), whatever leads to it
    for root, dirs, files in os.walk(folder, followlinks=True):
        kept = []
        for name in sorted(d for d in dirs if not d.startswith(".")):
            sub = Path(root, name)
            key = _folder_key(sub)
            if key in entered:
                first = entered[key]
                if first == Path(root) or first in Path(root).parents:
                    link, what = _link_on_the_way(sub, folder), f"a loop: it leads back to {first}, which holds it"
                else:  # two ways into one folder: name the one that is a link
                    link, other = (sub, first) if _link_on_the_way(sub, folder).is_symlink() else (first, sub)
                    link = _link_on_the_way(link, folder)
                    what = f"the same folder as {other}, whose files would be read twice"
                if not link.is_symlink():  # one folder under two names without a link (a bind mount)
                    raise RecipeError(f"{where}: {sub} is {what}; remove one of the two")
                raise RecipeError(f"{where}: {link} is a link to {os.readlink(link)}, {what}; remove the link")
            entered[key] = sub
            kept.append(name)
        dirs[:] = kept
        for name in sorted(f for f in files if Path(f).suffix.lower() in DATA_SUFFIXES):
            file = Path(root, name)
            problem = broken_link(file)
            if problem:
                raise RecipeError(f"{where}: {file} is {problem}; replace it with the data file or remove it")
            out.append(file)
    return out


def _link_on_the_way(path: Path, top: Path) -> Path:
    """The link the walk from `top` followed to reach `path`: `path` itself or its nearest parent below `top` that is
    a link (`ln -s .. D/up` leads back into D as D/up/D, which is no link itself); `path` when there is none."""
    for candidate in (path, *path.parents):
        if candidate == top or Path(top) not in candidate.parents:
            break
        if candidate.is_symlink():
            return candidate
    return path


def _folder_key(folder: Path) -> tuple[int, int]:
    st = os.stat(folder)
    return st.st_dev, st.st_ino


def _rows(file: Path) -> list[Any]:
    """The records of one data file (parquet rows as dicts; JSON/JSONL records as parsed, bad lines left out)."""
    if file.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(file).to_pylist()
        except Exception as err:  # pyarrow's errors name no file
            raise RecordError(str(file), None, f"not a readable parquet file: {err}") from None
    return [record for _, record, error in read_records(file, RecordError) if error is None]


def _first_record(file: Path) -> dict | None:
    try:
        rows = _rows(file)
    except RecordError:
        return None  # not records at all: not this layout (listed if no layout matches)
    return next((r for r in rows if isinstance(r, dict)), None)


def _no_layout(path: str, folder: Path, files: list[Path], layouts: str) -> RecipeError:
    found = ", ".join(str(f.relative_to(folder)) for f in files[:10]) or "no .json, .jsonl or .parquet file"
    more = f" and {len(files) - 10} more" if len(files) > 10 else ""
    return RecipeError(
        f"data.path={path} (data.source=hub): the release at {folder} is in no layout timealign "
        f"reads (found: {found}{more}); accepted: {layouts}. A release in another layout: convert it "
        "to one of these and point data.path at the folder"
    )


def load_tictoc_release(
    path: str,
    *,
    orientation: str = "tool_high",
    on_error: str = "raise",
    unknown: str = "error",
    assume_timezone: str | None = None,
) -> LoadResult[TicTocSample]:
    """A TicToc release (hub id or local folder) in the v1 or the annotated layout, detected from its files."""
    folder = release_folder(path)
    files = data_files_in(folder, path)
    common = {"on_error": on_error, "unknown": unknown, "assume_timezone": assume_timezone}
    v1_folders = sorted({f.parent for f in files if V1_FILE.match(f.name)})
    if len(v1_folders) > 1:
        raise RecipeError(
            f"data.path={path} (data.source=hub): TicToc v1 files in {len(v1_folders)} folders of "
            f"{folder} ({', '.join(str(d.relative_to(folder)) or '.' for d in v1_folders)}): set "
            "data.source=v1 data.path=<the one to read>"
        )
    if v1_folders:
        return load_v1(v1_folders[0], orientation=orientation, **common)
    published = [f for f in files if f.suffix.lower() == ".parquet" and is_hub_row(_first_record(f))]
    if published:
        others = [f for f in files if f not in published]
        if others:
            listed = ", ".join(str(f.relative_to(folder)) for f in others)
            raise RecipeError(
                f"data.path={path} (data.source=hub): {folder} holds the hub layout's "
                f"{', '.join(str(f.relative_to(folder)) for f in published)} and other data files ({listed}), "
                "whose records would be lost: point data.path at a folder holding train.parquet and test.parquet only"
            )
        return load_hub(published, orientation=orientation, **common)
    annotated = [f for f in files if {"score", "elapse_level"} <= set(_first_record(f) or {})]
    if not annotated:
        raise _no_layout(path, folder, files, TICTOC_LAYOUTS)
    result = load_annotated(
        [f for f in annotated if f.suffix.lower() != ".parquet"], orientation=orientation, **common
    )
    for file in (f for f in annotated if f.suffix.lower() == ".parquet"):
        annotated_records(_rows(file), str(file), result, orientation=orientation, **common)
    return result


def load_timelychat_release(
    path: str, on_error: str = "raise", split_names: dict[str, str] | None = None
) -> LoadResult[TimerDialog]:
    """A TimelyChat release (hub id or local folder): its dialog files, the split named by each file's name."""
    folder = release_folder(path)
    files = data_files_in(folder, path)
    dialogs = [f for f in files if detect_layout(_first_record(f)) is not None]
    if not dialogs:
        raise _no_layout(path, folder, files, TIMELYCHAT_LAYOUTS)
    names = {"train": "train", "eval": "eval", **(split_names or {})}
    result = load_files([f for f in dialogs if f.suffix.lower() != ".parquet"], on_error=on_error, split_names=names)
    for file in (f for f in dialogs if f.suffix.lower() == ".parquet"):
        dialog_records(
            _rows(file), str(file), file_split(file, names, names["train"]), on_error=on_error, result=result
        )
    return result
