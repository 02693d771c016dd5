"""What made a prepared-data folder: its data settings, its source files' content and the data format's version.

`data_fingerprint(kind, data, timer)` describes the data that data prep would write for these recipe sections;
data prep stores it in the folder's manifest.json (`"fingerprint"`), and `timealign.data.prepared` compares it
before any reuse. Two recipes with equal fingerprints get equal prepared data.

- settings: every `data.*` field (and for TIMER dialogs every `timer.*` field) except those in `NOT_DATA[kind]`,
  which only matter later (rendering, training) or say where the data goes; tests/test_prepared_data.py checks
  that each of them leaves the prepared data unchanged. A new recipe field counts as a data setting until it is
  added there: the safe side (a needless re-prepare, never a silent reuse).
- sources: the content of `data.path` (sha256 per file; a folder's files sorted by relative path), not its name,
  so moving a data set does not invalidate its prepared data. A hub dataset id (`data.source=hub` with no local
  folder of that name) is recorded by id and by the hashes of its snapshot's files, so a new revision of the release
  is new data. `data.source=synthetic` reads no
  files; its generator is covered by the format version.
- `data.direct_answer=generate` (pairs): the direct answers are a model's generations, so what decides them counts
  too (`timealign.data.generated_answers.AnswerGeneration.settings`): `data.direct_answer_model` (resolved:
  `model.name_or_path` when unset), `_backend`, `_max_new_tokens`, the sampling settings `eval.temperature`,
  `top_p`, `top_k`, `min_p`, `seed`, `reasoning`, the weights' dtype (`eval.dtype`) or the served model, and the
  prompt settings `PROMPT_SETTINGS` (render-only otherwise); the checkpoint's identity (a local folder's weight
  files: name, size, mtime) is a source, `direct_answer_model`. With any other strategy `GENERATE_ONLY` fields are
  not settings (they are not read).
- content (not part of the fingerprint: what data prep wrote, not what it was asked for): `seal` records in
  manifest.json the sha256 of every file data prep wrote (`"content"`) and of the manifest itself
  (`"manifest_sha256"`); `check_loadable` (every load, for training and evaluation) re-hashes them and checks each
  split's row count against the manifest's, so a folder edited by hand (a pair's chosen and rejected swapped, a
  count changed) stops the run naming the file. A folder sealed by no one (an older timealign) loads with a warning.
- format_version: `DATA_FORMAT_VERSION`. Bump it whenever data prep writes different rows for the same settings
  and sources (a loader, the pair builder, a generator, a column's layout): every older folder then stops
  matching.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from timealign.config import RecipeError
from timealign.data.records import MissingData

logger = logging.getLogger(__name__)

# 2: tool-call arguments stored as the source wrote them (the paper protocol renders them raw); 3: an empty
# `tool_calls`, a call without an id and mapping arguments kept as such (`arguments_mapping`)
DATA_FORMAT_VERSION = 3

MANIFEST = "manifest.json"
CONTENT = "content"  # manifest key: {relative path: sha256} of every file data prep wrote
MANIFEST_SHA = "manifest_sha256"  # manifest key: the hash of the manifest's other keys
# `Dataset.map` caches beside the data, written by an older timealign's training (the splits are read into memory
# now, so no map writes or reads one: `timealign.data.records.load_saved_datasets`); not data prep's, so not sealed
DATASETS_CACHE = re.compile(r"^(cache-[0-9a-f]+\.arrow|tmp[\w-]*)$")
COUNT_KEYS = {"pairs": "pairs", "dialogs": "dialogs"}  # the manifest's row count per split, by kind
DIRECT_ANSWER_SOURCE = "direct_answer_model"  # sources key: the checkpoint that wrote the direct answers
KINDS = ("pairs", "dialogs")
NOT_A_SETTING = "<not a setting then>"
KIND_NAMES = {"pairs": "TicToc offset-DPO pairs", "dialogs": "TIMER SFT dialogs"}
PREP_COMMANDS = {"pairs": "python data_prep/tictoc.py", "dialogs": "python data_prep/timelychat.py"}

# Fields read only after data prep (rendering, training) or that say where data goes. data.path is hashed by
# content instead (see `source_files`).
_WHERE = {"data.path", "data.prepared_dir", "data.prep_timeout"}
_RENDER = {
    "data.timestamps",
    "data.elapsed",
    "data.elapsed_separator",
    "data.protocol",
    "data.offset_scale",
    "data.overlength",
}
_TICTOC_ONLY = {
    "data.score_orientation",
    "data.margin_prefer_tool",
    "data.margin_prefer_no_tool",
    "data.min_margin",
    "data.unknown_scenarios",
    "data.direct_answer",
    "data.synthetic_trajectories",
    "data.synthetic_max_rounds",
    "data.synthetic_sensitivity_swap",
    "data.balance_train_labels",
    "data.balance_within",
    "data.validation_share",
    "data.validation_by",
}
_TIMER_TRAINING = {
    "timer.lambda_time",
    "timer.special_tokens",
    "timer.order",
    "timer.loss_turns",
    "timer.loss_normalization",
    "timer.emit_instant_counterpart",
    "timer.lora_new_tokens",
}
# Settings only when data.direct_answer=generate (pairs); with another strategy nothing reads them.
GENERATE_ONLY = {"data.direct_answer_model", "data.direct_answer_backend", "data.direct_answer_max_new_tokens"}
# Render settings that decide the prompts the direct answers are generated from (data.direct_answer=generate).
PROMPT_SETTINGS = {"data.timestamps", "data.elapsed", "data.elapsed_separator", "data.protocol"}
NOT_DATA = {
    "pairs": _WHERE | _RENDER,  # and no timer.* field at all
    "dialogs": _WHERE | _RENDER | _TICTOC_ONLY | _TIMER_TRAINING,
}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_files(path: str | Path) -> dict[str, str]:
    """{relative path: sha256} of a file (its name) or of every file under a folder, sorted by relative path."""
    root = Path(path)
    if root.is_file():
        return {root.name: file_sha256(root)}
    if not root.is_dir():
        raise MissingData(f"data.path={path}: no such file or folder")
    files = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file())
    return {rel: file_sha256(p) for rel, p in files}


def _sources(data) -> dict:
    if data.source == "synthetic" or not data.path:
        return {}  # synthetic reads no files; a missing path is the loader's error to report
    if data.source == "hub" and not Path(data.path).exists():
        from timealign.data.hub import release_folder

        # the snapshot's files, not only the id: a new revision of the release is new data
        return {"data.path": {"hub": data.path, "files": source_files(release_folder(data.path))}}
    return {"data.path": {"files": source_files(data.path)}}


def _generates(kind: str, data) -> bool:
    return kind == "pairs" and getattr(data, "direct_answer", None) == "generate"


def _settings(kind: str, data, timer, generation=None) -> dict:
    sections = [("data", data)] + ([("timer", timer)] if kind == "dialogs" else [])
    generates = _generates(kind, data)
    left_out = NOT_DATA[kind] - PROMPT_SETTINGS if generates else NOT_DATA[kind] | GENERATE_ONLY
    out = {}
    for prefix, section in sections:
        for f in fields(section):
            key = f"{prefix}.{f.name}"
            if key not in left_out:
                out[key] = getattr(section, f.name)
    if generates:
        out.update(generation.settings())
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class Fingerprint:
    """The inputs of one data prep; `sha256` is their canonical JSON's hash."""

    kind: str
    settings: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    format_version: int = 0

    def inputs(self) -> dict:
        return {
            "kind": self.kind,
            "format_version": self.format_version,
            "settings": self.settings,
            "sources": self.sources,
        }

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.inputs(), sort_keys=True).encode()).hexdigest()

    def to_dict(self) -> dict:
        return {"sha256": self.sha256, **self.inputs()}

    @classmethod
    def from_dict(cls, raw: dict) -> Fingerprint:
        return cls(
            kind=raw["kind"], settings=raw["settings"], sources=raw["sources"], format_version=raw["format_version"]
        )

    def setting_changes(self, wanted: Fingerprint) -> dict[str, tuple]:
        """{key: (this folder's value, the wanted value)} for every data setting that differs."""
        keys = sorted(set(self.settings) | set(wanted.settings))
        missing = NOT_A_SETTING
        return {
            k: (self.settings.get(k, missing), wanted.settings.get(k, missing))
            for k in keys
            if self.settings.get(k, missing) != wanted.settings.get(k, missing)
        }

    def differences(self, wanted: Fingerprint, limit: int = 10) -> list[str]:
        """One readable line per difference between this (prepared) fingerprint and the wanted one."""
        if self.kind != wanted.kind:  # other settings altogether: their differences say nothing more
            return [
                f"kind: {KIND_NAMES.get(self.kind, self.kind)} (prepared) -> "
                f"{KIND_NAMES.get(wanted.kind, wanted.kind)} (this run)"
            ]
        lines = []
        if self.format_version != wanted.format_version:
            lines.append(
                f"data format version: {self.format_version} (prepared) -> {wanted.format_version} (this "
                "code: data prep now writes other rows)"
            )
        for key, (old, new) in self.setting_changes(wanted).items():
            lines.append(f"{key}: {_show(old)} (prepared) -> {_show(new)} (this run)")
        old_src, new_src = self.sources.get("data.path", {}), wanted.sources.get("data.path", {})
        if old_src != new_src:
            if "files" in old_src and "files" in new_src:
                old_files, new_files = old_src["files"], new_src["files"]
                changed = [
                    f"data.path file {name}: "
                    + (
                        "removed"
                        if name not in new_files
                        else "added"
                        if name not in old_files
                        else f"content changed (sha256 {old_files[name][:12]} -> {new_files[name][:12]})"
                    )
                    for name in sorted(set(old_files) | set(new_files))
                    if old_files.get(name) != new_files.get(name)
                ]
                lines += changed[:limit]
                if len(changed) > limit:
                    lines.append(f"... and {len(changed) - limit} more data.path files")
            else:
                lines.append(f"data.path: {_describe(old_src)} (prepared) -> {_describe(new_src)} (this run)")
        old_model = self.sources.get(DIRECT_ANSWER_SOURCE, {}).get("model", "none")
        new_model = wanted.sources.get(DIRECT_ANSWER_SOURCE, {}).get("model", "none")
        if old_model != new_model:
            lines.append(f"direct-answer model checkpoint: {old_model} (prepared) -> {new_model} (this run)")
        return lines


