"""The two file layouts of the synthetic TicToc data: annotated JSONL and the v1 release folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from timealign.data.synthetic.generator import clone_json
from timealign.data.synthetic.labels import SCORE_ORIENTATION
from timealign.data.timing import LEVELS

V1_FILES = (
    "preferTool_elapse_0.json",
    "preferTool_elapse_1.json",
    "preferTool_elapse_2.json",
    "preferNoTool_elapse_0.json",
    "preferNoTool_elapse_1.json",
)


def _is_tool(record: Mapping[str, Any]) -> bool:
    orientation = record.get("score_orientation", SCORE_ORIENTATION)
    if orientation != SCORE_ORIENTATION:
        raise ValueError(f"unsupported score_orientation {orientation!r}")
    return record["score"] > 1.5


def to_v1_layout(records: Sequence[dict], confident_only: bool = False) -> dict[str, list[dict]]:
    """Group annotated records into the v1 files ``prefer{Tool,NoTool}_elapse_{k}.json``.

    Records sharing an id must cover all 3 elapse levels (generate_annotated's output does):
    the final user message then carries the list of 3 times, like the v1 release. Label =
    score > 1.5. ``confident_only`` drops 0.5 <= S <= 2.5, as the paper's filtering did.
    The 5 release files are always present; ``preferNoTool_elapse_2.json`` is added only
    when a custom threshold makes it non-empty (the release has no such file).
    """
    by_id: dict[str, dict[int, dict]] = {}
    for r in records:
        levels = by_id.setdefault(r["id"], {})
        if r["elapse_level"] in levels:
            raise ValueError(f"duplicate elapse level {r['elapse_level']} for id {r['id']!r}")
        levels[r["elapse_level"]] = r
    files: dict[str, list[dict]] = {name: [] for name in V1_FILES}
    for rid, levels in by_id.items():
        if set(levels) != set(LEVELS):
            raise ValueError(f"id {rid!r} has elapse levels {sorted(levels)}; v1 needs all of {LEVELS}")
        times = [levels[lv]["history"][-1]["time"] for lv in LEVELS]
        for lv in LEVELS:
            r = levels[lv]
            if confident_only and 0.5 <= r["score"] <= 2.5:
                continue
            history = clone_json(r["history"])
            history[-1]["time"] = list(times)
            name = f"prefer{'Tool' if _is_tool(r) else 'NoTool'}_elapse_{lv}.json"
            files.setdefault(name, []).append({"id": rid, "history": history, "function": clone_json(r["function"])})
    return files


def write_v1_layout(files: Mapping[str, list[dict]], folder: str | Path) -> list[Path]:
    """Write ``to_v1_layout`` output as JSON files into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, items in files.items():
        p = folder / name
        p.write_text(json.dumps(items, ensure_ascii=False, indent=1), encoding="utf-8")
        paths.append(p)
    return paths
