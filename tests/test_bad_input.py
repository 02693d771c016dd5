"""Bad input to the TicToc and TimelyChat loaders (issue 16): every class is an error naming the file and the record,
and with on_error=skip exactly the bad records are rejected with their reason while every other record is kept.

Each class here crashed with a traceback or passed silently before: non-UTF-8 text, an integer id, tool arguments
nested too deeply, a v1 file name in another spelling, duplicates, roles out of chat order, an unknown role, a call
to an undeclared function, a time without a timezone; for TimelyChat a target speaker not in the dialog, a third
speaker, non-UTF-8 text, an empty file and a JSON object file.
"""

import copy
import json
import logging
from pathlib import Path

import pytest
from helpers import FINAL_TIMES, annotated_record, rid, v1_record, write_jsonl, write_v1

from timealign.config import DataSection, RecipeError
from timealign.data.records import RecordError
from timealign.data.tictoc import load_annotated, load_v1
from timealign.data.tictoc_layout import MAX_ARGUMENT_DEPTH, PREFER_NO_TOOL, TicTocFormatError
from timealign.data.timelychat import load_files, load_timelychat


def expect_named_and_skipped(load, path, source, bad_id, reason, kept_ids):
    """Raise mode: a RecordError naming `source` and `bad_id` (None: the file itself) with `reason`. Skip mode: the
    same reason as the only reject, every other record kept. Returns the error."""
    with pytest.raises(RecordError) as err:
        load(path, on_error="raise")
    where = f"{source}: record {bad_id!r}: " if bad_id is not None else f"{source}: "
    assert str(err.value).startswith(where), str(err.value)
    assert reason in err.value.reason, err.value.reason
    skipped = load(path, on_error="skip")
    assert skipped.rejects == [{"source": str(source), "id": bad_id, "reason": err.value.reason}]
    assert sorted(s.id for s in skipped.samples) == sorted(kept_ids)
    return err.value


# ---------------------------------------------------------------------------------------------- TicToc


def test_non_utf8_text_names_the_record(tmp_path):
    folder = tmp_path / "v1"
    bad = v1_record(rid(2))
    bad["history"][1]["content"] = "Prix d'ACME, s'il vous pla\u00eet?"
    text = json.dumps([v1_record(rid(1)), bad, v1_record(rid(3))], ensure_ascii=False)
    folder.mkdir()
    path = folder / "preferTool_elapse_1.json"
    path.write_bytes(text.encode("latin-1"))  # not UTF-8: 0xee for the i circumflex
    err = expect_named_and_skipped(
        lambda p, on_error: load_v1(p, on_error=on_error),
        folder,
        path,
        rid(2),
        "not valid UTF-8 at history[1].content: byte 0xee",
        [rid(1), rid(3)],
    )
    assert "Latin-1" in str(err)


def test_non_utf8_byte_outside_a_string_names_the_file(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b"[" + json.dumps(annotated_record(rid(1))).encode() + b",\xff]")
    with pytest.raises(TicTocFormatError, match=r"malformed JSON.*not valid UTF-8 either \(byte 0xff\)"):
        load_annotated(path)
    assert load_annotated(path, on_error="skip").rejects[0]["source"] == str(path)


def test_a_utf8_byte_order_mark_is_fine(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(annotated_record(rid(1))).encode() + b"\n")
    assert [s.id for s in load_annotated(path).samples] == [rid(1)]


@pytest.mark.parametrize("value, shown", [(17, "int 17"), ("  ", "str '  '"), (["a"], "list ['a']")])
def test_an_id_that_is_not_a_string(tmp_path, value, shown):
    path = write_jsonl(tmp_path / "a.jsonl", [annotated_record(rid(1)), dict(annotated_record(rid(2)), id=value)])
    expect_named_and_skipped(
        load_annotated, path, path, "#1", f"`id` must be a non-empty string, got {shown}", [rid(1)]
    )