def _show(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def _describe(source: dict) -> str:
    if not source:
        return "no files read"
    if "hub" in source:
        return f"hub dataset {source['hub']}"
    return f"{len(source['files'])} files"


def data_fingerprint(kind: str, data, timer=None, generation=None) -> Fingerprint:
    """The fingerprint of what data prep of `kind` (pairs | dialogs) writes for these recipe sections.

    `generation`: the `AnswerGeneration` of `data.direct_answer=generate` (`AnswerGeneration.from_recipe`;
    `timealign.data.prepared.fingerprint_of` passes it), needed then and ignored otherwise.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown prepared-data kind {kind!r}; known: {', '.join(KINDS)}")
    if kind == "dialogs" and timer is None:
        raise ValueError("TIMER dialogs need the recipe's timer section for their fingerprint")
    sources = _sources(data)
    if _generates(kind, data):
        if generation is None:
            raise ValueError(
                "data.direct_answer=generate: the fingerprint needs the generation settings "
                "(AnswerGeneration.from_recipe(recipe); timealign.data.prepared.fingerprint_of passes "
                "them)"
            )
        sources[DIRECT_ANSWER_SOURCE] = {"model": generation.model_identity()}
    return Fingerprint(
        kind=kind,
        settings=_settings(kind, data, timer, generation),
        sources=sources,
        format_version=DATA_FORMAT_VERSION,
    )


class PreparedDataError(RecipeError):
    """A prepared-data folder does not hold what this run asks for; the message names the differences and the
    ways out (exit code 2, like any other option that contradicts the data)."""


def old_version_message(folder: Path, command: str) -> str:
    return (
        f"{folder} was prepared by an older timealign: its {MANIFEST} has no data fingerprint, so nothing "
        "tells which settings and source files made it, and it is not used. Either delete the folder (it is "
        f"prepared again on first use), or rewrite it with `{command} out={folder}` and this run's recipe and "
        "data.* overrides, or point data.prepared_dir at another folder."
    )


def read_fingerprint(folder: str | Path, kind: str) -> Fingerprint | None:
    """The fingerprint in `folder`'s manifest.json; None when there is no manifest. A manifest without one (an
    older version's folder), or one that is not JSON, raises PreparedDataError (`kind`: what the caller wants)."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise PreparedDataError(
            f"{path}: not valid JSON ({err}); an interrupted data prep of an older timealign? "
            "Delete the folder and run again."
        ) from err
    raw = manifest.get("fingerprint")
    if not isinstance(raw, dict):
        raise PreparedDataError(old_version_message(folder, PREP_COMMANDS[kind]))
    return Fingerprint.from_dict(raw)


