"""The released data from the hub as published (`data.source=hub data.path=yizecheng/TicToc`, issue 21 item 6).

Nothing is downloaded here: each test builds the hub's own cache layout (what `hf download` leaves behind) in a
temporary HF_HUB_CACHE, HF_HUB_OFFLINE=1 (conftest), and the real code path (`huggingface_hub.snapshot_download`)
reads it: `datasets--ORG--NAME/refs/main` names the revision, `snapshots/<rev>/<files>` are links into `blobs/`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from helpers import annotated_record, rid, run_checked, v1_record, write_v1

from timealign.config import DataSection, RecipeError
from timealign.data.hub import load_tictoc_release, load_timelychat_release
from timealign.data.pairs import load_samples, prepare
from timealign.data.tictoc import load_v1
from timealign.data.tictoc_layout import TicTocFormatError


def hub_cache(cache: Path, repo: str, files: dict[str, bytes], revision: str = "0" * 40) -> Path:
    """The hub cache's layout for dataset `repo` at `revision` (refs/main names it); returns the snapshot folder."""
    root = cache / f"datasets--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / revision
    for name, data in files.items():
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * (len(Path(name).parts) + 1)) / "blobs" / blob.name)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    return snapshot


@pytest.fixture
def cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    folder = tmp_path / "hub"
    folder.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(folder))
    assert constants.HF_HUB_OFFLINE  # conftest: every test is offline
    return folder


def test_the_v1_release_from_the_hub_cache_is_the_v1_release(cache, tictoc_v1_dir):
    """The real v1 files in the hub's cache layout load exactly as `data.source=v1` loads them."""
    files = {f"data/{p.name}": p.read_bytes() for p in sorted(tictoc_v1_dir.glob("*.json"))}
    files["README.md"] = b"# TicToc\n"
    snapshot = hub_cache(cache, "yizecheng/TicToc", files)
    from_hub = load_samples(DataSection(source="hub", path="yizecheng/TicToc"))
    local = load_v1(tictoc_v1_dir)
    assert len(from_hub.samples) == len(local.samples) == 1379 and not from_hub.rejects

    def key(s):
        return s.id, s.elapse_level, s.label, s.history[-1]["time"], s.score

    assert sorted(map(key, from_hub.samples)) == sorted(map(key, local.samples))
    assert all(s.source.startswith(str(snapshot / "data")) for s in from_hub.samples)


def test_v1_files_with_annotator_scores_keep_S_and_the_margin(cache, tmp_path):
    """v1 layout, records carrying their annotators' scores: S is their mean, the offset |S - 1.5|."""
    tool = [v1_record(rid(1), scores=[3, 3, 2, 3, 3, 2]), v1_record(rid(2), score=2.75)]
    no_tool = [
        v1_record(rid(3), scores=[0, 1, 0, 0, 0, 1]),
        v1_record(rid(4)),
    ]  # the last: no scores, the label's margin
    hub_cache(
        cache,
        "yizecheng/TicToc",
        {
            "preferTool_elapse_2.json": json.dumps(tool).encode(),
            "preferNoTool_elapse_0.json": json.dumps(no_tool).encode(),
        },
    )
    samples = {s.id: s for s in load_tictoc_release("yizecheng/TicToc").samples}
    assert samples[rid(1)].score == pytest.approx(16 / 6) and samples[rid(2)].score == 2.75
    assert samples[rid(3)].score == pytest.approx(2 / 6) and samples[rid(4)].score is None
    info = prepare(DataSection(source="hub", path="yizecheng/TicToc", margin_prefer_no_tool=0.4), tmp_path / "out")
    from datasets import load_from_disk

    rows = [r for split in load_from_disk(str(tmp_path / "out" / "dataset")).values() for r in split]
    margins = {r["id"]: r["margin"] for r in rows}
    assert info["pairs"] == 4
    assert margins == pytest.approx({rid(1): 16 / 6 - 1.5, rid(2): 1.25, rid(3): 1.5 - 2 / 6, rid(4): 0.4})