def _nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    "arguments, reason",
    [
        (_nested(20000), "nest too deeply to parse"),  # json.loads: RecursionError
        (_nested(MAX_ARGUMENT_DEPTH + 1), f"nest deeper than {MAX_ARGUMENT_DEPTH} levels"),
        (json.loads(_nested(MAX_ARGUMENT_DEPTH + 1)), f"nest deeper than {MAX_ARGUMENT_DEPTH} levels"),  # a mapping
        ("[1, 2]", "must be a mapping of parameter names to values, got list"),
    ],
)
def test_deeply_nested_tool_arguments(tmp_path, arguments, reason):
    bad = v1_record(rid(2))
    bad["history"][2]["tool_calls"][0]["function"]["arguments"] = arguments
    folder = write_v1(tmp_path / "v1", {"preferTool_elapse_0.json": [v1_record(rid(1)), bad]})
    expect_named_and_skipped(
        lambda p, on_error: load_v1(p, on_error=on_error),
        folder,
        folder / "preferTool_elapse_0.json",
        rid(2),
        f"history[2].tool_calls[0]: tool-call arguments {reason}",
        [rid(1)],
    )


def test_arguments_at_the_depth_limit_load(tmp_path):
    record = v1_record(rid(1))
    record["history"][2]["tool_calls"][0]["function"]["arguments"] = _nested(MAX_ARGUMENT_DEPTH)
    assert len(load_v1(write_v1(tmp_path / "v1", {"preferTool_elapse_0.json": [record]})).samples) == 1


def test_a_record_nested_too_deeply_for_the_json_parser(tmp_path):
    path = tmp_path / "a.jsonl"
    deep = json.dumps(annotated_record(rid(2)))[:-1] + ', "notes": ' + "[" * 100000 + "]" * 100000 + "}"
    path.write_text(json.dumps(annotated_record(rid(1))) + "\n" + deep + "\n")
    expect_named_and_skipped(load_annotated, path, path, "line 2", "JSON nested too deeply to read", [rid(1)])


def test_v1_files_with_unexpected_names_are_listed(tmp_path):
    """34 records of `prefernotool_elapse_1.json` were skipped without a word; now the folder is refused."""
    folder = write_v1(
        tmp_path / "v1",
        {
            "preferTool_elapse_1.json": [v1_record(rid(1))],
            "prefernotool_elapse_1.json": [v1_record(rid(2))],  # another capitalisation
            "preferTool_elapse_3.json": [v1_record(rid(3))],  # no level 3
            "extra.jsonl": [v1_record(rid(4))],
        },
    )
    (folder / "README.md").write_text("notes, not data")  # not a data file: ignored
    with pytest.raises(TicTocFormatError) as err:
        load_v1(folder)
    message = str(err.value)
    assert message.startswith(f"{folder}: 3 data file(s) that a TicToc v1 folder does not hold")
    assert "extra.jsonl (matches no prefer{Tool,NoTool}_elapse_{0,1,2}.json name)" in message
    assert "prefernotool_elapse_1.json (differs only in letter case from preferNoTool_elapse_1.json)" in message
    assert "preferTool_elapse_3.json (elapse level 3 in the file name; levels are 0-2)" in message
    skipped = load_v1(folder, on_error="skip")
    assert [s.id for s in skipped.samples] == [rid(1)]
    assert [(Path(r["source"]).name, r["id"]) for r in skipped.rejects] == [
        ("extra.jsonl", None),
        ("preferTool_elapse_3.json", None),
        ("prefernotool_elapse_1.json", None),
    ]
    assert all(r["reason"].startswith("not a TicToc v1 file name: ") for r in skipped.rejects)


def test_an_empty_v1_level_file_is_a_list_of_no_records_but_an_empty_file_is_an_error(tmp_path):
    folder = write_v1(
        tmp_path / "v1", {"preferTool_elapse_1.json": [v1_record(rid(1))], "preferNoTool_elapse_2.json": []}
    )
    assert len(load_v1(folder).samples) == 1
    (folder / "preferNoTool_elapse_1.json").write_text("")
    expect_named_and_skipped(
        lambda p, on_error: load_v1(p, on_error=on_error),
        folder,
        folder / "preferNoTool_elapse_1.json",
        None,
        "empty file: no records",
        [rid(1)],
    )


