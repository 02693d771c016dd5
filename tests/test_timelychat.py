"""TimelyChat / dialog loaders and validation, the synthetic dialog generator, data prep, and TIMER sequences with
their time/response token masks (the shared TimerRenderer)."""

import json
from collections import defaultdict

import pytest

from timealign.config import DataSection, TimerSection
from timealign.data.synthetic import EVENTS, generate_timelychat
from timealign.data.timelychat import (
    DialogFormatError,
    load_dialogs,
    load_files,
    load_timelychat,
    timer_sequences,
)
from timealign.data.timer_prep import load_timer_prepared, prepare_timer_data
from timealign.render.timer import (
    TIMER_SPK,
    TIMER_TIME,
    TIMER_UTT,
    TOKEN_OTHER,
    TOKEN_RESPONSE,
    TOKEN_TIME,
    TimerRenderer,
    TimerTurn,
    add_timer_tokens,
)

SAMPLE_MINUTES = {
    "paper-appendix-1": 20,
    "paper-appendix-2": 120,
    "paper-appendix-3": 120,
    "paper-appendix-4": 480,
    "paper-appendix-5": 300,
    "paper-appendix-6": 30,
}


def record(**changes):
    base = {
        "id": "r1",
        "speaker_list": ["A", "B"],
        "context": ["I'm off to the gym.", "Have fun!"],
        "target_speaker": "A",
        "time_elapsed": "1 hour 30 minutes",
        "timely_response": "Done, so tired.",
        "untimely_response": "Thanks, leaving now.",
    }
    base.update(changes)
    return base


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def timer_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    add_timer_tokens(tok)
    return tok


# ------------------------------------------------------------------------------------------------ loaders


def test_timelychat_sample_loads(timelychat_sample):
    result = load_timelychat(timelychat_sample)
    assert result.rejects == [] and len(result.dialogs) == 6
    for d in result.dialogs:
        raw = next(r for r in map(json.loads, timelychat_sample.read_text().splitlines()) if r["id"] == d.id)
        assert d.speakers == raw["speaker_list"] + [raw["target_speaker"]]
        assert d.utterances[:-1] == [" ".join(u.split()) for u in raw["context"]]
        assert d.utterances[-1] == raw["timely_response"] and d.instant_response == raw["untimely_response"]
        assert d.minutes == [0.0] * len(raw["context"]) + [SAMPLE_MINUTES[d.id]]
        assert d.split == "train"  # a single file goes to the train split