def _content(folder: Path) -> dict[str, str]:
    """sha256 per file data prep wrote (less the manifest, and the `datasets` map caches an older training added)."""
    return {
        rel: digest
        for rel, digest in source_files(folder).items()
        if rel != MANIFEST and not DATASETS_CACHE.match(rel.rsplit("/", 1)[-1])
    }


def _manifest_digest(manifest: dict) -> str:
    rest = {k: v for k, v in manifest.items() if k != MANIFEST_SHA}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def seal(folder: str | Path) -> None:
    """Record in `folder`'s manifest.json the hash of every file data prep wrote and of the manifest itself
    (`timealign.data.prepared.write_prepared`, before the folder is published)."""
    path = Path(folder) / MANIFEST
    manifest = json.loads(path.read_text())
    manifest[CONTENT] = _content(Path(folder))
    manifest[MANIFEST_SHA] = _manifest_digest(manifest)
    path.write_text(json.dumps(manifest, indent=2))


def _split_rows(split_dir: Path) -> int:
    import pyarrow as pa

    rows = 0
    for arrow in sorted(split_dir.glob("data-*.arrow")):
        with pa.memory_map(str(arrow)) as source:
            rows += pa.ipc.open_stream(source).read_all().num_rows
    return rows


def content_problem(folder: str | Path, kind: str) -> str | None:
    """What changed in `folder` since data prep wrote it (a file's content, a file added or removed, the manifest,
    a split's row count), or None; also None for a folder no data prep sealed (`seal`)."""
    folder = Path(folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    content = manifest.get(CONTENT)
    if not isinstance(content, dict):
        logger.warning(
            "%s was prepared by an older timealign (no data hashes in its %s): its data cannot be "
            "checked. Delete the folder to prepare it anew",
            folder,
            MANIFEST,
        )
        return None
    if manifest.get(MANIFEST_SHA) != _manifest_digest(manifest):
        return f"{folder / MANIFEST} was edited after data prep wrote it"
    now = _content(folder)
    for rel in sorted(set(content) | set(now)):
        if rel not in now:
            return f"{folder / rel} was removed after data prep wrote it"
        if rel not in content:
            return f"{folder / rel} was added after data prep wrote the folder"
        if now[rel] != content[rel]:
            return (
                f"{folder / rel} was changed after data prep wrote it (sha256 {content[rel][:12]} -> {now[rel][:12]})"
            )
    for split, counts in (manifest.get("splits") or {}).items():
        expected = counts.get(COUNT_KEYS[kind]) if isinstance(counts, dict) else None
        split_dir = folder / "dataset" / split
        if expected is not None and split_dir.is_dir() and _split_rows(split_dir) != expected:
            return (
                f"{split_dir} holds {_split_rows(split_dir)} rows, its {MANIFEST} says {expected} {COUNT_KEYS[kind]}"
            )
    return None


def check_loadable(folder: str | Path, kind: str) -> None:
    """Refuse to load a folder of another kind or data format version, from before fingerprints, or changed since
    data prep wrote it (`content_problem`)."""
    found = read_fingerprint(folder, kind)
    if found is None:
        return  # the loader reports the missing dataset
    if found.kind != kind:
        raise PreparedDataError(
            f"{folder} holds {KIND_NAMES.get(found.kind, found.kind)}, not {KIND_NAMES[kind]}; "
            "point data.prepared_dir elsewhere"
        )
    if found.format_version != DATA_FORMAT_VERSION:
        raise PreparedDataError(
            f"{folder} was written in data format version {found.format_version}; this code "
            f"reads version {DATA_FORMAT_VERSION}. Prepare it again: delete the folder, or run "
            f"`{PREP_COMMANDS[kind]} out={folder}` with this run's recipe and data.* overrides"
        )
    problem = content_problem(folder, kind)
    if problem:
        raise PreparedDataError(
            f"{problem}: the prepared data is not what data prep wrote, and it is not used. "
            f"Re-run data prep (`{PREP_COMMANDS[kind]} recipe=NAME out={folder}` with this run's "
            "data.* overrides) or delete the folder (training prepares it again)"
        )