def test_duplicates_are_rejected_naming_the_first(tmp_path):
    one, two = v1_record(rid(1)), v1_record(rid(2))
    under_another_id = dict(copy.deepcopy(one), id=rid(3))
    folder = write_v1(
        tmp_path / "v1",
        {
            "preferTool_elapse_1.json": [one, two, copy.deepcopy(one), under_another_id],
            "preferNoTool_elapse_1.json": [copy.deepcopy(two)],  # same id and level, the opposite label
            "preferNoTool_elapse_0.json": [copy.deepcopy(two)],  # another level: a sample of its own
        },
    )
    tool_file, no_tool_file = folder / "preferTool_elapse_1.json", folder / "preferNoTool_elapse_1.json"
    with pytest.raises(TicTocFormatError) as err:
        load_v1(folder)
    # Files are read in name order: preferNoTool_elapse_1.json's copy of rid(2) comes before preferTool's.
    assert str(err.value) == (
        f"{tool_file}: record {rid(2)!r}: this record (#1) duplicates record {rid(2)!r} (#0) "
        f"of {no_tool_file}: same id and elapse level, but labelled {PREFER_NO_TOOL} there and "
        "prefer_tool here: contradicting labels"
    )
    skipped = load_v1(folder, on_error="skip")
    assert sorted((s.id, s.elapse_level, s.label) for s in skipped.samples) == [
        (rid(1), 1, "prefer_tool"),
        (rid(2), 0, PREFER_NO_TOOL),
        (rid(2), 1, PREFER_NO_TOOL),
    ]
    reasons = {r["id"]: r["reason"] for r in skipped.rejects}
    assert len(skipped.rejects) == 3 and reasons[rid(2)] == err.value.reason
    earlier = f"duplicates record {rid(1)!r} (#0) of {tool_file}"
    assert (
        reasons[rid(1)] == f"this record (#2) {earlier}: an exact copy (same id, elapse level, conversation and label)"
    )
    assert reasons[rid(3)] == (
        f"this record (#3) {earlier}: the same conversation and tools at the same elapse level under another id"
    )


def test_annotated_duplicates_across_files(tmp_path):
    folder = tmp_path / "ann"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [annotated_record(rid(1)), annotated_record(rid(2))])
    changed = annotated_record(rid(1), score=2.5)
    write_jsonl(folder / "b.jsonl", [annotated_record(rid(3)), changed])
    expect_named_and_skipped(
        load_annotated,
        folder,
        folder / "b.jsonl",
        rid(1),
        f"this record (line 2) duplicates record {rid(1)!r} (line 1) of {folder / 'a.jsonl'}: "
        "same id, elapse level and conversation, score 3.0 there and 2.5 here",
        [rid(1), rid(2), rid(3)],
    )


def _swap(record: dict, i: int, j: int) -> dict:
    h = record["history"]
    h[i]["role"], h[j]["role"] = h[j]["role"], h[i]["role"]
    return record


def _out_of_order():
    text_only = annotated_record(rid(2))
    del text_only["history"][2:5]  # system, user, user question
    text_only["history"].insert(2, {"role": "assistant", "content": "Hello.", "time": "2024-05-01T09:00:03Z"})
    return {
        "assistant first": (
            _swap(copy.deepcopy(text_only), 1, 2),
            "history[1] is an assistant message, but the conversation starts with the user's",
        ),
        "user makes the call": (
            _swap(annotated_record(rid(2)), 1, 2),
            "history[2] (user) has tool calls; only assistant messages make them",
        ),
        "result before its call": (_swap(annotated_record(rid(2)), 2, 3), "history[2] (tool) has tool calls"),
        "answer instead of the result": (
            _swap(annotated_record(rid(2)), 3, 4),
            "history[3] (assistant) comes before every tool call of history[2] has its result (unanswered: 'call_a')",
        ),
        "system later": (
            _swap(annotated_record(rid(2)), 0, 1),
            "history[1] is a system message; only the first message may be one",
        ),
        "result of another call": (
            _edit(annotated_record(rid(2)), 3, tool_call_id="call_z"),
            "history[3] answers tool_call_id 'call_z', which is no unanswered call of history[2] ('call_a')",
        ),
        "result under another name": (
            _edit(annotated_record(rid(2)), 3, name="get_news"),
            "history[3] is named 'get_news' but answers call 'call_a' to 'get_price'",
        ),
        "empty assistant": (
            _edit(annotated_record(rid(2)), 4, content=None),
            "history[4] is an assistant message with neither text nor tool calls",
        ),
        "unknown role": (
            _edit(annotated_record(rid(2)), 4, role="bot"),
            "history[4] has the unknown role 'bot'; roles are system, user, assistant, tool",
        ),
    }


