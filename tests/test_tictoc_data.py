"""TicToc loaders on the real v1 release, pair building, margins, both score orientations, bad input."""

import json
from pathlib import Path

import pytest
from helpers import TOOLS

from timealign.config import DataSection
from timealign.data.pairs import load_prepared, prepare
from timealign.data.tictoc import load_annotated, load_v1
from timealign.data.tictoc_layout import PREFER_NO_TOOL, PREFER_TOOL, TicTocFormatError
from timealign.data.tictoc_pairs import build_pair, build_pairs, relevant_tool_call

V1_COUNTS = {
    "preferNoTool_elapse_0.json": 198,
    "preferNoTool_elapse_1.json": 34,
    "preferTool_elapse_0.json": 40,
    "preferTool_elapse_1.json": 440,
    "preferTool_elapse_2.json": 667,
}
MARGINS = {PREFER_TOOL: 1.0, PREFER_NO_TOOL: 1.0}


def _history(final_time="2024-05-01T12:00:00Z"):
    return [
        {"role": "system", "content": "You check stock prices.", "time": "2024-05-01T09:00:00Z"},
        {"role": "user", "content": "Price of ACME?", "time": "2024-05-01T09:00:00Z"},
        {
            "role": "assistant",
            "content": None,
            "time": "2024-05-01T09:00:03Z",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "get_price", "arguments": '{"symbol": "ACME"}'}}
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "a",
            "name": "get_price",
            "content": '{"price": 10}',
            "time": "2024-05-01T09:00:04Z",
        },
        {"role": "user", "content": "And BOLT?", "time": "2024-05-01T09:01:00Z"},
        {
            "role": "assistant",
            "content": None,
            "time": "2024-05-01T09:01:03Z",
            "tool_calls": [
                {"id": "b", "type": "function", "function": {"name": "get_price", "arguments": '{"symbol": "BOLT"}'}}
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "b",
            "name": "get_price",
            "content": '{"price": 20}',
            "time": "2024-05-01T09:01:04Z",
        },
        {"role": "assistant", "content": "BOLT is at 20.", "time": "2024-05-01T09:01:08Z"},
        {"role": "user", "content": "Is ACME above 15 now?", "time": final_time},
    ]


def _record(rid="stock_market_order_book_1", score=3.0, **extra):
    history = _history()
    history[0]["content"] += f" (session {rid})"  # one conversation per id: another id with it is a duplicate
    return {"id": rid, "history": history, "function": TOOLS, "elapse_level": 2, "score": score, **extra}


def _write_jsonl(path: Path, records) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


# ---------------------------------------------------------------------------------------------- real v1 data


def test_v1_loader_on_the_real_release(tictoc_v1_dir):
    result = load_v1(tictoc_v1_dir)
    assert result.rejects == [] and len(result.samples) == sum(V1_COUNTS.values()) == 1379
    by_file = {}
    for s in result.samples:
        by_file[Path(s.source).name] = by_file.get(Path(s.source).name, 0) + 1
    assert by_file == V1_COUNTS
    # The final user time is the file's elapse level's entry of the 3-time list.
    raw = json.loads((tictoc_v1_dir / "preferTool_elapse_2.json").read_text())[0]
    sample = next(s for s in result.samples if s.id == raw["id"] and s.elapse_level == 2 and s.label == PREFER_TOOL)
    assert sample.history[-1]["time"] == raw["history"][-1]["time"][2]
    assert sample.history[:-1] == raw["history"][:-1]
    assert {s.scenario.split for s in result.samples} == {"train", "test"}


def test_v1_pairs_follow_labels(tictoc_v1_dir):
    samples = load_v1(tictoc_v1_dir).samples
    pairs = build_pairs(samples, default_margins={PREFER_TOOL: 1.2, PREFER_NO_TOOL: 1.4})
    assert pairs.rejects == [] and len(pairs.samples) == len(samples)
    for sample, row in zip(samples, pairs.samples):
        tool_side = row["chosen"] if sample.label == PREFER_TOOL else row["rejected"]
        direct_side = row["rejected"] if sample.label == PREFER_TOOL else row["chosen"]
        call = tool_side[0]["tool_calls"][0]["function"]
        earlier = {c["function"]["name"] for m in sample.history for c in m.get("tool_calls") or []}
        assert call["name"] in earlier
        json.loads(call["arguments"])  # normalised to JSON, also for the release's Python-literal arguments
        assert direct_side[0]["tool_calls"] is None and direct_side[0]["content"]
        assert row["margin"] == (1.2 if sample.label == PREFER_TOOL else 1.4)


