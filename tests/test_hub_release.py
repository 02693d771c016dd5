"""The TicToc release as published on the hub (issue 33 item 3): `train.parquet` and `test.parquet`, one row per sample
with `id` (`..._tv1|2|3`), `history`, `function`, `preference`, `pref_score` (the annotators' mean S) and `__file__`.

The release cannot be downloaded here, so `hub_release` builds one in its layout, as the reproduction that read it
describes: a few scenarios, each trajectory at three gaps, times with Z and fractional seconds, tool-call arguments as
JSON strings, tool messages with `name`, preferences tool / direct / any, mid-range S. Its nested columns are written
either as Arrow lists of structs (pyarrow) or as JSON strings (written through `datasets`, as the hub converts).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from helpers import REPO_ROOT, launcher_env

from timealign.config import DataSection, RecipeError
from timealign.data.hub import load_tictoc_release
from timealign.data.pairs import load_prepared, prepare
from timealign.data.tictoc_layout import TicTocFormatError

# (source file, sensitivity of the tool's data, tool name, argument) per scenario; the split is the file's
TRAIN_SCENARIOS = [
    ("weather_forecast.json", "check_weather_forecast", {"city": "Lisbon"}),
    ("bank_interest_rate_checker.json", "retrieve_bank_apy", {"bank": "Northwind Savings"}),
    ("stock_trading.json", "submit_order", {"symbol": "ACME", "quantity": 10}),
]
TEST_SCENARIOS = [
    ("stock_market_order_book.json", "get_order_book", {"symbol": "ACME"}),
    ("Hotel Room Availability & Rates.json", "check_hotel_rooms", {"hotel": "Grand Palace", "date": "2025-06-01"}),
]
SCENARIO_NAMES = {
    "weather_forecast.json": "Weather Forecast Service",
    "bank_interest_rate_checker.json": "Bank Interest Rate Checker",
    "stock_trading.json": "Stock Trading (Order Submission)",
    "stock_market_order_book.json": "Stock Market Order Book",
    "Hotel Room Availability & Rates.json": "Hotel Room Availability & Rates",
}
GAPS = (timedelta(seconds=40.25), timedelta(minutes=25, seconds=3.5), timedelta(days=3, seconds=0.75))
# (preference, S) of the tv1/tv2/tv3 rows of trajectory n, cycling: the tv2 row carries the hard cases
TV2_CASES = [
    ("direct", 0.5),  # boundary: kept (get_metric scores S <= 0.5)
    ("tool", 2.5),  # boundary: kept
    ("any", 1.5),  # left out: any
    ("tool", 2.0),  # left out: uncertain
    ("direct", 1.1666666666666667),  # left out: uncertain
    ("any", 3.0),  # left out: any, whatever S says
]


def stamp(t: datetime) -> str:
    """ISO with Z and, mostly, fractional seconds (as the release writes them)."""
    text = t.astimezone(timezone.utc).isoformat(timespec="microseconds" if t.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def tool_schema(name: str, arguments: dict) -> dict:
    properties = {k: {"type": "integer" if isinstance(v, int) else "string"} for k, v in arguments.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ')}.",
            "parameters": {"type": "object", "properties": properties, "required": sorted(arguments)},
        },
    }


def trajectory(name: str, arguments: dict, n: int, with_ids: bool, start: datetime) -> list[dict]:
    """The messages before the final question: a system prompt, a question, a call, its result, an answer."""
    call = {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    result = {"role": "tool", "name": name, "content": json.dumps({"result": f"value {n}", "asof": stamp(start)})}
    if with_ids:
        call["id"] = f"call_{n}_a"
        result["tool_call_id"] = call["id"]
    t = [start + timedelta(seconds=s) for s in (0, 12.5, 14.125, 15.0, 21.375)]
    return [
        {"role": "system", "content": "You are an assistant with tools.", "time": stamp(t[0])},
        {"role": "user", "content": f"Please check {' '.join(map(str, arguments.values()))}.", "time": stamp(t[1])},
        {"role": "assistant", "content": None, "tool_calls": [call], "time": stamp(t[2])},
        {**result, "time": stamp(t[3])},
        {"role": "assistant", "content": f"It is value {n}.", "time": stamp(t[4])},
    ]


def scenario_rows(file: str, tool: str, arguments: dict, trajectories: int, first: int) -> list[dict]:
    stem = Path(file).stem.lower().replace(" ", "_").replace("&", "and")
    rows = []
    for n in range(first, first + trajectories):
        start = datetime(2025, 3, 1, 9, 0, 0, 250000, tzinfo=timezone.utc) + timedelta(days=n)
        before = trajectory(tool, arguments, n, with_ids=n % 2 == 0, start=start)
        last = datetime.fromisoformat(before[-1]["time"].replace("Z", "+00:00"))
        cases = [("direct", 0.0), TV2_CASES[n % len(TV2_CASES)], ("tool", 2.8333333333333335)]
        for level, (gap, (preference, score)) in enumerate(zip(GAPS, cases, strict=True)):
            question = {
                "role": "user",
                "content": f"And {list(arguments.values())[0]} now?",
                "time": stamp(last + gap),
            }
            rows.append(
                {
                    "id": f"{stem}_{n}_tv{level + 1}",
                    "history": before + [question],
                    "function": [tool_schema(tool, arguments)],
                    "preference": preference,
                    "pref_score": score,
                    "__file__": file,
                }
            )
    return rows


def release_rows(trajectories: int = 3) -> dict[str, list[dict]]:
    """The rows of each file: `trajectories` per scenario (each at tv1, tv2, tv3)."""
    out = {}
    for split, scenarios in (("train", TRAIN_SCENARIOS), ("test", TEST_SCENARIOS)):
        out[split] = [
            row
            for i, (file, tool, arguments) in enumerate(scenarios)
            for row in scenario_rows(file, tool, arguments, trajectories, first=10 * i)
        ]
    return out


def write_release(folder: Path, rows: dict[str, list[dict]], encoding: dict[str, str]) -> Path:
    """`train.parquet`, `test.parquet`; `encoding[split]`: "arrow" (nested lists of structs, pyarrow) or "json"
    (history and function as JSON strings, written with `datasets`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset

    folder.mkdir(parents=True, exist_ok=True)
    for split, split_rows in rows.items():
        path = folder / f"{split}.parquet"
        if encoding[split] == "arrow":
            pq.write_table(pa.Table.from_pylist(split_rows), path)
        else:
            encoded = [
                {**r, "history": json.dumps(r["history"]), "function": json.dumps(r["function"])} for r in split_rows
            ]
            Dataset.from_list(encoded).to_parquet(str(path))
    return folder


def without_nulls(message: dict) -> dict:
    return {k: v for k, v in message.items() if v is not None}


def expected(rows: list[dict]) -> dict:
    """What the paper's retention (and get_metric.py's skip rule) keeps and leaves out, computed from the rows."""
    kept, left = [], {}
    for r in rows:
        if "any" in r["preference"]:
            left["preference any"] = left.get("preference any", 0) + 1
        elif 0.5 < r["pref_score"] < 2.5:
            key = "uncertain score (0.5 < S < 2.5)"
            left[key] = left.get(key, 0) + 1
        else:
            kept.append(r)
    return {"kept": kept, "left_out": left}


@pytest.fixture
def release(tmp_path):
    rows = release_rows()
    return write_release(tmp_path / "TicToc", rows, {"train": "arrow", "test": "json"}), rows


@pytest.mark.parametrize("encoding", ["arrow", "json"])
def test_both_encodings_load_alike_with_labels_levels_and_margins_from_S(tmp_path, encoding):
    rows = release_rows()
    folder = write_release(tmp_path / encoding, rows, {"train": encoding, "test": encoding})
    result = load_tictoc_release(str(folder))
    assert not result.rejects
    by_id = {s.id: s for s in result.samples}
    want = {r["id"]: r for split in rows.values() for r in expected(split)["kept"]}
    assert set(by_id) == set(want)
    for rid, sample in by_id.items():
        row = want[rid]
        assert sample.score == row["pref_score"]
        assert sample.label == ("prefer_tool" if row["pref_score"] >= 2.5 else "prefer_no_tool")
        assert sample.elapse_level == int(rid[-1]) - 1  # tv1 -> 0 (small gap) ... tv3 -> 2, as v1's elapse_0..2
        assert sample.scenario.name == SCENARIO_NAMES[row["__file__"]]
        assert sample.scenario.split == ("train" if row in rows["train"] else "test")
        # the conversation as written: fractional Z times, arguments a JSON string, one final time
        # (a null of the Arrow encoding is read as absent: `content: None` beside tool calls)
        assert sample.history == [without_nulls(m) for m in row["history"]] or encoding == "json"
        assert sample.history == row["history"] or encoding == "arrow"
        assert sample.tools == row["function"]
    assert {len(result.left_out)} == {sum(sum(expected(r)["left_out"].values()) for r in rows.values())}


def test_arrow_nulls_of_struct_columns_are_read_as_absent(tmp_path):
    """Arrow gives every struct every field of its column: user messages get tool_calls null, a tool schema the
    properties of the other scenarios' tools. Read as absent, the sample equals its JSON-string twin."""
    import pyarrow.parquet as pq

    rows = release_rows(1)
    folder = write_release(tmp_path / "arrow", rows, {"train": "arrow", "test": "arrow"})
    stored = pq.read_table(folder / "train.parquet").to_pylist()[0]
    assert stored["history"][1]["tool_calls"] is None
    assert set(stored["function"][0]["function"]["parameters"]["properties"]) == {"city", "bank", "symbol", "quantity"}
    twin = write_release(tmp_path / "json", rows, {"train": "json", "test": "json"})
    key = lambda s: (s.id, [without_nulls(m) for m in s.history], s.tools, s.label, s.score, s.elapse_level)  # noqa: E731
    assert sorted(map(key, load_tictoc_release(str(folder)).samples)) == sorted(
        map(key, load_tictoc_release(str(twin)).samples)
    )


def test_prepared_pairs_have_S_margins_and_the_manifest_counts_what_was_left_out(release, tmp_path):
    folder, rows = release
    info = prepare(DataSection(source="hub", path=str(folder)), tmp_path / "pairs")
    data = load_prepared(tmp_path / "pairs")
    for split in ("train", "test"):
        want = expected(rows[split])
        got = data[split].to_list()
        assert len(got) == info["splits"][split]["pairs"] == len(want["kept"])
        assert info["left_out"]["by_split"][split] == want["left_out"]
        margins = {r["id"]: r["margin"] for r in got}
        assert margins == pytest.approx({r["id"]: abs(r["pref_score"] - 1.5) for r in want["kept"]})
    # this fixture: (3 + 2 scenarios) x 3 trajectories x 3 gaps = 45 rows; 36 kept, 9 left out (train 6, test 3)
    assert info["pairs"] == 36 and info["left_out"]["rows"] == 9 and info["rejects"] == 0
    assert info["splits"]["test"]["scenarios"] == 2 and info["splits"]["train"]["scenarios"] == 3
    assert "paper Sec. 2.5" in info["left_out"]["rule"]
    left = [json.loads(line) for line in (tmp_path / "pairs" / "left_out.jsonl").read_text().splitlines()]
    assert len(left) == 9 and {r["split"] for r in left} == {"train", "test"}
    assert all(r["id"].endswith("_tv2") for r in left)  # in this fixture only tv2 rows are uncertain


def test_tool_low_orientation_contradicts_the_preference_and_says_so(release):
    folder, _ = release
    with pytest.raises(TicTocFormatError) as err:
        load_tictoc_release(str(folder), orientation="tool_low")
    text = str(err.value)
    assert f"{folder / 'test.parquet'} row 0: record 'stock_market_order_book_0_tv1': preference 'direct' but " in text
    assert "set data.score_orientation=tool_high" in text and "\n" not in text


def test_unknown_scenarios_error_or_keep_their_given_name(tmp_path):
    rows = release_rows(1)
    rows["test"] += scenario_rows("quantum_flux_monitor.json", "read_flux", {"sensor": "Q7"}, 1, first=93)
    folder = write_release(tmp_path / "TicToc", rows, {"train": "arrow", "test": "json"})
    with pytest.raises(TicTocFormatError) as err:
        load_tictoc_release(str(folder))
    assert "record 'quantum_flux_monitor_93_tv1': scenario 'quantum_flux_monitor' (from __file__) is none of" in str(
        err.value
    ) and "data.unknown_scenarios=bucket" in str(err.value)
    samples = load_tictoc_release(str(folder), unknown="bucket").samples
    kept = [s for s in samples if s.id.startswith("quantum")]
    assert {(s.scenario.name, s.scenario.split, s.scenario.sensitivity) for s in kept} == {
        ("quantum_flux_monitor", "test", "unknown")
    }
    assert len(kept) == 2  # tv1 and tv3; its tv2 is left out
    # without __file__ the id's stem names the scenario
    for r in rows["train"]:
        r["__file__"] = None
    folder = write_release(tmp_path / "no-file", rows, {"train": "arrow", "test": "json"})
    names = {s.scenario.name for s in load_tictoc_release(str(folder), unknown="bucket").samples}
    assert {"Weather Forecast Service", "Bank Interest Rate Checker", "Stock Trading (Order Submission)"} <= names


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"pref_score": 3.5},
            "row 4: record 'weather_forecast_1_tv2': `pref_score` must be the annotators' mean S in [0, 3], got 3.5",
        ),
        ({"preference": "tool or direct"}, "`preference` 'tool or direct' names both of tool and direct (or any)"),
        ({"id": "weather_forecast_1"}, "record 'weather_forecast_1': `id` must end in _tv1, _tv2 or _tv3"),
        ({"history": "[{'role': 'user'"}, "`history` is a string that is not JSON"),
        (
            {"preference": "direct", "pref_score": 3.0},
            "preference 'direct' but S=3 means prefer_tool with data.score_orientation=tool_high; the row contradicts "
            "itself: fix its preference or its pref_score",
        ),
    ],
)
def test_a_malformed_row_is_one_line_naming_file_row_and_id(tmp_path, change, message):
    rows = release_rows(2)
    rows["train"][4].update(change)  # weather_forecast_1_tv2
    for split in rows.values():  # JSON-string encoding for both, so a string history can stand beside the others
        for r in split:
            r["history"] = r["history"] if isinstance(r["history"], str) else json.dumps(r["history"])
    folder = write_release(tmp_path / "TicToc", rows, {"train": "arrow", "test": "arrow"})
    with pytest.raises(TicTocFormatError) as err:
        load_tictoc_release(str(folder))
    text = str(err.value)
    assert text.startswith(f"{folder / 'train.parquet'} row 4: record ") and message in text and "\n" not in text
    skipped = load_tictoc_release(str(folder), on_error="skip")
    assert len(skipped.rejects) == 1 and skipped.rejects[0]["source"] == f"{folder / 'train.parquet'} row 4"