def _edit(record: dict, i: int, **changes) -> dict:
    record["history"][i].update(changes)
    return record


@pytest.mark.parametrize("case", list(_out_of_order()))
def test_roles_must_follow_the_chat_order(tmp_path, case):
    bad, reason = _out_of_order()[case]
    path = write_jsonl(tmp_path / "a.jsonl", [annotated_record(rid(1)), bad, annotated_record(rid(3))])
    expect_named_and_skipped(load_annotated, path, path, rid(2), reason, [rid(1), rid(3)])


def test_orders_openai_allows_are_kept(tmp_path):
    """No system message, two user messages in a row, text with a call, two calls answered in any order."""
    record = annotated_record(rid(1))
    h = record["history"]
    del h[0]
    h.insert(1, {"role": "user", "content": "Quick please.", "time": "2024-05-01T09:00:01Z"})
    h[2]["content"] = "Let me look."
    h[2]["tool_calls"].append(
        {"id": "call_b", "type": "function", "function": {"name": "get_price", "arguments": {"symbol": "BOLT"}}}
    )
    h.insert(
        3,
        {
            "role": "tool",
            "tool_call_id": "call_b",
            "name": "get_price",
            "content": '{"price": 20}',
            "time": "2024-05-01T09:00:04Z",
        },
    )
    assert [m["role"] for m in h] == ["user", "user", "assistant", "tool", "tool", "assistant", "user"]
    assert len(load_annotated(write_jsonl(tmp_path / "a.jsonl", [record])).samples) == 1


def test_a_call_to_an_undeclared_function(tmp_path):
    bad = v1_record(rid(2))
    bad["history"][2]["tool_calls"][0]["function"]["name"] = "get_quote"
    no_schemas = dict(v1_record(rid(3)), function=[])
    folder = write_v1(tmp_path / "v1", {"preferTool_elapse_2.json": [v1_record(rid(1)), bad, no_schemas]})
    path = folder / "preferTool_elapse_2.json"
    with pytest.raises(TicTocFormatError) as err:
        load_v1(folder)
    assert str(err.value) == (
        f"{path}: record {rid(2)!r}: history[2].tool_calls[0] calls 'get_quote', which the "
        "record's tool schemas do not declare (declared: get_price)"
    )
    skipped = load_v1(folder, on_error="skip")
    assert [s.id for s in skipped.samples] == [rid(1)]
    assert [r["id"] for r in skipped.rejects] == [rid(2), rid(3)]
    assert skipped.rejects[1]["reason"].endswith("do not declare (declared: none)")


def test_a_time_without_a_timezone_needs_assume_timezone(tmp_path):
    bad = annotated_record(rid(2))
    for message in bad["history"]:
        message["time"] = message["time"].rstrip("Z")
    path = write_jsonl(tmp_path / "a.jsonl", [annotated_record(rid(1)), bad])
    err = expect_named_and_skipped(
        load_annotated, path, path, rid(2), "history[0].time has no timezone: '2024-05-01T09:00:00'", [rid(1)]
    )
    assert "data.assume_timezone" in str(err)
    utc = load_annotated(path, assume_timezone="UTC").samples[1]
    assert [m["time"] for m in utc.history] == [m["time"] for m in annotated_record(rid(2))["history"]]
    berlin = load_annotated(path, assume_timezone="Europe/Berlin").samples[1]
    assert berlin.history[3]["time"] == "2024-05-01T09:00:04+02:00"  # the wall clock, with the zone's offset (CEST)
    assert bad["history"][3]["time"] == "2024-05-01T09:00:04"  # the input records are not modified
    assert load_annotated(path, assume_timezone="-05:00").samples[1].history[5]["time"] == "2024-05-01T12:00:00-05:00"
    with pytest.raises(RecipeError, match="data.assume_timezone='Mars/Olympus' is not a time zone"):
        load_annotated(path, assume_timezone="Mars/Olympus")