def test_prepare_real_v1_writes_dataset_and_manifest(tictoc_v1_dir, tmp_path):
    info = prepare(DataSection(source="v1", path=str(tictoc_v1_dir)), tmp_path)
    assert info["pairs"] == 1379 and info["rejects"] == 0
    assert set(info["splits"]) == {"train", "test"}
    data = load_prepared(tmp_path)
    assert len(data["train"]) + len(data["test"]) == 1379
    assert set(data["test"]["split"]) == {"test"}
    assert {
        "prompt",
        "chosen",
        "rejected",
        "tools",
        "margin",
        "id",
        "scenario",
        "sensitivity",
        "elapse_level",
        "label",
    } <= set(data["train"].column_names)
    assert json.loads((tmp_path / "manifest.json").read_text())["splits"]["train"]["pairs"] == len(data["train"])


# ---------------------------------------------------------------------------------------------- pairs & margins


@pytest.mark.parametrize(
    "orientation, score, label, margin",
    [
        ("tool_high", 2.8, PREFER_TOOL, 1.3),
        ("tool_high", 0.4, PREFER_NO_TOOL, 1.1),
        ("tool_low", 2.8, PREFER_NO_TOOL, 1.3),
        ("tool_low", 0.4, PREFER_TOOL, 1.1),
    ],
)
def test_score_orientation_sets_label_and_margin(tmp_path, orientation, score, label, margin):
    path = _write_jsonl(tmp_path / "a.jsonl", [_record(score=score, direct_answer="ACME was at 10.")])
    sample = load_annotated(path, orientation=orientation).samples[0]
    assert sample.label == label
    row = build_pair(sample, default_margins=MARGINS, direct_answer="latest_tool_result")
    assert row["margin"] == pytest.approx(margin)  # |S - 1.5|, not the per-label default
    chosen = row["chosen"][0]
    assert (chosen["tool_calls"] is not None) == (label == PREFER_TOOL)
    if label == PREFER_NO_TOOL:
        assert chosen["content"] == "ACME was at 10."


def test_ties_and_conflicting_orientation_are_rejected(tmp_path):
    path = _write_jsonl(tmp_path / "a.jsonl", [_record(score=1.5)])
    with pytest.raises(TicTocFormatError, match="exact tie"):
        load_annotated(path)
    path = _write_jsonl(tmp_path / "b.jsonl", [_record(score=3.0, score_orientation="tool_low")])
    with pytest.raises(TicTocFormatError, match="score_orientation"):
        load_annotated(path, orientation="tool_high")


def test_relevant_call_is_the_one_the_question_mentions(tmp_path):
    sample = load_annotated(_write_jsonl(tmp_path / "a.jsonl", [_record()])).samples[0]
    assert relevant_tool_call(sample)["arguments"] == '{"symbol": "ACME"}'  # not the later BOLT call
    sample.history[-1]["content"] = "Thanks, anything else?"
    assert relevant_tool_call(sample)["arguments"] == '{"symbol": "BOLT"}'  # no mention: the latest


def test_direct_answer_strategies(tmp_path):
    sample = load_annotated(_write_jsonl(tmp_path / "a.jsonl", [_record()])).samples[0]
    latest = build_pair(sample, default_margins=MARGINS, direct_answer="latest_tool_result")
    assert latest["rejected"][0]["content"] == 'Based on the latest result from get_price: {"price": 20}'
    stale = build_pair(sample, default_margins=MARGINS, direct_answer="last_assistant_text")
    assert stale["rejected"][0]["content"] == "BOLT is at 20."


def test_min_margin_drops_uncertain_pairs(tmp_path):
    samples = load_annotated(
        _write_jsonl(
            tmp_path / "a.jsonl",
            [_record("stock_market_order_book_1", 2.9), _record("stock_market_order_book_2", 1.8)],
        )
    ).samples
    result = build_pairs(samples, default_margins=MARGINS, min_margin=1.0)
    assert [r["id"] for r in result.samples] == ["stock_market_order_book_1"]
    assert result.rejects[0]["id"] == "stock_market_order_book_2" and "min_margin" in result.rejects[0]["reason"]