def test_other_data_files_beside_the_release_are_refused(release):
    folder, _ = release
    (folder / "extra.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(RecipeError, match=r"holds the hub layout's .* and other data files \(extra.jsonl\)"):
        load_tictoc_release(str(folder))
    (folder / "extra.jsonl").unlink()
    (folder / "train.parquet").rename(folder / "validation.parquet")
    with pytest.raises(
        TicTocFormatError, match="validation.parquet: a hub-layout file is named train.parquet or test"
    ):
        load_tictoc_release(str(folder))


def _run(args: list, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(a) for a in args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, f"{' '.join(map(str, args))}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def test_timealign_dpo_and_eval_on_the_release(release, tmp_path):
    """`timealign dpo recipe=tiny data.source=hub data.path=DIR`, then `timealign eval` on the checkpoint: S margins
    reach the loss, and the report says how many rows of the test split were not scored and why."""
    folder, rows = release
    out = tmp_path / "run"
    env = launcher_env()
    timealign = [sys.executable, "-m", "timealign"]
    _run(
        [
            *timealign,
            "dpo",
            "recipe=tiny",
            "data.source=hub",
            f"data.path={folder}",
            f"output_dir={out}",
            "training.max_steps=2",
            "training.per_device_train_batch_size=2",
            "training.logging_steps=1",
        ],
        env,
    )
    log = json.loads((out / "train_log.json").read_text())
    assert log[0]["offset/mean"] > 0.9  # kept train pairs have |S - 1.5| in {1.0, 1.333, 1.5}
    _run([*timealign, "eval", f"checkpoint={out}", "suites=tictoc"], env)
    report = json.loads((out / "eval" / "tictoc.json").read_text())
    want = expected(rows["test"])
    assert report["overall"]["n"] == len(want["kept"]) == 15
    assert report["data"]["source"] == "hub" and report["data"]["split"] == "test"
    assert report["data"]["left_out"]["rows"] == 3 and report["data"]["left_out"]["by_reason"] == want["left_out"]
    markdown = (out / "eval" / "report.md").read_text()
    assert "| release rows of the split not scored (its retention rule) | 3 (preference any: " in markdown