def test_v1_final_time_list_without_a_timezone(tmp_path):
    bad = v1_record(rid(2))
    bad["history"][-1]["time"] = [t.rstrip("Z") for t in FINAL_TIMES]
    folder = write_v1(tmp_path / "v1", {"preferTool_elapse_2.json": [v1_record(rid(1)), bad]})
    with pytest.raises(TicTocFormatError, match="final time 0 has no timezone: '2024-05-01T09:05:00'"):
        load_v1(folder)
    kept = load_v1(folder, assume_timezone="UTC").samples
    assert [s.history[-1]["time"] for s in kept] == [FINAL_TIMES[2]] * 2


def test_data_prep_in_skip_mode_keeps_every_good_record(tmp_path):
    """One folder with a bad record of every class: the pairs are exactly the good records, each bad one is a line
    of rejects.jsonl with its reason."""
    from timealign.data.pairs import prepare

    good = [v1_record(rid(n)) for n in range(1, 6)]
    bad = {}
    bad["int id"] = dict(v1_record(rid(10)), id=10)
    bad["undeclared"] = v1_record(rid(11))
    bad["undeclared"]["history"][2]["tool_calls"][0]["function"]["name"] = "get_quote"
    bad["deep"] = v1_record(rid(12))
    bad["deep"]["history"][2]["tool_calls"][0]["function"]["arguments"] = _nested(20000)
    bad["swapped"] = _swap(v1_record(rid(13)), 1, 2)
    bad["unknown role"] = _edit(v1_record(rid(14)), 4, role="bot")
    bad["naive"] = _edit(v1_record(rid(15)), 3, time="2024-05-01T09:00:04")
    bad["duplicate"] = copy.deepcopy(good[0])
    latin = v1_record(rid(16))
    latin["history"][1]["content"] = "Prix d'ACME, s'il vous pla\u00eet?"
    folder = write_v1(tmp_path / "v1", {"preferTool_elapse_1.json": good[:3] + list(bad.values())})
    (folder / "preferNoTool_elapse_0.json").write_bytes(
        json.dumps(good[3:] + [latin], ensure_ascii=False).encode("latin-1")
    )
    (folder / "PreferTool_elapse_2.json").write_text(json.dumps([v1_record(rid(17))]))
    info = prepare(DataSection(source="v1", path=str(folder), on_error="skip"), tmp_path / "out")
    assert info["pairs"] == len(good)
    rejects = [json.loads(line) for line in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert info["rejects"] == len(rejects) == len(bad) + 2
    assert sorted(str(r["id"]) for r in rejects) == sorted(["None", "#3", rid(1), *(rid(n) for n in range(11, 17))])
    assert all(r["reason"] for r in rejects)
    with pytest.raises(TicTocFormatError, match="PreferTool_elapse_2.json"):
        prepare(DataSection(source="v1", path=str(folder)), tmp_path / "out2")
    (folder / "PreferTool_elapse_2.json").unlink()
    with pytest.raises(
        TicTocFormatError,
        match=rf"preferNoTool_elapse_0.json: record '{rid(16)}': text that is not "
        "valid UTF-8",
    ):
        prepare(DataSection(source="v1", path=str(folder)), tmp_path / "out2")
    assert (
        prepare(DataSection(source="v1", path=str(folder), on_error="skip", assume_timezone="UTC"), tmp_path / "out3")[
            "pairs"
        ]
        == len(good) + 1
    )  # the naive-time record, read as UTC


def test_the_pairs_command_refuses_an_unknown_timezone(tmp_path, capsys):
    from timealign.data.commands import pairs_main

    path = write_jsonl(tmp_path / "a.jsonl", [annotated_record(rid(1))])
    code = pairs_main(
        [
            "recipe=tiny",
            "data.source=annotated",
            f"data.path={path}",
            "data.assume_timezone=Mars/Olympus",
            f"out={tmp_path / 'out'}",
        ]
    )
    assert code == 2 and "data.assume_timezone='Mars/Olympus' is not a time zone" in capsys.readouterr().err


@pytest.mark.parametrize(
    "target, reason",
    [
        (
            "preferTool_elapse_2.json",
            "a symbolic link that leads back to itself (-> preferTool_elapse_2.json): a loop that holds no data",
        ),
        ("gone/preferTool_elapse_2.json", "a symbolic link to gone/preferTool_elapse_2.json, which does not exist"),
    ],
)
def test_a_v1_file_that_links_to_nothing_is_named(tmp_path, target, reason):
    """Issue 42: a v1 file that links to itself (or to a file not there) is no file to `Path.is_file()`, so the
    folder trained on the other files without a word. Now one line naming it (skip mode: a reject)."""
    folder = write_v1(tmp_path / "v1", {"preferTool_elapse_1.json": [v1_record(rid(1))]})
    (folder / "preferTool_elapse_2.json").symlink_to(target)
    err = expect_named_and_skipped(
        lambda p, on_error: load_v1(p, on_error=on_error),
        folder,
        folder / "preferTool_elapse_2.json",
        None,
        f"{reason}; replace it with the data file or remove it",
        [rid(1)],
    )
    assert "\n" not in str(err)


def test_a_data_file_that_links_to_itself_is_named_in_other_folders_too(tmp_path):
    """The annotated and TimelyChat folder loaders (`data_files`) name such a link too, instead of reading the rest."""
    folder = tmp_path / "ann"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [annotated_record(rid(1))])
    (folder / "b.jsonl").symlink_to("b.jsonl")
    with pytest.raises(FileNotFoundError) as err:
        load_annotated(folder)
    assert str(err.value) == (
        f"{folder / 'b.jsonl'}: a symbolic link that leads back to itself (-> b.jsonl): a loop that holds no data; "
        "replace it with the data file or remove it"
    )