# ---------------------------------------------------------------------------------------------- bad input


def _bad_records():
    no_history = _record("stock_market_order_book_2")
    del no_history["history"]
    no_time = _record("stock_market_order_book_3")
    del no_time["history"][3]["time"]
    not_user = _record("stock_market_order_book_4")
    not_user["history"] = not_user["history"][:-1]
    bad_time = _record("stock_market_order_book_5")
    bad_time["history"][4]["time"] = "yesterday at noon"
    backwards = _record("stock_market_order_book_6")
    backwards["history"][5]["time"] = "2024-05-01T08:00:00Z"
    return {
        "no_history": (no_history, "`history` is missing"),
        "no_time": (no_time, r"history\[3\] \(tool\) has no `time`"),
        "not_user": (not_user, "last message must be the user's question"),
        "bad_time": (bad_time, "not an ISO-8601 time: 'yesterday at noon'"),
        "backwards": (backwards, r"times go backwards at history\[5\]"),
    }


@pytest.mark.parametrize("case", ["no_history", "no_time", "not_user", "bad_time", "backwards"])
def test_bad_record_error_names_file_and_record(tmp_path, case):
    record, message = _bad_records()[case]
    path = _write_jsonl(tmp_path / "bad.jsonl", [_record("stock_market_order_book_1"), record])
    with pytest.raises(TicTocFormatError, match=message) as err:
        load_annotated(path)
    assert str(path) in str(err.value) and record["id"] in str(err.value)