def test_a_score_that_contradicts_the_file_label_names_the_record(cache):
    hub_cache(
        cache, "yizecheng/TicToc", {"preferTool_elapse_0.json": json.dumps([v1_record(rid(1), score=0.5)]).encode()}
    )
    with pytest.raises(
        TicTocFormatError,
        match=r"record 'stock_market_order_book_1': score S=0.5 means "
        r"prefer_no_tool with data.score_orientation=tool_high, but the "
        r"file says prefer_tool",
    ):
        load_tictoc_release("yizecheng/TicToc")
    tool_low = load_tictoc_release("yizecheng/TicToc", orientation="tool_low").samples
    assert [s.score for s in tool_low] == [0.5]


def test_the_annotated_layout_in_jsonl_and_parquet(cache):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = "".join(json.dumps(annotated_record(rid(n), s)) + "\n" for n, s in ((1, 3.0), (2, 0.25)))
    # The hub's parquet conversion: nested messages become structs, a key one message lacks is null in it.
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([annotated_record(rid(4), 2.0, level=0)]), buffer)
    snapshot = hub_cache(
        cache,
        "yizecheng/TicToc",
        {"data/train.jsonl": jsonl.encode(), "data/test-00000-of-00001.parquet": buffer.getvalue()},
    )
    result = load_tictoc_release("yizecheng/TicToc")
    assert sorted((s.id, s.score, s.elapse_level) for s in result.samples) == [
        (rid(1), 3.0, 1),
        (rid(2), 0.25, 1),
        (rid(4), 2.0, 0),
    ]
    assert {Path(s.source).name for s in result.samples} == {"train.jsonl", "test-00000-of-00001.parquet"}
    assert str(snapshot) in result.samples[0].source


def test_refs_main_picks_the_revision(cache):
    hub_cache(
        cache,
        "yizecheng/TicToc",
        {"preferTool_elapse_0.json": json.dumps([v1_record(rid(1))]).encode()},
        revision="1" * 40,
    )
    hub_cache(
        cache,
        "yizecheng/TicToc",
        {"preferTool_elapse_0.json": json.dumps([v1_record(rid(1)), v1_record(rid(2))]).encode()},
        revision="2" * 40,
    )
    assert len(load_tictoc_release("yizecheng/TicToc").samples) == 2
    main = cache / "datasets--yizecheng--TicToc" / "refs" / "main"
    main.write_text("1" * 40)
    assert len(load_tictoc_release("yizecheng/TicToc").samples) == 1


def test_a_downloaded_folder_works_as_data_path(tmp_path, cache):
    folder = tmp_path / "TicToc"
    folder.mkdir()
    (folder / "preferNoTool_elapse_1.json").write_text(json.dumps([v1_record(rid(5))]))
    assert [s.id for s in load_tictoc_release(str(folder)).samples] == [rid(5)]


def test_a_release_in_no_known_layout_lists_the_accepted_ones(cache):
    snapshot = hub_cache(cache, "yizecheng/TicToc", {"README.md": b"hi", "data/all.json": b'[{"question": "x"}]'})
    with pytest.raises(RecipeError) as err:
        load_tictoc_release("yizecheng/TicToc")
    text = str(err.value)
    assert text.startswith(
        f"data.path=yizecheng/TicToc (data.source=hub): the release at {snapshot} is in no layout "
        "timealign reads (found: data/all.json); accepted: TicToc v1: one folder of "
        "prefer{Tool,NoTool}_elapse_{0,1,2}.json files"
    )
    assert "TicToc annotated: .json/.jsonl/.parquet records with score" in text and "\n" not in text
    with pytest.raises(RecipeError, match="accepted: TimelyChat: .json/.jsonl/.parquet records with speaker_list"):
        load_timelychat_release("yizecheng/TicToc")