def test_a_v1_folder_missing_a_release_file_says_so(tmp_path, caplog):
    """Issue 42: a v1 folder without one of the release's five files trained on the rest with no word. Now a
    warning names the missing file; the five files say nothing."""
    from timealign.data.tictoc_layout import V1_RELEASE_FILES

    assert V1_RELEASE_FILES == (
        "preferTool_elapse_0.json",
        "preferTool_elapse_1.json",
        "preferTool_elapse_2.json",
        "preferNoTool_elapse_0.json",
        "preferNoTool_elapse_1.json",
    )
    files = {name: [v1_record(rid(n))] for n, name in enumerate(V1_RELEASE_FILES)}
    whole = write_v1(tmp_path / "whole", files)
    partial = write_v1(tmp_path / "partial", {k: v for k, v in files.items() if k != "preferNoTool_elapse_1.json"})
    with caplog.at_level(logging.WARNING, logger="timealign.data.tictoc"):
        assert len(load_v1(whole).samples) == 5
        assert not caplog.records
        assert len(load_v1(partial).samples) == 4
    assert [r.getMessage() for r in caplog.records] == [
        f"{partial}: no preferNoTool_elapse_1.json (the TicToc v1 release holds {', '.join(V1_RELEASE_FILES)}): "
        "only the other files' records are read; copy the missing file(s) in, unless you left them out on purpose"
    ]


# ---------------------------------------------------------------------------------------------- TimelyChat


def dialog(did: str, **changes) -> dict:
    base = {
        "id": did,
        "speaker_list": ["A", "B", "A"],
        "context": ["I'm off to the gym.", "Have fun!", "Thanks!"],
        "target_speaker": "B",
        "time_elapsed": "1 hour 30 minutes",
        "timely_response": "How was the gym?",
        "untimely_response": "See you.",
    }
    return {**base, **changes}


def load_tc(path, on_error):
    return load_timelychat(path, on_error=on_error)


@pytest.mark.parametrize(
    "bad, reason",
    [
        (dialog("bad", target_speaker="C"), "`target_speaker` 'C' is not one of the dialog's speakers ('A', 'B'"),
        (dialog("bad", target_speaker="b"), "`target_speaker` 'b' is not one of the dialog's speakers"),
        (
            dialog("bad", speaker_list=["A", "B", "C"]),
            "`speaker_list` has 3 speakers ('A', 'B', 'C'); a TimelyChat dialog is between two",
        ),
    ],
)
def test_timelychat_speakers(tmp_path, bad, reason):
    path = write_jsonl(tmp_path / "eval.jsonl", [dialog("d1"), bad, dialog("d3")])
    expect_named_and_skipped(load_tc, path, path, "bad", reason, ["d1", "d3"])


