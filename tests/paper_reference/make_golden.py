"""Writes tests/golden/paper_prompts.json: paper-protocol prompts of real v1 samples, rendered by timealign.

    python -m tests.paper_reference.make_golden      # ../shared/reference/tictoc, or TIMEALIGN_TICTOC_REPO=...

Every golden prompt is first checked against the authors' own handlers (chengez/TicToc at c0b2b56, imported from
../shared/reference/tictoc or a checkout named by TIMEALIGN_TICTOC_REPO; tests/paper_reference/authors.py); the
script refuses to write a prompt that differs, and refuses to run without their code. Beside the golden file it
writes paper_prompts.provenance.json: repository, commit, date and the sha256 of every file of theirs it read.
The v1 samples are read through the real data path (load_v1 -> pair rows -> Arrow), as training and evaluation
read them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.paper_reference import authors

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "paper_prompts.json"
# What the golden prompts were checked against: the authors' repository, commit, date and the sha256 of each of their
# files the check read (tests/test_paper_prompts.py compares them with the reference at hand).
PROVENANCE = GOLDEN.with_name("paper_prompts.provenance.json")
AUTHORS_REPOSITORY, AUTHORS_COMMIT = "github.com/chengez/TicToc", "c0b2b56"
V1 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tictoc-v1"

# (file, index) of the samples per model: Python-literal arguments and two tool calls in one message
# (tide_height_12), markup and non-ASCII text (weatherforecast_012), short ones of other files.
SAMPLES = {
    "default": [
        ("preferTool_elapse_1.json", 122),
        ("preferTool_elapse_2.json", 100),
        ("preferNoTool_elapse_0.json", 0),
    ],
    # Llama's template refuses two calls in one message (tide_height_12): the authors skipped it.
    "llama3_1": [
        ("preferNoTool_elapse_1.json", 5),
        ("preferTool_elapse_2.json", 100),
        ("preferNoTool_elapse_0.json", 0),
    ],
    "llama3_2": [
        ("preferTool_elapse_0.json", 3),
        ("preferTool_elapse_2.json", 100),
        ("preferNoTool_elapse_1.json", 9),
    ],
}
SETTINGS = [(True, "none"), (False, "none")]
FIRST_SAMPLE_SETTINGS = [(True, "reminder"), (True, "rules"), (False, "reminder")]


def sample_rows(v1: Path) -> dict[tuple[str, int], dict]:
    """Every v1 sample as a pair row's `prompt`/`tools`, through load_v1, the pair builder and an Arrow round trip."""
    from datasets import Dataset

    from timealign.data.tictoc import load_v1
    from timealign.data.tictoc_pairs import build_pair

    loaded = load_v1(v1, unknown="bucket")
    keys = [
        (f.name, i) for f in sorted(v1.glob("prefer*_elapse_*.json")) for i in range(len(json.loads(f.read_text())))
    ]
    if len(keys) != len(loaded.samples):
        raise RuntimeError(f"{v1}: {len(keys)} records but {len(loaded.samples)} samples loaded")
    margins = {"prefer_tool": 1.0, "prefer_no_tool": 1.0}
    rows = Dataset.from_list(
        [build_pair(s, default_margins=margins, direct_answer="latest_tool_result") for s in loaded.samples]
    ).to_list()
    return dict(zip(keys, rows, strict=True))


def render(model: str, row: dict, timestamps: bool, prompt_mode: str) -> str:
    from timealign.render.paper import PAPER_MODELS, PaperRenderer

    spec = PAPER_MODELS[model]
    renderer = PaperRenderer(
        None,
        timestamps=timestamps,
        prompt_mode=prompt_mode,
        family=spec["family"],
        thinking=spec.get("thinking", False),
        bos=spec.get("bos", ""),
    )
    return renderer.prompt(row["prompt"], row["tools"])


def provenance(repo: Path, cases: int) -> dict:
    """The record of the check: each golden prompt equals the authors' rendering with these files of theirs."""
    import datetime
    import hashlib

    inference = repo / "inference"
    read = sorted(
        [
            *(repo / "templates").glob("*.jinja"),
            *(inference / "local").glob("*.py"),
            inference / "model_handler.py",
            inference / "sys_pmts.py",
        ]
    )
    return {
        "repository": AUTHORS_REPOSITORY,
        "commit": AUTHORS_COMMIT,
        "verified": datetime.date.today().isoformat(),
        "cases": cases,
        "checked_by": "tests/paper_reference/authors.py render: their inference/local/<handler>.py format_input",
        "files_sha256": {p.relative_to(repo).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in read},
    }


def cases() -> list[dict]:
    out = []
    for model in authors.HANDLERS:
        for k, (file, index) in enumerate(SAMPLES.get(model, SAMPLES["default"])):
            for timestamps, mode in SETTINGS + (FIRST_SAMPLE_SETTINGS if k == 0 else []):
                out.append(
                    {"model": model, "file": file, "index": index, "timestamps": timestamps, "prompt_mode": mode}
                )
    return out


def main() -> int:
    rows = sample_rows(V1)
    repo = authors.authors_repo()
    if repo is None:  # a golden file is only ever written as the authors render it
        print(
            f"the authors' code is needed to write golden prompts: {authors.SHARED_REFERENCE} or "
            "TIMEALIGN_TICTOC_REPO=/path/to/chengez/TicToc",
            file=sys.stderr,
        )
        return 2
    raw = {f.name: json.loads(f.read_text()) for f in V1.glob("*.json")}
    golden = []
    for case in cases():
        row = rows[(case["file"], case["index"])]
        prompt = render(case["model"], row, case["timestamps"], case["prompt_mode"])
        sample = raw[case["file"]][case["index"]]
        level = int(case["file"].rsplit("_", 1)[1].split(".")[0])
        theirs = authors.render(
            repo,
            case["model"],
            sample["history"],
            sample.get("function"),
            level=level,
            use_time_stamp=case["timestamps"],
            mode=case["prompt_mode"],
        )
        if theirs != prompt:
            print(f"differs from the authors' rendering: {case}", file=sys.stderr)
            return 1
        golden.append({**case, "id": row["id"], "prompt": prompt})
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
    PROVENANCE.write_text(json.dumps(provenance(repo, len(golden)), indent=1) + "\n")
    print(f"wrote {len(golden)} golden prompts to {GOLDEN} (each equal to the authors' handlers' rendering, {repo})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
