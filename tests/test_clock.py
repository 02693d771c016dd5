"""The elapsed-time rule as a baseline (`eval.backend=clock`, timealign/backends/clock.py): its decisions on
hand-computed cases, its NAR on the v1 test split against a computation straight from the release files, the line a
model's TicToc report carries for the same samples, `timealign compare` with a clock run beside a model run, and the
one-line refusals."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest

from timealign.backends.clock import ClockBackend, clock_calls, clock_request, tool_result_age
from timealign.backends.factory import make_backend
from timealign.config import EvalSection
from timealign.render.chat_api import parse_reply
from timealign.render.tool_calls import is_empty_output, is_tool_call
from timealign.suites.tictoc.requests import ClockRequestRenderer
from timealign.suites.tictoc.suite import clock_on_same_samples

CALL = {"id": "c1", "type": "function", "function": {"name": "get_price", "arguments": '{"symbol": "ACME"}'}}


def conversation(reply_time: str, *tool_times: str) -> list[dict]:
    """system, user, then per tool time an assistant call (just before) and its tool result, then the question."""
    messages = [
        {"role": "system", "content": "You help.", "time": "2025-08-10T09:00:00Z"},
        {"role": "user", "content": "Price of ACME?", "time": "2025-08-10T09:00:00Z"},
    ]
    for t in tool_times:
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [CALL], "time": t},
            {"role": "tool", "name": "get_price", "tool_call_id": "c1", "content": '{"price": 3}', "time": t},
            {"role": "assistant", "content": "ACME is at 3.", "time": t},
        ]
    return messages + [{"role": "user", "content": "And now?", "time": reply_time}]


@pytest.mark.parametrize(
    "messages, seconds, age, calls",
    [
        # no earlier tool result: call
        (conversation("2025-08-10T09:05:00Z"), 1800, None, True),
        # fractional seconds: just under, exactly at, just over the threshold (older than = strictly more)
        (conversation("2025-08-10T10:30:00.249Z", "2025-08-10T10:00:00.250Z"), 1800, 1799.999, False),
        (conversation("2025-08-10T10:30:00.250Z", "2025-08-10T10:00:00.250Z"), 1800, 1800.0, False),
        (conversation("2025-08-10T10:30:00.251Z", "2025-08-10T10:00:00.250Z"), 1800, 1800.001, True),
        # an offset: 12:00+02:00 is 10:00Z, 31 minutes before the question
        (conversation("2025-08-10T10:31:00Z", "2025-08-10T12:00:00+02:00"), 1800, 1860.0, True),
        # the latest tool result counts, not the first (4800 s old) one
        (conversation("2025-08-10T10:20:00Z", "2025-08-10T09:00:00Z", "2025-08-10T10:00:00Z"), 1800, 1200.0, False),
        (conversation("2025-08-10T10:20:00Z", "2025-08-10T09:00:00Z", "2025-08-10T10:00:00Z"), 600, 1200.0, True),
        (conversation("2025-08-10T10:20:00Z", "2025-08-10T10:00:00Z"), 0, 1200.0, True),
        (conversation("2025-08-10T10:00:00Z", "2025-08-10T10:00:00Z"), 0, 0.0, False),
    ],
)
def test_rule_decisions_by_hand(messages, seconds, age, calls):
    got = tool_result_age(messages)
    assert got == pytest.approx(age, abs=1e-9) if age is not None else got is None
    assert clock_calls(messages, seconds) is calls
    # The backend decides the same from its request string, and its reply is read back by the api detection of
    # either protocol: a call is a structured re-issue of the latest call, a direct answer is non-empty text.
    backend = ClockBackend(seconds)
    (reply,) = backend.generate([ClockRequestRenderer().prompt(messages, [])])
    for protocol in ("timealign", "paper"):
        assert is_tool_call(reply, "api", protocol) is calls
    assert not is_empty_output(reply, "api")
    if calls and age is not None:
        assert parse_reply(reply).tool_calls[0]["function"] == {"name": "get_price", "arguments": '{"symbol": "ACME"}'}


def test_no_earlier_call_calls_the_first_tool_and_missing_times_stop_the_run():
    tools = [{"type": "function", "function": {"name": "get_price", "parameters": {}}}]
    (reply,) = ClockBackend().generate([clock_request(conversation("2025-08-10T09:05:00Z"), json.dumps(tools))])
    assert parse_reply(reply).tool_calls[0]["function"] == {"name": "get_price", "arguments": "{}"}
    untimed = conversation("2025-08-10T10:20:00Z", "2025-08-10T10:00:00Z")
    untimed[-3] = dict(untimed[-3], time=None)  # the tool result
    with pytest.raises(ValueError, match="the last tool result"):
        ClockRequestRenderer().prompt(untimed, [])
    listed = conversation("2025-08-10T10:20:00Z", "2025-08-10T10:00:00Z")
    listed[-1] = dict(listed[-1], time=["2025-08-10T10:20:00Z", "2025-08-10T11:20:00Z", "2025-08-12T10:20:00Z"])
    with pytest.raises(ValueError, match="one sample per elapse level"):
        ClockRequestRenderer().prompt(listed, [])


def test_factory_builds_the_rule_from_the_eval_section():
    backend = make_backend(EvalSection(backend="clock", clock_seconds=400.5), "ignored")
    assert isinstance(backend, ClockBackend) and backend.seconds == 400.5 and backend.tokenizer is None
    assert backend.fingerprint != ClockBackend(1800).fingerprint  # the cache never mixes thresholds
    from timealign.backends.base import BACKENDS
    from timealign.config.validate import field_choices

    assert field_choices()["eval.backend"] == BACKENDS  # the recipe accepts what the factory builds


def _row(i: int, label: str, messages: list[dict]) -> dict:
    return {
        "id": f"s{i}",
        "elapse_level": 1,
        "label": label,
        "sensitivity": "high",
        "num_turns": len(messages) - 1,
        "prompt": messages,
        "tools": "[]",
    }


def test_rule_line_covers_exactly_the_samples_the_model_is_scored_on():
    """A failed sample, and under `paper` an empty output, leave the model's rates: they leave the rule's too."""
    old, fresh = (
        conversation("2025-08-10T12:00:00Z", "2025-08-10T10:00:00Z"),
        conversation("2025-08-10T10:01:00Z", "2025-08-10T10:00:00Z"),
    )
    rows = [
        _row(0, "prefer_tool", old),
        _row(1, "prefer_tool", fresh),
        _row(2, "prefer_no_tool", fresh),
        _row(3, "prefer_no_tool", old),
        _row(4, "prefer_tool", old),
    ]
    samples = [
        {"id": r["id"], "elapse_level": 1, "label": r["label"], "tool_call": False, "empty_output": False}
        for r in rows
    ]
    samples[3]["empty_output"] = True
    samples[4] = dict(samples[4], tool_call=None, empty_output=None, error="HTTP 500")
    for protocol, kept in (("timealign", ["s0", "s1", "s2", "s3"]), ("paper", ["s0", "s1", "s2"])):
        report = {"settings": {"protocol": protocol}, "samples": samples}
        line = clock_on_same_samples(report, rows, 1800, resamples=200)
        calls = {"s0": True, "s1": False, "s2": False, "s3": True}  # 2 h old -> call; 1 min old -> none
        want_tp = sum(calls[i] for i in kept if i in ("s0", "s1"))
        want_fp = sum(calls[i] for i in kept if i in ("s2", "s3"))
        o = line["overall"]
        assert o["n"] == len(kept) and (o["tp"], o["fp"]) == (want_tp, want_fp)
        no_tool = [i for i in kept if i in ("s2", "s3")]
        assert o["nar"] == pytest.approx(0.5 * (want_tp / 2 + (len(no_tool) - want_fp) / len(no_tool)))
        assert line["seconds"] == 1800 and line["detection"] == protocol and "nar" in line["intervals"]["metrics"]


# ------------------------------------------------------------------------------------------ the v1 data


def _eval(args: list[str], capsys) -> tuple[int, str, str]:
    from timealign.eval.runner import main

    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def _v1_args(v1, tmp_path, *extra: str) -> list[str]:
    return ["recipe=tiny", "data.source=v1", f"data.path={v1}", f"output_dir={tmp_path / 'run'}", *extra]


def _hand_decisions(v1) -> dict[tuple[str, int], tuple[str, bool]]:
    """(id, elapse level) -> (label from the file name, the rule's decision at 1800 s), read straight from the
    release's files with datetime: the reply time is the question's time of that level, the last tool result the
    latest tool message before it."""
    out = {}
    for path in sorted(v1.glob("*.json")):
        m = re.fullmatch(r"prefer(Tool|NoTool)_elapse_(\d)\.json", path.name)
        label, level = ("prefer_tool" if m.group(1) == "Tool" else "prefer_no_tool"), int(m.group(2))
        for record in json.loads(path.read_text()):
            history = record["history"]
            reply = datetime.fromisoformat(history[-1]["time"][level].replace("Z", "+00:00"))
            tools = [datetime.fromisoformat(x["time"].replace("Z", "+00:00")) for x in history if x["role"] == "tool"]
            assert (record["id"], level) not in out, f"{record['id']} twice at level {level}"
            out[record["id"], level] = (label, not tools or (reply - tools[-1]).total_seconds() > 1800)
    return out


def test_rule_nar_on_the_v1_test_split_by_hand(tictoc_v1_dir, tmp_path, capsys):
    """`timealign eval ... eval.backend=clock` on the whole v1 test split prints NAR with its interval; every
    decision, the confusion counts, NAR and the per-level counts match a computation from the release's files."""
    code, out, err = _eval(_v1_args(tictoc_v1_dir, tmp_path, "eval.backend=clock"), capsys)
    assert code == 0, err
    report = json.loads((tmp_path / "run" / "eval-clock-1800s" / "tictoc.json").read_text())
    nar, (low, high) = report["overall"]["nar"], report["intervals"]["metrics"]["nar"]
    assert f"NAR {nar:.3f} (95% interval [{low:.3f}, {high:.3f}]) on {report['overall']['n']} samples" in out
    hand = _hand_decisions(tictoc_v1_dir)
    samples = report["samples"]
    assert report["data"]["split"] == "test" and len(samples) == report["overall"]["n"] > 0
    for s in samples:
        assert (s["label"], s["tool_call"]) == hand[s["id"], s["elapse_level"]], s["id"]
    counts = {"tp": 0, "fn": 0, "tn": 0, "fp": 0}
    levels: dict[int, dict[str, int]] = {}
    for s in samples:
        label, call = hand[s["id"], s["elapse_level"]]
        key = ("tp" if call else "fn") if label == "prefer_tool" else ("fp" if call else "tn")
        counts[key] += 1
        levels.setdefault(s["elapse_level"], dict.fromkeys(counts, 0))[key] += 1
    assert {k: report["overall"][k] for k in counts} == counts
    want = 0.5 * (counts["tp"] / (counts["tp"] + counts["fn"]) + counts["tn"] / (counts["tn"] + counts["fp"]))
    assert nar == pytest.approx(want, abs=1e-12) and low <= nar <= high
    for level, name in enumerate(("small", "medium", "large")):
        got = report["by_elapse_level"][name]
        assert {k: got[k] for k in counts} == levels[level]
    assert report["backend"]["name"] == "clock" and report["settings"]["clock_seconds"] == 1800
    assert report["generation"]["cache_file"] is None and report["generation"]["generated"] == len(samples)
    md = (tmp_path / "run" / "eval-clock-1800s" / "report.md").read_text()
    assert "decided by (no model) | the elapsed-time rule" in md
    # Beside it, the volatility-aware reference (tests/test_volatility_rule.py): fit on the 694 train samples,
    # about 0.95 on these (the 0.952-0.968 of train-optimal thresholds), high's threshold between the
    # train split's high prefer-noTool gaps (<= 10 s) and its high prefer-Tool ones (>= 65 s).
    reference = report["volatility_rule"]
    assert reference["fit_on"]["split"] == "train" and reference["fit_on"]["rows"] == 694
    assert 10 <= reference["thresholds"]["high"] < 65 and set(reference["thresholds"]) == {"high", "medium", "low"}
    ref_nar, (ref_low, ref_high) = reference["overall"]["nar"], reference["intervals"]["metrics"]["nar"]
    assert 0.94 <= ref_nar <= 0.97 and ref_low <= ref_nar <= ref_high and reference["overall"]["n"] == len(samples)
    assert reference["overall"]["attempt_rate_prefer_tool"] is not None and reference["by_elapse_level"]
    assert f"the volatility-aware reference (thresholds per class): NAR {ref_nar:.3f}" in out
    assert f"| NAR of the volatility-aware reference on these {len(samples)} samples (one threshold per" in md
    assert "reads the registry's sensitivity class, which a model must infer from the scenario) | " in md


def test_model_report_carries_the_rule_and_compare_sets_them_side_by_side(
    tictoc_v1_dir, tiny_model_dir, tmp_path, capsys
):
    from timealign.eval.compare import main as compare

    common = ("eval.max_samples=6", "eval.bootstrap=200")
    code, out, err = _eval(
        _v1_args(
            tictoc_v1_dir,
            tmp_path,
            *common,
            f"checkpoint={tiny_model_dir}",
            "eval.max_new_tokens=6",
            f"out={tmp_path / 'model'}",
        ),
        capsys,
    )
    assert code == 0, err
    model = json.loads((tmp_path / "model" / "tictoc.json").read_text())
    code, _, err = _eval(_v1_args(tictoc_v1_dir, tmp_path, *common, "eval.backend=clock"), capsys)
    assert code == 0, err
    clock_dir = tmp_path / "run" / "eval-clock-1800s"
    clock = json.loads((clock_dir / "tictoc.json").read_text())
    # The model's report: the rule on the same (all 6, none failed) samples, the same numbers as the clock run's.
    rule = model["clock_rule"]
    assert model["overall"]["n"] == clock["overall"]["n"] == 6 and not model["errors"]
    assert [(s["id"], s["elapse_level"]) for s in model["samples"]] == [
        (s["id"], s["elapse_level"]) for s in clock["samples"]
    ]
    assert rule["overall"] == clock["overall"] and rule["by_elapse_level"] == clock["by_elapse_level"]
    assert rule["intervals"]["metrics"] == clock["intervals"]["metrics"]  # same units, seed and resamples
    assert f"the elapsed-time rule (1800 s) on the same samples: NAR {clock['overall']['nar']:.3f}" in out
    md = (tmp_path / "model" / "report.md").read_text()
    assert "| NAR of the elapsed-time rule on these 6 samples (a tool call when the last tool result is older" in md
    # and the volatility-aware reference, fit on the train split, never on these samples: as in the clock run's
    reference = model["volatility_rule"]
    assert reference["thresholds"] == clock["volatility_rule"]["thresholds"] and reference["fit_on"]["rows"] == 694
    assert reference["overall"] == clock["volatility_rule"]["overall"]
    assert reference["by_sensitivity"] == clock["volatility_rule"]["by_sensitivity"]
    assert "| NAR of the volatility-aware reference on these 6 samples (one threshold per sensitivity class" in md
    # compare: the rule beside the model, paired over the same samples.
    assert compare([f"before={clock_dir}", f"after={tmp_path / 'model'}", "resamples=200"]) == 0
    printed = capsys.readouterr().out
    assert f"clock-1800s -> {tiny_model_dir}" in printed and "DIFFERENT DATA" not in printed
    assert "paired bootstrap: 200 resamples of the 6 held-out pairs" in printed
    assert f"| NAR | {clock['overall']['nar']:.3f} [" in printed


@pytest.mark.parametrize(
    "extra, names",
    [
        (["suites=tictoc,timepuzzles"], "suite timepuzzles has no such rule"),
        (["recipe=tiny-timer"], "suite timelychat has no such rule"),
        (["checkpoint=tiny"], "checkpoint=tiny names one: leave checkpoint= out"),
        (["timestamps=false"], "leave timestamps= and prompt_mode= out"),
        (["prompt_mode=reminder"], "leave timestamps= and prompt_mode= out"),
        (["eval.clock_seconds=-5"], "eval.clock_seconds=-5.0 must be >= 0"),
    ],
)
def test_refusals_are_one_line(extra, names, tmp_path, capsys):
    args = ["recipe=tiny", "eval.backend=clock", f"output_dir={tmp_path}", *extra]
    args = [a for a in args if not (a == "recipe=tiny" and any(e.startswith("recipe=") for e in extra))]
    code, _, err = _eval(args, capsys)
    assert code == 2 and err.startswith("error: ") and names in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # refused before anything was prepared or written


def test_evaluate_never_scores_the_rule_in_place_of_a_model(tmp_path):
    """An experiment calling evaluate() with a checkpoint under a recipe saying eval.backend=clock is refused."""
    from timealign.config import RecipeError, load_recipe
    from timealign.eval.runner import evaluate

    recipe = load_recipe("tiny", {"eval.backend": "clock"})
    for checkpoint, suites in (("outputs/trained", ["tictoc"]), ("clock-1800s", ["tictoc", "tcp"])):
        with pytest.raises(RecipeError, match="eval.backend=clock scores the elapsed-time rule on tictoc, not"):
            evaluate(recipe, checkpoint, suites, tmp_path / "out")
    assert not (tmp_path / "out").exists()