def test_the_dialogs_layout_may_have_more_speakers(tmp_path):
    record = {"id": "m", "turns": [{"speaker": s, "utterance": f"hi from {s}"} for s in ("A", "B", "C")]}
    assert load_files(write_jsonl(tmp_path / "d.jsonl", [record]), layout="dialogs").dialogs[0].speakers == [
        "A",
        "B",
        "C",
    ]


def test_timelychat_non_utf8(tmp_path):
    path = tmp_path / "eval.jsonl"
    lines = [json.dumps(dialog(d), ensure_ascii=False) for d in ("d1", "d2", "d3")]
    lines[1] = lines[1].replace("Have fun!", "Amuse-toi bien, \u00e0 plus!")
    path.write_bytes(("\n".join(lines) + "\n").encode("cp1252"))
    expect_named_and_skipped(load_tc, path, path, "d2", "not valid UTF-8 at context[1]: byte 0xe0", ["d1", "d3"])


@pytest.mark.parametrize(
    "name, content, reason",
    [
        ("eval.jsonl", "", "empty file: no records"),
        ("eval.jsonl", "\n  \n", "empty file: no records"),
        ("eval.json", "", "empty file: no records"),
        (
            "eval.json",
            json.dumps(dialog("x")),
            "expected a JSON list of records (or JSON Lines), got a JSON object with "
            "keys context, id, speaker_list, target_speaker",
        ),
        ("eval.json", json.dumps({"data": [dialog("x")]}), "got a JSON object with keys data"),
        ("eval.jsonl", json.dumps(dialog("x"), indent=2), "a JSON object written over 17 lines, not JSON Lines"),
        ("eval.json", "".join(json.dumps(dialog(d)) + "\n" for d in "xy"), "it looks like JSON Lines"),
    ],
)
def test_timelychat_files_that_hold_no_record_list(tmp_path, name, content, reason):
    """The file is named; skip mode rejects that file and reads the folder's other files."""
    folder = tmp_path / "data"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", [dialog("t1"), dialog("t2")])
    (folder / name).write_text(content)
    expect_named_and_skipped(
        lambda p, on_error: load_files(p, "timelychat", on_error), folder, folder / name, None, reason, ["t1", "t2"]
    )


def test_timelychat_duplicate_ids_across_files(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write_jsonl(folder / "train.jsonl", [dialog("d1"), dialog("d2")])
    write_jsonl(folder / "eval.jsonl", [dialog("d2"), dialog("d3")])  # d2 in both splits: a leak
    expect_named_and_skipped(
        lambda p, on_error: load_files(p, "timelychat", on_error),
        folder,
        folder / "train.jsonl",
        "d2",
        f"duplicate record id: record #0 of {folder / 'eval.jsonl'} has it too",
        ["d1", "d2", "d3"],
    )


def test_the_real_timelychat_sample_still_loads(timelychat_sample):
    assert len(load_timelychat(timelychat_sample).dialogs) == 6


def test_the_real_v1_release_still_loads_whole(tictoc_v1_dir, caplog):
    """Every new rule holds on all 1379 real samples: no call to an undeclared function, chat order kept, every
    time with Z, no duplicate (id, level) and no copied conversation; and it has every release file."""
    with caplog.at_level(logging.WARNING, logger="timealign.data.tictoc"):
        result = load_v1(tictoc_v1_dir, on_error="skip", unknown="bucket")
    assert len(result.samples) == 1379 and result.rejects == [] and not caplog.records


def test_an_upper_case_suffix_is_read_not_skipped(tmp_path):
    folder = tmp_path / "ann"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [annotated_record(rid(1))])
    (folder / "b.JSON").write_text(json.dumps([annotated_record(rid(2))]))
    assert sorted(s.id for s in load_annotated(folder).samples) == [rid(1), rid(2)]