def test_dialog_layout_and_folder_splits(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write_jsonl(
        folder / "train.jsonl",
        [
            {
                "id": "d1",
                "turns": [
                    {"speaker": "A", "utterance": "Going for a run."},
                    {"speaker": "B", "utterance": "Enjoy!", "delay": 0},
                    {"speaker": "A", "utterance": "Back, that was great.", "delay": "PT40M"},
                ],
                "untimely_response": "Bye!",
            }
        ],
    )
    (folder / "test.json").write_text(json.dumps([record(id="t1")]))
    result = load_files(folder, split_names={"train": "train", "eval": "test"})
    by_id = {d.id: d for d in result.dialogs}
    assert by_id["d1"].minutes == [0.0, 0.0, 40.0] and by_id["d1"].split == "train"
    assert by_id["t1"].split == "test" and by_id["t1"].target_minutes == 90.0
    assert load_dialogs(folder / "train.jsonl").dialogs[0].instant_response == "Bye!"


@pytest.mark.parametrize(
    "bad,reason",
    [
        (record(context=["only one"]), "`speaker_list` has 2 entries but `context` has 1"),
        (record(time_elapsed="a while"), "cannot parse time interval 'a while'"),
        (record(context=["I'm off.", "   "]), "context[1] is empty"),
        (record(timely_response=""), "`timely_response` is empty"),
        (record(untimely_response=" \n "), "`untimely_response` is empty"),
        (record(speaker_list=["A", ""]), "speaker_list[1] is empty"),
        (record(context=["I'm off.", "see <UTT> you"]), "reserved TIMER marker <UTT>"),
        ({k: v for k, v in record().items() if k != "time_elapsed"}, "missing `time_elapsed`"),
        (record(context=[]), "must be the same length"),
    ],
)
def test_bad_records_name_file_and_record(tmp_path, bad, reason):
    path = write_jsonl(tmp_path / "eval.jsonl", [record(id="good"), dict(bad, id="bad")])
    with pytest.raises(DialogFormatError) as err:
        load_timelychat(path)
    assert f"{path}: record 'bad'" in str(err.value) and reason in str(err.value)
    skipped = load_timelychat(path, on_error="skip")
    assert [d.id for d in skipped.dialogs] == ["good"]
    assert skipped.rejects == [{"source": str(path), "id": "bad", "reason": err.value.reason}]


def test_bad_json_line_and_missing_path(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(record()) + "\n{not json\n")
    with pytest.raises(DialogFormatError, match=r"x.jsonl: record '#1': line 2 is not valid JSON"):
        load_timelychat(path)
    assert len(load_timelychat(path, on_error="skip").dialogs) == 1
    with pytest.raises(FileNotFoundError):
        load_timelychat(tmp_path / "nope.jsonl")


def test_prepare_writes_manifest_and_rejects(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [record(id="a"), record(id="b", time_elapsed="soonish"), record(id="c", time_elapsed="8 hours")],
    )
    data = DataSection(source="timelychat", path=str(path), on_error="skip")
    info = prepare_timer_data(data, TimerSection(), tmp_path / "prep")
    assert info["dialogs"] == 2 and info["rejects"] == 1
    assert info["splits"]["train"]["target_interval_buckets"] == {"half-day": 1, "moderate": 1}
    rejects = [json.loads(x) for x in (tmp_path / "prep" / "rejects.jsonl").read_text().splitlines()]
    assert rejects[0]["id"] == "b" and "soonish" in rejects[0]["reason"]
    ds = load_timer_prepared(tmp_path / "prep")
    assert ds["train"]["minutes"][1] == [0.0, 0.0, 480.0]
    with pytest.raises(DialogFormatError):
        prepare_timer_data(DataSection(source="timelychat", path=str(path)), TimerSection(), tmp_path / "p2")


# ------------------------------------------------------------------------------------------------ synthetic


def test_synthetic_dialogs_are_seeded_valid_and_learnable(tmp_path):
    a, b = generate_timelychat(300, seed=3), generate_timelychat(300, seed=3)
    assert a == b and a != generate_timelychat(300, seed=4)
    assert generate_timelychat(50, seed=3, split="train") != generate_timelychat(50, seed=3, split="test")
    result = load_timelychat(write_jsonl(tmp_path / "s.jsonl", a))
    assert result.rejects == [] and len(result.dialogs) == 300
    by_event = defaultdict(set)
    events = {e.key: e for e in EVENTS}
    for raw, dialog in zip(a, result.dialogs):
        by_event[raw["event"]].add(dialog.target_minutes)
        assert dialog.speakers[-1] != dialog.speakers[-2]  # the partner's turn, then the delayed reply
        assert all(x != y for x, y in zip(dialog.speakers, dialog.speakers[1:]))  # speakers alternate
        assert 4 <= len(raw["context"]) <= 9
        assert any(u in events[raw["event"]].announce for u in raw["context"])  # the event is named
    for key, minutes in by_event.items():  # the event fixes the delay to its few typical values
        assert minutes <= set(events[key].minutes)
    buckets = {d["time_elapsed"] for d in a}
    assert {"20 minutes", "2 hours", "8 hours"} & buckets


# ------------------------------------------------------------------------------------------------ TIMER sequences

TURNS = [
    TimerTurn("A", "I finally got home."),
    TimerTurn("B", "Wash out your fatigue."),
    TimerTurn("A", "I feel much better now!", 90),
]


def typed(tok, feats, kind):
    """Decoded text of the tokens of one kind, joined."""
    return "".join(tok.decode([i]) for i, t in zip(feats["input_ids"], feats["token_types"]) if t == kind)


def test_time_first_sequence_and_masks(timer_tokenizer):
    tok = timer_tokenizer
    r = TimerRenderer(tok)
    eos = tok.eos_token
    assert r.text(TURNS) == (
        f"{TIMER_SPK}A{TIMER_TIME}0 minutes{TIMER_UTT}I finally got home."
        f"{TIMER_SPK}B{TIMER_TIME}0 minutes{TIMER_UTT}Wash out your fatigue."
        f"{TIMER_SPK}A{TIMER_TIME}1 hour 30 minutes{TIMER_UTT}I feel much better now!{eos}"
    )
    f = r.features(TURNS)  # loss_turns=all: turns 2..T; a closing marker belongs to the span it closes
    assert typed(tok, f, TOKEN_TIME) == f"0 minutes{TIMER_UTT}1 hour 30 minutes{TIMER_UTT}"
    assert typed(tok, f, TOKEN_RESPONSE) == f"Wash out your fatigue.{TIMER_SPK}I feel much better now!{eos}"
    assert f["labels"] == [i if t else -100 for i, t in zip(f["input_ids"], f["token_types"])]
    assert f["input_ids"] == tok(r.text(TURNS))["input_ids"]  # the backend fast path matches the public call
    target = r.features(TURNS, r.train_turn_indices(3, "target"))
    assert typed(tok, target, TOKEN_TIME) == f"1 hour 30 minutes{TIMER_UTT}"
    assert typed(tok, target, TOKEN_RESPONSE) == f"I feel much better now!{eos}"


def test_byte_level_boundary_without_special_tokens(timer_tokenizer):
    """Plain `s tau u`: the space before a word belongs to that word's span, whatever piece carries it."""
    tok = timer_tokenizer
    r = TimerRenderer(tok, special_tokens=False)
    text = r.text(TURNS)
    assert text == (
        "A 0 minutes I finally got home.\nB 0 minutes Wash out your fatigue.\n"
        f"A 1 hour 30 minutes I feel much better now!{tok.eos_token}"
    )
    f = r.features(TURNS, [2])
    pieces = [(tok.decode([i]), t) for i, t in zip(f["input_ids"], f["token_types"])]
    # The tiny tokenizer splits digits off, leaving a whitespace-only piece " " before "1": a TIME token.
    start = pieces.index(("A", TOKEN_OTHER), 20)
    assert pieces[start + 1] == (" ", TOKEN_TIME) and pieces[start + 2] == ("1", TOKEN_TIME)
    assert typed(tok, f, TOKEN_TIME) == " 1 hour 30 minutes"
    assert typed(tok, f, TOKEN_RESPONSE) == f" I feel much better now!{tok.eos_token}"
    # Straddling pieces: a fake offset map where one token covers "A 1" (speaker + space + digit).
    from timealign.render.timer import _batch_token_types

    spans = [("A", TOKEN_OTHER), (" 1 hour", TOKEN_TIME), (" ok", TOKEN_RESPONSE)]
    text = "A 1 hour ok"
    assert _batch_token_types([text], [spans], [[(0, 3), (3, 8), (8, 9), (9, 11)]]) == [
        [TOKEN_OTHER, TOKEN_TIME, TOKEN_RESPONSE, TOKEN_RESPONSE]
    ]  # "A 1" starts on "A"; " " -> next span
    assert _batch_token_types([text], [spans], [[(0, 0), (0, 1), (1, 3), (3, 11)]]) == [
        [TOKEN_OTHER, TOKEN_OTHER, TOKEN_TIME, TOKEN_TIME]
    ]  # BOS (0, 0); " 1" -> its first non-space: TIME


def test_utterance_first_and_counterpart(timer_tokenizer, timelychat_sample):
    tok = timer_tokenizer
    r = TimerRenderer(tok, order="utterance_first")
    f = r.features(TURNS, [2])
    assert typed(tok, f, TOKEN_RESPONSE) == f"I feel much better now!{TIMER_TIME}"
    assert typed(tok, f, TOKEN_TIME) == f"1 hour 30 minutes{tok.eos_token}"
    dialog = load_timelychat(timelychat_sample).dialogs[0]
    seqs = timer_sequences(dialog, "all", emit_instant_counterpart=True)
    assert len(seqs) == 2
    (turns, train, time_train), (instant, instant_train, instant_time) = seqs
    assert train == time_train == list(range(1, len(turns)))
    assert instant_train == [len(instant) - 1] and instant_time == []
    assert instant[:-1] == turns[:-1] and instant[-1] == TimerTurn("A", dialog.instant_response, 0.0)
    counterpart = TimerRenderer(tok).features(instant, instant_train, time_turns=instant_time)
    # the counterpart trains the instant reply given tau = 0, not the interval (its context calls for a delay)
    assert typed(tok, counterpart, TOKEN_TIME) == ""
    assert typed(tok, counterpart, TOKEN_RESPONSE) == dialog.instant_response + tok.eos_token
    assert (
        TimerRenderer(tok)
        .text(instant)
        .endswith(f"{TIMER_TIME}0 minutes{TIMER_UTT}{dialog.instant_response}{tok.eos_token}")
    )
    assert len(timer_sequences(dialog, "all", emit_instant_counterpart=False)) == 1


def test_truncation_keeps_the_target_turn(timer_tokenizer):
    tok = timer_tokenizer
    r = TimerRenderer(tok)
    long_turns = [TimerTurn("AB"[i % 2], f"turn number {i} with some words") for i in range(30)] + [TURNS[-1]]
    full = r.features(long_turns)
    cut = r.features(long_turns, max_length=60)
    assert len(full["input_ids"]) > 60 >= len(cut["input_ids"])
    assert cut["input_ids"][0] == tok.convert_tokens_to_ids(TIMER_SPK)  # starts at a whole turn
    assert cut["input_ids"] == full["input_ids"][-len(cut["input_ids"]) :]
    assert typed(tok, cut, TOKEN_TIME).endswith(f"1 hour 30 minutes{TIMER_UTT}")


def test_inference_prompts_are_training_prefixes(timer_tokenizer):
    tok = timer_tokenizer
    for special in (True, False):
        r = TimerRenderer(tok, special_tokens=special)
        full = r.text(TURNS)
        step1 = r.interval_prompt(TURNS[:2], "A")
        step2 = r.response_prompt(TURNS[:2], "A", 90)
        assert full.startswith(step1) and full.startswith(step2) and len(step2) > len(step1)
        assert r.read_interval(full[len(step1) :]) == ("1 hour 30 minutes", 90.0)
        assert r.read_utterance(full[len(step2) :]) == "I feel much better now!"
    u = TimerRenderer(tok, order="utterance_first")
    full = u.text(TURNS)
    assert full.startswith(u.utterance_prompt(TURNS[:2], "A"))
    assert full.startswith(u.interval_after_prompt(TURNS[:2], "A", TURNS[2].utterance))
    assert TimerRenderer(tok).read_interval("a while<UTT>x") == ("a while", None)
    with pytest.raises(ValueError, match="lacks the TIMER tokens"):
        from transformers import AutoTokenizer

        TimerRenderer(AutoTokenizer.from_pretrained(tok.name_or_path))


def test_dialog_records_and_the_dialogs_command(tmp_path, capsys):
    """In-memory records share the loaders' validation; the data-prep command exits 1 on bad data, with the hint."""
    from timealign.config.cli import DATA_HINT
    from timealign.data.commands import dialogs_main
    from timealign.data.records import RecordError
    from timealign.data.timelychat import dialog_records

    loaded = dialog_records(generate_timelychat(3, seed=1), "memory", split="eval", layout="timelychat")
    assert [d.split for d in loaded.dialogs] == ["eval"] * 3 and loaded.samples is loaded.dialogs
    with pytest.raises(RecordError, match="memory: record 'x': `timely_response` is empty"):
        dialog_records([record(id="x", timely_response="")], "memory")
    path = write_jsonl(tmp_path / "d.jsonl", [record(id="a"), record(id="a")])
    args = ["recipe=tiny-timer", "data.source=timelychat", f"data.path={path}"]
    assert dialogs_main([*args, f"out={tmp_path / 'p'}"]) == 1
    err = capsys.readouterr().err
    assert "record 'a': duplicate record id in this file" in err and DATA_HINT in err
    assert dialogs_main([*args, f"out={tmp_path / 'p'}", "data.on_error=skip"]) == 0
    assert json.loads((tmp_path / "p" / "manifest.json").read_text())["rejects"] == 1