def test_a_release_folder_that_links_to_itself_is_one_line(tmp_path, train_env):
    """Issue 42: a hub-layout folder with two links to itself (`ln -s . D/a; ln -s . D/b`) hung data prep (the walk
    followed them again and again; still running at 300 s). Each folder is entered once now: the loop is one line,
    exit 2, in seconds."""
    folder = write_v1(tmp_path / "D", {"preferTool_elapse_1.json": [v1_record(rid(1))]})
    (folder / "a").symlink_to(".")
    (folder / "b").symlink_to(".")
    proc = run_checked(
        [
            sys.executable,
            "data_prep/tictoc.py",
            "recipe=tiny",
            "data.source=hub",
            f"data.path={folder}",
            f"out={tmp_path / 'out'}",
        ],
        train_env,
        check=False,
        timeout=90,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = (
        f"error: data.path={folder} (data.source=hub): {folder / 'a'} is a link to ., a loop: it leads back to "
        f"{folder}, which holds it; remove the link"
    )
    assert [x for x in lines if x.startswith("error")] == lines[-1:] == [line], proc.stderr[-3000:]
    assert not (tmp_path / "out").exists()


def test_a_linked_folder_is_read_once(tmp_path):
    """A link into the release is followed (a folder kept elsewhere); a second way into the same folder, whose
    files would be read twice, and a data file that links to nothing are named."""
    elsewhere = write_v1(tmp_path / "elsewhere", {"preferTool_elapse_1.json": [v1_record(rid(1))]})
    release = tmp_path / "release"
    release.mkdir()
    (release / "v1").symlink_to(elsewhere)
    assert [s.id for s in load_tictoc_release(str(release)).samples] == [rid(1)]
    (release / "copy").symlink_to(elsewhere)
    with pytest.raises(RecipeError) as err:
        load_tictoc_release(str(release))
    assert str(err.value) == (
        f"data.path={release} (data.source=hub): {release / 'v1'} is a link to {elsewhere}, the same folder as "
        f"{release / 'copy'}, whose files would be read twice; remove the link"
    )
    (release / "copy").unlink()
    (release / "extra.json").symlink_to("extra.json")
    with pytest.raises(RecipeError) as err:
        load_tictoc_release(str(release))
    assert str(err.value) == (
        f"data.path={release} (data.source=hub): {release / 'extra.json'} is a symbolic link that leads back to "
        "itself (-> extra.json): a loop that holds no data; replace it with the data file or remove it"
    )


def test_a_missing_release_says_how_to_download_it(cache):
    with pytest.raises(RecipeError) as err:
        load_tictoc_release("someone/TimelyChat")
    assert str(err.value) == (
        f"data.path=someone/TimelyChat (data.source=hub): the hub dataset is not in the local cache ({cache}) and "
        "HF_HUB_OFFLINE=1 allows the cache only; download it where the hub is reachable: `hf download "
        "someone/TimelyChat --repo-type dataset --local-dir DIR`, copy DIR here and set data.path=DIR (or copy the "
        "hub cache's datasets--someone--TimelyChat folder into HF_HUB_CACHE here)"
    )


def test_a_timelychat_release_loads_with_its_splits(cache, timelychat_sample, tmp_path, capsys):
    """The TimelyChat equivalent, through the real data-prep command."""
    from timealign.data.commands import dialogs_main

    records = [json.loads(line) for line in timelychat_sample.read_text().splitlines() if line.strip()]
    train = "".join(json.dumps({**r, "id": f"train-{i}"}) + "\n" for i, r in enumerate(records))
    hub_cache(
        cache,
        "someone/TimelyChat",
        {"data/train.jsonl": train.encode(), "data/test.jsonl": timelychat_sample.read_bytes()},
    )
    result = load_timelychat_release("someone/TimelyChat", split_names={"train": "train", "eval": "test"})
    assert sorted({d.split for d in result.dialogs}) == ["test", "train"] and len(result.dialogs) == 2 * len(records)
    code = dialogs_main(
        [
            "recipe=tiny-timer",
            "data.source=hub",
            "data.path=someone/TimelyChat",
            "data.eval_split=test",
            f"out={tmp_path / 'out'}",
            f"output_dir={tmp_path / 'run'}",
        ]
    )
    assert code == 0, capsys.readouterr().err[-2000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["dialogs"] == manifest["splits"]["test"]["dialogs"] == len(records)