def test_skip_keeps_the_rest_and_records_reasons(tmp_path):
    bad = [r for r, _ in _bad_records().values()]
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join([json.dumps(_record("stock_market_order_book_1")), "{not json"] + [json.dumps(r) for r in bad])
        + "\n"
    )
    result = load_annotated(path, on_error="skip")
    assert [s.id for s in result.samples] == ["stock_market_order_book_1"]
    assert len(result.rejects) == 1 + len(bad)
    assert result.rejects[0]["id"] == "line 2" and "malformed JSON" in result.rejects[0]["reason"]
    # Through data prep, rejects land in rejects.jsonl with their reasons.
    info = prepare(DataSection(source="annotated", path=str(path), on_error="skip"), tmp_path / "out")
    assert info["pairs"] == 1 and info["rejects"] == 1 + len(bad)
    lines = [json.loads(x) for x in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert {r["id"] for r in lines} == {"line 2"} | {r["id"] for r in bad}


def _v1_folder(tmp_path, records, name="preferTool_elapse_1.json"):
    folder = tmp_path / "v1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(records))
    return folder


def test_v1_time_list_must_match_levels(tmp_path):
    record = {
        "id": "train_delay_1",
        "history": _history(["2024-05-01T12:00:00Z", "2024-05-02T12:00:00Z"]),
        "function": TOOLS,
    }
    with pytest.raises(TicTocFormatError, match="must list 3 times") as err:
        load_v1(_v1_folder(tmp_path, [record]))
    assert "preferTool_elapse_1.json" in str(err.value) and "train_delay_1" in str(err.value)
    single = {"id": "train_delay_2", "history": _history(), "function": TOOLS}
    with pytest.raises(TicTocFormatError, match="must list 3 times"):
        load_v1(_v1_folder(tmp_path, [single]))


def test_v1_malformed_json_and_unknown_scenarios(tmp_path):
    folder = tmp_path / "v1"
    folder.mkdir()
    (folder / "preferNoTool_elapse_0.json").write_text('[{"id": ')
    with pytest.raises(TicTocFormatError, match="malformed JSON") as err:
        load_v1(folder)
    assert "preferNoTool_elapse_0.json" in str(err.value)
    assert load_v1(folder, on_error="skip").rejects[0]["reason"].startswith("malformed JSON")

    times = ["2024-05-01T09:05:00Z", "2024-05-01T12:00:00Z", "2024-05-03T12:00:00Z"]
    record = {"id": "quantum_teleport_booking_1", "history": _history(times), "function": TOOLS}
    other = _v1_folder(tmp_path / "u", [record])
    with pytest.raises(TicTocFormatError, match="quantum_teleport_booking_1"):
        load_v1(other)
    bucketed = load_v1(other, unknown="bucket").samples[0]
    assert bucketed.scenario.name == "unknown" and bucketed.history[-1]["time"] == times[1]


def test_synthetic_v1_layout_round_trips_through_the_loader(tmp_path):
    from timealign.data.synthetic import generate_annotated, to_v1_layout, write_v1_layout

    records = generate_annotated(20, seed=3)
    write_v1_layout(to_v1_layout(records), tmp_path / "v1")
    result = load_v1(tmp_path / "v1")
    assert result.rejects == [] and len(result.samples) == len(records)
    labels = {(r["id"], r["elapse_level"]): r["score"] > 1.5 for r in records}
    assert all(labels[(s.id, s.elapse_level)] == (s.label == PREFER_TOOL) for s in result.samples)


def test_balance_train_labels_equalises_each_scenario(tmp_path):
    from collections import Counter

    info = prepare(
        DataSection(source="synthetic", synthetic_trajectories=60, balance_train_labels=True), tmp_path / "prep"
    )
    data = load_prepared(tmp_path / "prep")
    per_scenario = Counter((r["scenario"], r["label"]) for r in data["train"])
    for scenario in {s for s, _ in per_scenario}:
        assert per_scenario[(scenario, "prefer_tool")] == per_scenario[(scenario, "prefer_no_tool")] > 0
    assert info["balance_dropped"] == 180 - len(data["train"]) > 0
    assert len(data["test"]) == 180  # the held-out split is never touched


def test_balance_within_split_keeps_every_scenario_and_gap_in_proportion(tictoc_v1_dir, tmp_path):
    """On the v1 release: per-scenario balancing keeps 6 of the 18 train scenarios and no high-sensitivity sample
    1-6 minutes old (every one is in a scenario with one label); balancing over the split keeps the 135 prefer-noTool
    pairs and 135 prefer-Tool pairs drawn from every (scenario, gap level) cell in proportion (largest remainders)."""
    import math
    from collections import Counter

    from timealign.data.pairs import balance_labels

    def prepared(name, **kw):
        prepare(DataSection(source="v1", path=str(tictoc_v1_dir), **kw), tmp_path / name)
        return load_prepared(tmp_path / name)["train"].to_list()

    every = prepared("all")
    by_scenario = prepared("scenario", balance_train_labels=True)
    by_split = prepared("split", balance_train_labels=True, balance_within="split")
    high_minutes = [r for r in every if r["sensitivity"] == "high" and r["elapse_level"] == 1]
    assert len(high_minutes) == 99 and all(r["label"] == "prefer_tool" for r in high_minutes)
    assert not [r for r in by_scenario if r["sensitivity"] == "high" and r["elapse_level"] == 1]
    assert len({r["scenario"] for r in by_scenario}) < len({r["scenario"] for r in every}) == 18
    labels = Counter(r["label"] for r in by_split)
    assert labels["prefer_no_tool"] == labels["prefer_tool"] == 135
    assert {r["scenario"] for r in by_split} == {r["scenario"] for r in every}
    # every prefer-noTool pair kept; the prefer-Tool cells hold their share of 135 (floor or ceiling of it)
    tool_cells = Counter((r["scenario"], r["elapse_level"]) for r in every if r["label"] == "prefer_tool")
    kept_cells = Counter((r["scenario"], r["elapse_level"]) for r in by_split if r["label"] == "prefer_tool")
    total = sum(tool_cells.values())
    for cell, size in tool_cells.items():
        assert kept_cells[cell] in (math.floor(135 * size / total), math.ceil(135 * size / total))
    assert (
        sum(1 for r in by_split if r["sensitivity"] == "high" and r["elapse_level"] == 1)
        == sum(kept_cells[c] for c in kept_cells if c in {(r["scenario"], 1) for r in high_minutes})
        > 20
    )
    # seeded, and refused outside its choices
    again, _ = balance_labels(every, 0, "split")
    assert [r["id"] for r in balance_labels(every, 0, "split")[0]] == [r["id"] for r in again]
    with pytest.raises(ValueError, match="data.balance_within must be one of scenario, split"):
        balance_labels(every, 0, "label")


def test_validation_share_sets_whole_trajectories_aside_before_balancing(tictoc_v1_dir, tmp_path, caplog):
    """On the v1 release: a quarter of each scenario's train trajectories (every gap level of one together) become
    split 'validation', the same whatever data.seed and balancing; the rest is balanced; the test split untouched."""
    from collections import Counter

    def splits(name, **kw):
        prepare(DataSection(source="v1", path=str(tictoc_v1_dir), validation_share=0.25, **kw), tmp_path / name)
        return load_prepared(tmp_path / name)

    with caplog.at_level("WARNING"):
        a, b = splits("a", balance_train_labels=True), splits("b", seed=1)
    assert "older timealign" not in caplog.text  # prepare() seals what it writes, as the CLI's data prep does
    assert len(a["test"]) == len(b["test"]) == 685  # the release's test split, whole
    assert a["validation"].to_list() == b["validation"].to_list()  # not data.seed's, and set aside before balancing
    held = set(a["validation"]["id"])
    assert held and not held & (set(a["train"]["id"]) | set(b["train"]["id"]))  # every gap level on one side
    per_scenario = Counter((r["scenario"], r["label"]) for r in a["train"])
    for scenario in {s for s, _ in per_scenario}:
        assert per_scenario[(scenario, "prefer_tool")] == per_scenario[(scenario, "prefer_no_tool")] > 0
    for scenario in set(b["validation"]["scenario"]):  # a quarter, rounded; a scenario's last one stays in train
        ids = {k: {r["id"] for r in b[k] if r["scenario"] == scenario} for k in ("train", "validation")}
        total = len(ids["train"]) + len(ids["validation"])
        assert len(ids["validation"]) == min(total - 1, round(0.25 * total))


def test_validation_by_scenario_sets_whole_scenarios_aside_per_class(tictoc_v1_dir, tmp_path):
    """On the v1 release: validation_by=scenario moves a quarter (rounded) of each sensitivity class's train
    scenarios, whole, into 'validation' (a class with one scenario keeps it), the same whatever data.seed; no
    validation scenario is left in train; the test split untouched."""
    from collections import defaultdict

    from timealign.data.pairs import set_aside_validation

    def splits(name, **kw):
        section = DataSection(source="v1", path=str(tictoc_v1_dir), validation_share=0.25, **kw)
        prepare(section, tmp_path / name)
        return load_prepared(tmp_path / name)

    a, b = splits("a", validation_by="scenario"), splits("b", validation_by="scenario", seed=3)
    assert a["validation"].to_list() == b["validation"].to_list() and len(a["test"]) == 685
    held, kept = set(a["validation"]["scenario"]), set(a["train"]["scenario"])
    assert held and not held & kept
    classes = defaultdict(set)
    for row in a["validation"].to_list() + a["train"].to_list():
        classes[row["sensitivity"]].add(row["scenario"])
    for sensitivity, names in classes.items():
        assert len(names & held) == min(len(names) - 1, round(0.25 * len(names)))
    with pytest.raises(ValueError, match="data.validation_by must be one of trajectory, scenario"):
        set_aside_validation(a["train"].to_list(), "train", 0.25, "sample")


def test_offset_scale_scales_the_rendered_offsets(tiny_tokenizer, tmp_path):
    from timealign.render.chat import PromptRenderer
    from timealign.train.dpo import render_split

    prepare(DataSection(source="synthetic", synthetic_trajectories=4), tmp_path / "prep")
    train = load_prepared(tmp_path / "prep")["train"]
    renderer = PromptRenderer(tiny_tokenizer)
    assert render_split(train, renderer, "x")["margin"] == train["margin"]
    assert render_split(train, renderer, "x", offset_scale=0.0)["margin"] == [0.0] * len(train)
    half = render_split(train, renderer, "x", offset_scale=0.5)["margin"]
    assert half == pytest.approx([m / 2 for m in train["margin"]])


def test_sensitivity_swap_never_touches_the_held_out_split(tmp_path):
    plain = prepare(DataSection(source="synthetic", synthetic_trajectories=10), tmp_path / "a")
    swapped = prepare(
        DataSection(source="synthetic", synthetic_trajectories=10, synthetic_sensitivity_swap=1.0), tmp_path / "b"
    )
    a, b = load_prepared(tmp_path / "a"), load_prepared(tmp_path / "b")
    assert a["test"].to_list() == b["test"].to_list()
    assert a["train"]["tools"] != b["train"]["tools"]  # every train tool now states another update rate
    assert plain["splits"]["test"] == swapped["splits"]["test"]


# ---------------------------------------------------------------------------------------------- shared loader pieces


def test_annotated_records_from_memory_share_the_loader_contract():
    """In-memory records go through the same validation as files; `on_error` decides raise or reject."""
    from timealign.data.records import LoadResult, RecordError
    from timealign.data.synthetic import generate_annotated
    from timealign.data.tictoc import annotated_records

    records = generate_annotated(2, seed=0, split="train")
    result = annotated_records(records, "memory")
    assert isinstance(result, LoadResult) and result.rejects == []
    assert [(s.id, s.elapse_level) for s in result.samples] == [(r["id"], r["elapse_level"]) for r in records]
    bad = dict(_record("stock_market_order_book_9"), score=7.0)
    with pytest.raises(RecordError) as err:  # a TicTocFormatError is a RecordError, as DialogFormatError is
        annotated_records([bad], "memory")
    assert isinstance(err.value, TicTocFormatError) and "memory: record 'stock_market_order_book_9'" in str(err.value)
    kept = annotated_records([bad, _record()], "memory", result, on_error="skip")
    assert kept is result and len(result.samples) == len(records) + 1
    assert result.rejects == [{"source": "memory", "id": "stock_market_order_book_9", "reason": err.value.reason}]
    with pytest.raises(ValueError, match="data.on_error='ignore' is not one of: raise, skip"):
        annotated_records(records, "memory", on_error="ignore")


def test_pairs_command_writes_the_prepared_folder_and_exits_1_on_bad_data(tmp_path, capsys):
    from timealign.config.cli import DATA_HINT
    from timealign.data.commands import pairs_main

    assert pairs_main(["--help"]) == 0
    assert "out=" in capsys.readouterr().out
    out = tmp_path / "pairs"
    assert pairs_main(["recipe=tiny", f"out={out}", "data.synthetic_trajectories=4"]) == 0
    assert json.loads(capsys.readouterr().out.split("\nwrote ")[0])["pairs"] == 24  # 4 per split x 3 levels x 2
    assert load_prepared(out)["train"].num_rows == 12
    bad = _write_jsonl(tmp_path / "bad.jsonl", [dict(_record(), score=9.0)])
    assert pairs_main(["recipe=tiny", "data.source=annotated", f"data.path={bad}", f"out={tmp_path / 'x'}"]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: record 'stock_market_order_book_1'" in err and DATA_HINT in err
    assert pairs_main(["recipe=tiny", "data.source=v1", f"data.path={tmp_path / 'none'}"]) == 2  # checked up front


# ------------------------------------------------- message shapes v1 lacks but the layout allows (issue 23)


def _rows_of(record, folder: Path) -> list[dict]:
    """The record's pair row after the Arrow round trip that prepared data makes."""
    from datasets import Dataset

    samples = load_annotated(_write_jsonl(folder / f"{id(record)}.jsonl", [record])).samples
    rows = [build_pair(s, default_margins=MARGINS, direct_answer="latest_tool_result") for s in samples]
    return Dataset.from_list(rows).to_list()


def _without_ids(record):
    for m in record["history"]:
        for call in m.get("tool_calls") or []:
            del call["id"]
        m.pop("tool_call_id", None)
    return record


def test_the_pair_row_keeps_an_empty_tool_calls_list_mapping_arguments_and_missing_ids(tmp_path):
    """The paper protocol renders each differently (tests/test_paper_prompts.py compares with the authors' code),
    so the pair row keeps them: [] is not None, a mapping is marked as one, an absent id stays absent."""
    record = _record()
    record["history"][7]["tool_calls"] = []  # "BOLT is at 20." with an empty list of calls
    record["history"][2]["tool_calls"][0]["function"]["arguments"] = {"symbol": "ACME", "n": [1, 2.5, None]}
    del record["history"][5]["tool_calls"][0]["id"]
    del record["history"][6]["tool_call_id"]
    prompt = _rows_of(record, tmp_path)[0]["prompt"]
    assert prompt[7]["tool_calls"] == [] and prompt[4]["tool_calls"] is None
    first = prompt[2]["tool_calls"][0]
    assert first["arguments_mapping"] is True and json.loads(first["function"]["arguments"]) == {
        "symbol": "ACME",
        "n": [1, 2.5, None],
    }
    second = prompt[5]["tool_calls"][0]
    assert second["id"] is None and second["arguments_mapping"] is False
    assert second["function"]["arguments"] == '{"symbol": "BOLT"}' and prompt[6]["tool_call_id"] is None


def test_calls_without_ids_are_answered_in_order_and_checked(tmp_path):
    ok = _without_ids(_record())
    assert len(load_annotated(_write_jsonl(tmp_path / "a.jsonl", [ok])).samples) == 1
    cases = {
        "result under another name": (
            lambda r: r["history"][3].update(name="get_news"),
            "history[3] is named 'get_news' but answers (by order: no tool_call_id) the call to 'get_price' of "
            "history[2]",
        ),
        "result naming an id no call has": (
            lambda r: r["history"][3].update(tool_call_id="a"),
            "history[3] answers tool_call_id 'a', which is no unanswered call of history[2] (none left)",
        ),
        "unanswered": (
            lambda r: r["history"].pop(3),
            "history[3] (user) comes before every tool call of history[2] has its result (unanswered: a call to "
            "'get_price' without id)",
        ),
        "empty id": (
            lambda r: r["history"][2]["tool_calls"][0].update(id=""),
            "history[2].tool_calls[0]: `id` must be a non-empty string (or absent), got ''",
        ),
        "empty list on a user message": (
            lambda r: r["history"][1].update(tool_calls=[]),
            "history[1] (user) has tool calls; only assistant messages make them",
        ),
    }
    for name, (edit, message) in cases.items():
        record = _without_ids(_record())
        edit(record)
        with pytest.raises(TicTocFormatError) as err:
            load_annotated(_write_jsonl(tmp_path / "b.jsonl", [record]))
        assert message in str(err.value), name
        assert "stock_market_order_book_1" in str(err.value), name


def test_timealign_protocol_renders_the_shapes(tiny_model_dir, tmp_path):
    """The default protocol: an empty `tool_calls` is no call (the text is rendered), mapping arguments render as
    the same call given as a string, and calls without ids get deterministic ids (call00001, ... in order, the
    same in every rendering) on the call and its result, for templates that print them and for API requests."""
    from transformers import AutoTokenizer

    from timealign.render.chat import PromptRenderer
    from timealign.suites.tictoc.requests import ChatRequestRenderer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    renderer = PromptRenderer(tokenizer)
    plain = _rows_of(_record(), tmp_path)[0]
    empty = _record()
    empty["history"][7]["tool_calls"] = []
    mapping = _record()
    for m in mapping["history"]:
        for call in m.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    for record in (empty, mapping):
        row = _rows_of(record, tmp_path)[0]
        assert renderer.pair(row["prompt"], row["chosen"][0], row["rejected"][0], row["tools"]) == renderer.pair(
            plain["prompt"], plain["chosen"][0], plain["rejected"][0], plain["tools"]
        )
    # a template that needs ids (as Mistral's does) and prints them
    tokenizer.chat_template = (
        "{% for m in messages %}{% for c in m.tool_calls or [] %}{% if c.id is not defined %}"
        "{{ raise_exception('a call without id') }}{% endif %}<call {{ c.id }}>{% endfor %}"
        "{% if m.role == 'tool' %}<result {{ m.tool_call_id }}>{% endif %}{{ m.content }}|{% endfor %}"
    )
    no_ids = _rows_of(_without_ids(_record()), tmp_path)[0]
    text = PromptRenderer(tokenizer, timestamps=False).prompt(no_ids["prompt"], no_ids["tools"])
    assert "<call call00001>|<result call00001>" in text and "<call call00002>|<result call00002>" in text
    assert text == PromptRenderer(tokenizer, timestamps=False).prompt(no_ids["prompt"], no_ids["tools"])
    api = ChatRequestRenderer(timestamps=False).messages(no_ids["prompt"])
    assert [c["id"] for c in api[2]["tool_calls"]] == ["call00001"] and api[3]["tool_call_id"] == "call00001"
    assert [c["id"] for c in api[5]["tool_calls"]] == ["call00002"] and api[6]["tool_call_id"] == "call00002"
