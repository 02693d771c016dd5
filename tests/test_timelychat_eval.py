"""The TimelyChat turn-level suite: timing metrics (P/R/F1/FPR with delayed as the positive class, RMSLE) and the
unparsed-interval policies on hand-counted examples, BLEU-2 and ROUGE-L against independent hand computations, the
judge prompt and score parser, the suite end to end with a scripted backend (exact metrics, failures, cache), and on
a tiny TIMER checkpoint trained in the test (synthetic dialogs and the real TimelyChat sample)."""

import copy
import math

import pytest
from helpers import DIALOGS, ScriptedBackend, scripted

from timealign.data.timelychat import TimerDialog, load_timelychat
from timealign.render.checkpoint import (
    CHECKPOINT_RECIPE,
    TimerCheckpointError,
    timer_renderer_for_checkpoint,
    trained_timer_section,
)
from timealign.render.timer import TIMER_UTT, TimerTurn, add_timer_tokens
from timealign.suites.registry import EvalContext, get_suite
from timealign.suites.timelychat.judge import (
    JUDGE_METRICS,
    judge_messages,
    judge_responses,
    parse_judge_score,
)
from timealign.suites.timelychat.metrics import bleu2, rmsle, rouge_l, timing_metrics
from timealign.suites.timelychat.postprocess import clean_reply
from timealign.suites.timelychat.report import markdown_summary
from timealign.suites.timelychat.suite import SUITE, run_timelychat_suite
from timealign.suites.timelychat.turn_level import evaluate_timelychat, timer_renderer_for_backend, timing_cases

# ------------------------------------------------------------------------------------------------- timing metrics

# 3 delayed + 2 instant gold intervals (minutes).
GOLD = [30.0, 120.0, 45.0, 0.0, 0.0]


def test_classification_worked_example():
    # 30->20 TP, 120->0 FN, 45->60 TP, 0->10 FP, 0->0 TN
    m = timing_metrics(GOLD, [20.0, 0.0, 60.0, 10.0, 0.0])
    assert (m["tp"], m["fn"], m["fp"], m["tn"]) == (2, 1, 1, 1)
    assert (m["delayed_gold"], m["instant_gold"], m["unparsed"]) == (3, 2, 0)
    assert m["precision"] == pytest.approx(2 / 3)
    assert m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 / 3)
    assert m["fpr"] == pytest.approx(1 / 2)

    # another: 30->5 TP, 120->90 TP, 45->1 TP, 0->0 TN, 0->2 FP
    m = timing_metrics(GOLD, [5.0, 90.0, 1.0, 0.0, 2.0])
    assert (m["tp"], m["fn"], m["fp"], m["tn"]) == (3, 0, 1, 1)
    p, r = 3 / 4, 1.0
    assert m["precision"] == pytest.approx(p)
    assert m["recall"] == pytest.approx(r)
    assert m["f1"] == pytest.approx(2 * p * r / (p + r))
    assert m["fpr"] == pytest.approx(1 / 2)


def test_undefined_metrics_are_none_and_counts_stay():
    m = timing_metrics([30.0, 60.0], [0.0, 0.0])  # no instant gold, nothing predicted delayed
    assert (m["tp"], m["fn"], m["fp"], m["tn"]) == (0, 2, 0, 0)
    assert m["precision"] is None and m["fpr"] is None
    assert m["recall"] == 0.0 and m["f1"] == 0.0
    m = timing_metrics([0.0, 0.0], [0.0, 0.0])
    assert m["recall"] is None and m["precision"] is None and m["f1"] is None and m["fpr"] == 0.0


def test_instant_threshold():
    m = timing_metrics([3.0, 30.0], [4.0, 6.0], instant_max_minutes=5.0)
    assert (m["tp"], m["fn"], m["fp"], m["tn"]) == (1, 0, 0, 1)
    m = timing_metrics([3.0, 30.0], [4.0, 6.0])  # default: instant = exactly 0 minutes
    assert (m["tp"], m["fn"], m["fp"], m["tn"]) == (2, 0, 0, 0)


def hand_rmsle(pairs):
    return math.sqrt(sum((math.log(p + 1) - math.log(g + 1)) ** 2 for g, p in pairs) / len(pairs))


def test_rmsle_by_hand():
    e = math.e
    assert rmsle([0.0], [e - 1]) == pytest.approx(1.0)
    assert rmsle([0.0, 0.0], [e - 1, e**2 - 1]) == pytest.approx(math.sqrt((1 + 4) / 2))
    assert rmsle([20.0], [20.0]) == 0.0
    pred = [20.0, 0.0, 60.0, 10.0, 0.0]
    want = math.sqrt(
        (
            (math.log(21) - math.log(31)) ** 2
            + (math.log(1) - math.log(121)) ** 2
            + (math.log(61) - math.log(46)) ** 2
            + (math.log(11) - math.log(1)) ** 2
            + 0.0
        )
        / 5
    )
    m = timing_metrics(GOLD, pred, targets=[True, True, False, False, False])
    assert m["rmsle"] == pytest.approx(want)
    assert m["rmsle_target"] == pytest.approx(hand_rmsle([(30, 20), (120, 0)]))
    assert m["rmsle_cases"] == 5 and m["rmsle_target_cases"] == 2
    assert rmsle([], []) is None
    with pytest.raises(ValueError):
        rmsle([1.0], [-1.0])


@pytest.mark.parametrize(
    "policy,counts,p,r,fpr,rmsle_pairs",
    [
        # unparsed -> 0 minutes: 120->0 FN, 0->0 TN
        ("instant", (2, 1, 0, 2), 1.0, 2 / 3, 0.0, [(30, 20), (120, 0), (45, 60), (0, 0), (0, 0)]),
        # unparsed -> misclassified: 120 (delayed) FN, 0 (instant) FP; not in RMSLE
        ("wrong", (2, 1, 1, 1), 2 / 3, 2 / 3, 1 / 2, [(30, 20), (45, 60), (0, 0)]),
        # unparsed -> left out
        ("exclude", (2, 0, 0, 1), 1.0, 1.0, 0.0, [(30, 20), (45, 60), (0, 0)]),
    ],
)
def test_unparsed_policies(policy, counts, p, r, fpr, rmsle_pairs):
    m = timing_metrics(GOLD, [20.0, None, 60.0, None, 0.0], unparsed=policy)
    assert (m["tp"], m["fn"], m["fp"], m["tn"]) == counts
    assert m["unparsed"] == 2 and m["unparsed_rate"] == pytest.approx(0.4) and m["cases"] == 5
    assert m["precision"] == pytest.approx(p) and m["recall"] == pytest.approx(r) and m["fpr"] == pytest.approx(fpr)
    assert m["f1"] == pytest.approx(2 * p * r / (p + r))
    assert m["rmsle"] == pytest.approx(hand_rmsle(rmsle_pairs)) and m["rmsle_cases"] == len(rmsle_pairs)
    with pytest.raises(ValueError, match="unparsed"):
        timing_metrics(GOLD, [0.0] * 5, unparsed="zero")


def test_target_turn_metrics_beside_all_turn_metrics():
    # targets: 30->20 TP, 0->10 FP (an instant target), 0->0 TN; context: 120->0 FN, 45->60 TP
    pred = [20.0, 0.0, 60.0, 10.0, 0.0]
    m = timing_metrics(GOLD, pred, targets=[True, False, False, True, True])
    assert (m["tp"], m["fn"], m["fp"], m["tn"]) == (2, 1, 1, 1)  # all turns, as before
    assert (m["target_tp"], m["target_fn"], m["target_fp"], m["target_tn"]) == (1, 0, 1, 1)
    assert (m["target_cases"], m["target_delayed_gold"], m["target_instant_gold"]) == (3, 1, 2)
    assert m["target_precision"] == pytest.approx(1 / 2) and m["target_recall"] == pytest.approx(1.0)
    assert m["target_f1"] == pytest.approx(2 / 3) and m["target_fpr"] == pytest.approx(1 / 2)
    assert m["rmsle_target"] == pytest.approx(hand_rmsle([(30, 20), (0, 10), (0, 0)]))
    # an unparsed target follows the same policy as every case
    m = timing_metrics(
        GOLD, [None, 0.0, 60.0, 10.0, 0.0], targets=[True, False, False, False, False], unparsed="wrong"
    )
    assert m["target_unparsed"] == 1 and m["target_fn"] == 1 and m["rmsle_target"] is None
    m = timing_metrics(GOLD, pred)  # no targets flagged: target metrics undefined, counts zero
    assert m["target_cases"] == 0 and m["target_f1"] is None and m["rmsle_target"] is None


# ------------------------------------------------------------------------------------------------ response metrics


def test_bleu2_by_hand():
    # unigram matches 5/6 (the, cat, on, the, mat), bigram 3/5 (the cat, on the, the mat); equal lengths: BP = 1
    assert bleu2(["the cat sat on the mat"], ["the cat is on the mat"]) == pytest.approx(
        100 * math.sqrt(5 / 6 * 3 / 5)
    )
    # corpus level: counts add up over sentences; hyp 9 tokens vs ref 10: BP = exp(1 - 10/9)
    hyps = ["the cat sat on the mat", "a dog runs"]
    refs = ["the cat is on the mat", "a dog runs fast"]
    want = 100 * math.exp(1 - 10 / 9) * math.sqrt((5 + 3) / (6 + 3) * (3 + 2) / (5 + 2))
    assert bleu2(hyps, refs) == pytest.approx(want)
    assert bleu2(["x y"], ["a b"]) == 0.0  # no smoothing: no bigram match -> 0
    assert bleu2([], []) is None


def lcs(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


def hand_rouge_l(hyp, ref):
    import re

    tok = lambda s: re.sub(r"[^a-z0-9]+", " ", s.lower()).split()  # noqa: E731 - rouge_score's default tokenizer
    h, r = tok(hyp), tok(ref)
    n = lcs(h, r)
    if n == 0:
        return 0.0
    p, rec = n / len(h), n / len(r)
    return 100 * 2 * p * rec / (p + rec)


def test_rouge_l_against_hand_lcs():
    hyps = ["It was easier than I expected!", "the cat sat on the mat", "Okay."]
    refs = ["It was not much harder than I expected.", "The cat is on the mat", "I feel much better now"]
    # LCS 5 of 6 hypothesis / 8 reference tokens: F = 2 (5/6)(5/8) / (5/6 + 5/8) = 5/7
    assert hand_rouge_l(hyps[0], refs[0]) == pytest.approx(100 * 5 / 7)
    assert hand_rouge_l(hyps[1], refs[1]) == pytest.approx(100 * 5 / 6)
    mean, per = rouge_l(hyps, refs)
    assert per == pytest.approx([100 * 5 / 7, 100 * 5 / 6, 0.0])
    assert mean == pytest.approx((100 * 5 / 7 + 100 * 5 / 6) / 3)


# -------------------------------------------------------------------------------------------------------- judge


def test_judge_prompt_has_the_papers_criteria_and_the_dialog():
    context = [TimerTurn("A", "Gonna take a shower now."), TimerTurn("B", "Wash all the fatigue off!")]
    msgs = judge_messages("time_specificity", context, 20.0, "A", "I feel so refreshed now!")
    assert [m["role"] for m in msgs] == ["system", "user"]
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert system.startswith(
        "You will be given a conversation between two individuals via messaging, along with "
        "the elapsed time since the last utterance."
    )
    assert (
        "Evaluation Criteria:\nTime-specificity (1-5): the extent to which the response ONLY makes sense when the "
        "specified time has passed" in system
    )
    assert "4. Rate on a scale from 1 to 5" in system
    assert "Evaluation Steps:\n1. Read the provided conversation" in system
    assert "A: Gonna take a shower now.\nB: Wash all the fatigue off!" in user
    assert "20 minutes" in user and "A: I feel so refreshed now!" in user and '"score"' in user
    nat = judge_messages("naturalness", [("A", "hi"), ("B", "hey")], "1 hour 30 minutes", "A", "back")
    assert (
        "Naturalness (1-5): the extent to which the response reads naturally given the dialog context."
        in nat[0]["content"]
    )
    assert "1 hour 30 minutes" in nat[1]["content"] and "A: hi\nB: hey" in nat[1]["content"]
    with pytest.raises(ValueError, match="naturalness"):
        judge_messages("coherence", context, 0.0, "A", "x")


@pytest.mark.parametrize(
    "reply,score",
    [
        ('{"score": 4, "explanation": "Reads naturally."}', 4),
        ('```json\n{"score": "2", "explanation": "Generic."}\n```', 2),
        ('{"explanation": "fine", "score": 3.5}', 3.5),
        ("Score: 3", 3),
        ("**Naturalness:** 5", 5),
        ("Time-specificity (1-5): 4", 4),
        ("I'd give it 4/5.", 4),
        ("4 out of 5", 4),
        ("5", 5),
        (" 2. ", 2),
        ("Score: 7", None),
        ('{"score": 0}', None),
        ("Score: 2 ... final score: 4", None),  # two different scores: ambiguous
        ("The response is natural.", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_judge_score(reply, score):
    assert parse_judge_score(reply) == score


class FakeJudge:
    def __init__(self, replies):
        self.replies, self.seen = list(replies), []

    def chat(self, messages):
        self.seen.append(messages)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def test_judge_responses_counts_unreadable_and_failed():
    items = [{"context": [("A", "hi")], "elapsed": 30.0, "speaker": "B", "response": f"r{i}"} for i in range(3)]
    judge = FakeJudge(
        [
            '{"score": 4, "explanation": "ok"}',
            "no idea",
            RuntimeError("down"),  # naturalness
            "Score: 2",
            "Score: 3",
            '{"score": 5}',
        ]
    )  # time-specificity
    out = judge_responses(judge, items)
    assert out["scores"]["naturalness"] == [4, None, None]
    assert out["mean"]["naturalness"] == 4 and out["unparsed"]["naturalness"] == 1
    assert out["failed"]["naturalness"] == 1 and "down" in out["replies"]["naturalness"][2]
    assert out["scores"]["time_specificity"] == [2, 3, 5] and out["mean"]["time_specificity"] == pytest.approx(10 / 3)
    assert len(judge.seen) == 6 and "Naturalness (1-5)" in judge.seen[0][0]["content"]
    assert set(JUDGE_METRICS) == {"naturalness", "time_specificity"}


# ------------------------------------------------------------------------------------- suite, scripted backend


def test_timing_cases_every_turn_or_target():
    cases = timing_cases(DIALOGS)
    assert [(c.dialog, c.turn, c.gold_minutes, c.is_target) for c in cases] == [
        (0, 1, 0.0, False),
        (0, 2, 20.0, True),
        (1, 1, 0.0, False),
        (1, 2, 0.0, False),
        (1, 3, 120.0, True),
    ]
    assert [t.utterance for t in cases[1].context] == ["Gonna take a shower.", "Wash the fatigue off!"]
    assert cases[3].speaker == "A" and cases[4].speaker == "B"
    assert [(c.dialog, c.turn) for c in timing_cases(DIALOGS, "target")] == [(0, 2), (1, 3)]
    with pytest.raises(ValueError):
        timing_cases(DIALOGS, "first")


@pytest.fixture(scope="module")
def timer_tokenizer(tiny_tokenizer):
    tok = copy.deepcopy(tiny_tokenizer)
    add_timer_tokens(tok)
    return tok


def test_suite_with_a_scripted_backend_gives_the_hand_counted_metrics(timer_tokenizer, tmp_path):
    backend = scripted(timer_tokenizer)
    judge = FakeJudge(['{"score": 5}', '{"score": 3}', "Score: 4", "Score: 1"])
    report = evaluate_timelychat(backend, DIALOGS, cache_dir=tmp_path / "gen", judge=judge)
    o = report["overall"]
    # TN, TP | FP, TN (unparsed -> 0 minutes), FN
    assert (report["timing"]["tp"], report["timing"]["fp"], report["timing"]["tn"], report["timing"]["fn"]) == (
        1,
        1,
        2,
        1,
    )
    assert o["precision"] == pytest.approx(1 / 2) and o["recall"] == pytest.approx(1 / 2)
    assert o["f1"] == pytest.approx(1 / 2) and o["fpr"] == pytest.approx(1 / 3)
    assert o["timing_unparsed"] == 1 and o["timing_failed"] == 0 and o["timing_cases"] == 5
    assert o["rmsle"] == pytest.approx(hand_rmsle([(0, 0), (20, 30), (0, 60), (0, 0), (120, 0)]))
    assert o["rmsle_target"] == pytest.approx(hand_rmsle([(20, 30), (120, 0)]))
    refs = [d.utterances[-1] for d in DIALOGS]
    hyps = ["I feel so refreshed now!", "Still studying."]
    assert [s["response"] for s in report["samples"]] == hyps
    assert o["bleu2"] == pytest.approx(bleu2(hyps, refs))
    assert o["rouge_l"] == pytest.approx((100.0 + hand_rouge_l(hyps[1], refs[1])) / 2)
    assert o["bertscore"] is None and any("BERTScore skipped" in n for n in report["notes"])
    assert o["naturalness"] == pytest.approx(4.0) and o["time_specificity"] == pytest.approx(2.5)
    assert "I feel so refreshed now!" in judge.seen[0][1]["content"] and "20 minutes" in judge.seen[0][1]["content"]
    s1 = report["samples"][1]
    assert [t["interval_text"] for t in s1["timing"]] == ["1 hour", "soonish", "0 minutes"]
    assert [t["parsed"] for t in s1["timing"]] == [True, False, True]
    assert s1["response_conditioned_on"] == 120.0 and s1["naturalness"] == 3
    assert any("1 of 5 predicted intervals could not be parsed" in n for n in report["notes"])
    assert report["settings"]["unparsed"] == "instant" and report["settings"]["special_tokens"] is True

    # a rerun reads every generation from the cache
    again = scripted(timer_tokenizer)
    report2 = evaluate_timelychat(again, DIALOGS, cache_dir=tmp_path / "gen")
    assert again.calls == 0 and report2["timing"] == report["timing"]
    assert any("no LLM judge" in n for n in report2["notes"]) and report2["overall"]["naturalness"] is None


def test_a_failed_generation_is_left_out_not_fatal(timer_tokenizer):
    backend = scripted(timer_tokenizer, fail_target_interval_of=1)  # dialog 1's target interval (the FN) fails
    report = evaluate_timelychat(backend, DIALOGS, unparsed="exclude")
    t = report["timing"]
    assert t["failed"] == 1 and t["cases"] == 4 and t["unparsed"] == 1
    assert (t["tp"], t["fp"], t["tn"], t["fn"]) == (1, 1, 1, 0)  # the unparsed case is excluded
    assert "backend down" in report["samples"][1]["timing"][2]["error"]
    assert report["overall"]["responses"] == 2


def test_report_leads_with_the_target_turn_metrics(timer_tokenizer):
    report = evaluate_timelychat(scripted(timer_tokenizer), DIALOGS)
    o, md = report["overall"], markdown_summary(report)
    # targets: dialog 0 20 -> 30 (TP), dialog 1 120 -> 0 (FN); no instant target, so no target FPR
    assert (o["target_cases"], o["target_delayed_gold"], o["target_instant_gold"]) == (2, 2, 0)
    assert o["target_precision"] == 1.0 and o["target_recall"] == 0.5
    assert o["target_f1"] == pytest.approx(2 / 3) and o["target_fpr"] is None
    assert o["rmsle_target"] == pytest.approx(hand_rmsle([(20, 30), (120, 0)]))
    assert (o["all_turns_f1"], o["all_turns_fpr"], o["all_turns_rmsle"]) == (o["f1"], o["fpr"], o["rmsle"])
    assert any("target-turn FPR is undefined" in n for n in report["notes"])
    target_at, all_at = md.index("target turn"), md.index("all turns")
    assert md.index("comparable with TimelyChat Table 2") < all_at and target_at < all_at
    assert "| 2 | 2 / 0 | 0 | 1.000 | 0.500 | 0.667 | n/a |" in md[:all_at]
    assert "| 5 | 2 / 3 | 1 | 0.500 | 0.500 | 0.500 | 0.333 |" in md[all_at:]


PROSE_INTERVALS = {  # what an instruction-tuned model might write at <TIME>
    (0, 1): "0 minutes" + TIMER_UTT,
    (0, 2): "**30 minutes**" + TIMER_UTT,  # TN, TP (markdown)
    (1, 1): "The estimated time interval is: 1 hour" + TIMER_UTT,  # FP (prose)
    (1, 2): "I'm not sure." + TIMER_UTT,  # unreadable either way (-> instant: TN)
    (1, 3): "I'd say about 2 hours later." + TIMER_UTT,  # TP (prose)
}


def test_intervals_in_prose_are_extracted_unless_strict(timer_tokenizer):
    report = evaluate_timelychat(scripted(timer_tokenizer, intervals=PROSE_INTERVALS), DIALOGS)
    t = report["timing"]
    assert t["extracted"] == 3 and t["target_extracted"] == 2 and t["unparsed"] == 1
    assert (t["tp"], t["fp"], t["tn"], t["fn"]) == (2, 1, 2, 0)
    assert t["rmsle_target"] == pytest.approx(hand_rmsle([(20, 30), (120, 120)]))
    cases = [c for s in report["samples"] for c in s["timing"]]
    assert [c["extracted"] for c in cases] == [False, True, True, False, True]
    assert [c["pred_minutes"] for c in cases] == [0.0, 30.0, 60.0, None, 120.0]
    assert report["overall"]["timing_extracted"] == 3 and report["settings"]["interval_reading"] == "extract"

    strict = evaluate_timelychat(
        scripted(timer_tokenizer, intervals=PROSE_INTERVALS), DIALOGS, interval_reading="strict"
    )
    assert strict["timing"]["extracted"] == 0 and strict["timing"]["unparsed"] == 4
    with pytest.raises(ValueError, match="interval_reading"):
        evaluate_timelychat(scripted(timer_tokenizer), DIALOGS, interval_reading="loose")
    # paper: the TimelyChat authors' convert_to_minutes (render/intervals.py's paper_interval_minutes, checked against
    # their function in test_timelychat_paper_reading.py): every text gets minutes, an unreadable one 0
    paper = evaluate_timelychat(
        scripted(timer_tokenizer, intervals=PROSE_INTERVALS), DIALOGS, interval_reading="paper"
    )
    cases = [c for s in paper["samples"] for c in s["timing"]]
    assert [c["pred_minutes"] for c in cases] == [0.0, 30.0, 60.0, 0.0, 120.0]
    assert paper["timing"]["unparsed"] == 0 and paper["settings"]["interval_reading"] == "paper"


@pytest.mark.parametrize(
    "raw,clean",
    [
        ("B: (20 minutes later) I'm back! How was the game?\nA: We won!", "I'm back! How was the game?"),
        ("A: Sure, see you soon. B: Bye!", "Sure, see you soon."),
        ("[30 minutes later] (smiling) Done with the laundry -- finally.", "Done with the laundry"),
        ("Just got home ... what a day", "Just got home"),
        ("All done! <|eot_id|>", "All done!"),
        ("Finished   the  report. ## Next turn", "Finished the report."),
        ("Plain reply.", "Plain reply."),
        ("(20 minutes later)", ""),
    ],
)
def test_clean_reply_follows_the_authors_postprocessing(raw, clean):
    assert clean_reply(raw) == clean


def test_postprocess_option_cleans_replies_before_scoring(timer_tokenizer):
    replies = [
        "B: (20 minutes later) I feel so refreshed now!\nA: Great." + timer_tokenizer.eos_token,
        "Still studying. B: really" + "<SPK>B",
    ]
    hyps = ["I feel so refreshed now!", "Still studying."]
    refs = [d.utterances[-1] for d in DIALOGS]
    raw = evaluate_timelychat(scripted(timer_tokenizer, replies=replies), DIALOGS)
    assert [s["response"] for s in raw["samples"]] == [
        r.split("<")[0].split(timer_tokenizer.eos_token)[0] for r in replies
    ]
    assert "response_raw" not in raw["samples"][0] and raw["settings"]["postprocess"] is False
    report = evaluate_timelychat(scripted(timer_tokenizer, replies=replies), DIALOGS, postprocess=True)
    assert [s["response"] for s in report["samples"]] == hyps
    assert report["samples"][0]["response_raw"].startswith("B: (20 minutes later)")
    assert report["overall"]["bleu2"] == pytest.approx(bleu2(hyps, refs))
    assert report["overall"]["bleu2"] > raw["overall"]["bleu2"]
    assert any("2 of 2 changed" in n for n in report["notes"])


def test_suite_options_registration_and_checks(timer_tokenizer, tiny_tokenizer, tmp_path):
    from timealign.config import load_recipe

    assert get_suite("timelychat").run is run_timelychat_suite
    recipe = load_recipe("tiny-timer", task="sft")
    data = tmp_path / "eval.jsonl"
    import json

    data.write_text(
        "\n".join(
            json.dumps(
                {
                    "id": d.id,
                    "speaker_list": d.speakers[:-1],
                    "context": d.utterances[:-1],
                    "target_speaker": d.target_speaker,
                    "time_elapsed": d.target_minutes,
                    "timely_response": d.utterances[-1],
                }
            )
            for d in DIALOGS
        )
    )
    ctx = EvalContext(
        recipe=recipe,
        out_dir=tmp_path / "out",
        options=SUITE.parse_options(
            {
                "data": str(data),
                "timing_turns": "target",
                "unparsed": "wrong",
                "bertscore_model": "roberta-large",
                "interval_reading": "strict",
                "postprocess": "true",
            }
        ),
    )
    report = run_timelychat_suite(scripted(timer_tokenizer), ctx)
    t = report["timing"]
    assert t["cases"] == 2 and (t["tp"], t["fn"]) == (1, 1) and report["overall"]["fpr"] is None
    assert any("FPR is undefined" in n for n in report["notes"])
    assert "| 2 | 2 / 0 | 0 | 1.000 | 0.500 | 0.667 | n/a |" in report["markdown"]
    assert (tmp_path / "out" / "generations" / "timelychat-interval.jsonl").is_file()
    assert report["settings"]["interval_reading"] == "strict" and report["settings"]["postprocess"] is True
    try:
        import bert_score  # noqa: F401
    except ImportError:
        assert any(n.startswith("BERTScore skipped") and "bert_score" in n for n in report["notes"])

    with pytest.raises(ValueError, match="unknown key 'timelychat.nn'"):  # checked where the options are read
        SUITE.parse_options({"nn": "3"})
    # a checkpoint that was not TIMER-trained: no markers in its tokenizer
    plain = ScriptedBackend(tiny_tokenizer, {})
    with pytest.raises(TimerCheckpointError, match="train/sft.py"):
        run_timelychat_suite(plain, EvalContext(recipe, tmp_path, options=SUITE.parse_options({"n": "2"})))
    # ...unless the plain (no-special-tokens) format is asked for
    assert timer_renderer_for_backend(plain, special_tokens=False).special_tokens is False


# ------------------------------------------------------------------------------ suite on a tiny TIMER checkpoint


@pytest.fixture(scope="module")
def timer_checkpoint(tiny_model_dir, tmp_path_factory):
    """A TIMER checkpoint from two optimizer steps of `timealign.train.sft` on 8 synthetic dialogs (seconds)."""
    from timealign.config import load_recipe
    from timealign.train import sft

    tmp = tmp_path_factory.mktemp("timer-ckpt")
    recipe = load_recipe(
        "tiny-timer",
        {
            "model.name_or_path": str(tiny_model_dir),
            "output_dir": str(tmp / "ckpt"),
            "data.prepared_dir": str(tmp / "data"),
            "timer.synthetic_dialogs": "8",
            "timer.synthetic_eval_dialogs": "2",
            "training.max_steps": "2",
            "training.per_device_train_batch_size": "4",
            "training.logging_steps": "1",
            "training.max_length": "256",
            "training.disable_tqdm": "true",
        },
        task="sft",
    )
    return recipe, sft.run(recipe)


@pytest.fixture(scope="module")
def hf_timer(timer_checkpoint):
    from timealign.backends.hf import HFBackend

    return HFBackend(str(timer_checkpoint[1]), dtype="float32", device="cpu", batch_size=32)


SMALL = {"interval_max_new_tokens": "6", "response_max_new_tokens": "8"}


def check_report(report, dialogs):
    o = report["overall"]
    assert o["dialogs"] == len(dialogs) == len(report["samples"]) == o["responses"]
    assert o["timing_cases"] == sum(len(d.speakers) - 1 for d in dialogs)
    assert o["timing_delayed_gold"] == len(dialogs)  # TimelyChat targets are delayed, context turns instant
    assert o["timing_instant_gold"] == o["timing_cases"] - len(dialogs)
    t = report["timing"]
    assert t["tp"] + t["fp"] + t["tn"] + t["fn"] == o["timing_cases"]  # unparsed=instant keeps every case
    for key in ("recall", "f1", "fpr"):
        assert 0.0 <= o[key] <= 1.0
    assert o["rmsle"] >= 0 and 0 <= o["bleu2"] <= 100 and 0 <= o["rouge_l"] <= 100
    for s in report["samples"]:
        assert not any(m in s["response"] for m in ("<SPK>", "<TIME>", "<UTT>"))
        assert s["response_conditioned_on"] == s["gold_minutes"]
        for case in s["timing"]:
            assert case["parsed"] == (case["pred_minutes"] is not None)
    assert "Response timing prediction" in report["markdown"] and "BLEU-2" in report["markdown"]


def test_suite_on_a_tiny_timer_checkpoint(timer_checkpoint, hf_timer, tmp_path):
    recipe, ckpt = timer_checkpoint
    assert timer_renderer_for_backend(hf_timer).special_tokens is True
    ctx = EvalContext(
        recipe=recipe,
        out_dir=tmp_path,
        options=SUITE.parse_options({"data": "synthetic", "n": "4", "seed": "3", **SMALL}),
    )
    report = get_suite("timelychat").run(hf_timer, ctx)
    from timealign.suites.timelychat.eval_data import load_eval_dialogs

    dialogs = load_eval_dialogs(None, 4, 3)
    assert [s["id"] for s in report["samples"]] == [d.id for d in dialogs]
    assert all(d.split == "heldout" for d in dialogs)
    check_report(report, dialogs)
    assert report["data"]["source"] == "synthetic heldout dialogs"
    assert report["data"]["settings"] == {"n": 4, "seed": 3}
    assert report["settings"]["data"] == report["data"]["label"]


def test_suite_scores_the_sft_recipes_own_held_out_split(timer_checkpoint, hf_timer, tmp_path):
    """No timelychat.data=: a TIMER recipe's data.eval_split of its prepared dialogs, as training and live evaluation
    read it (the recipe's data keys, not the suite's own synthetic set), named in the report."""
    from timealign.data.prepared import ensure_prepared
    from timealign.data.timer_prep import load_timer_prepared

    recipe, _ = timer_checkpoint
    ctx = EvalContext(recipe=recipe, out_dir=tmp_path, options=SUITE.parse_options(dict(SMALL)))
    report = get_suite("timelychat").run(hf_timer, ctx)
    held_out = load_timer_prepared(ensure_prepared(recipe, kind="dialogs"))["test"]
    assert [s["id"] for s in report["samples"]] == held_out["id"]
    assert (report["data"]["source"], report["data"]["split"], report["data"]["samples"]) == ("synthetic", "test", 2)
    check_report(report, [TimerDialog.from_row(r) for r in held_out.to_list()])


def test_suite_on_the_real_timelychat_sample(hf_timer, timer_checkpoint, timelychat_sample, tmp_path):
    recipe, _ = timer_checkpoint
    ctx = EvalContext(
        recipe=recipe, out_dir=tmp_path, options=SUITE.parse_options({"data": str(timelychat_sample), **SMALL})
    )
    report = run_timelychat_suite(hf_timer, ctx)
    dialogs = load_timelychat(timelychat_sample).dialogs
    assert len(dialogs) == 6 and isinstance(dialogs[0], TimerDialog)
    check_report(report, dialogs)
    assert report["samples"][0]["reference"] == "I feel much better now! You didn't go to bed?"
    assert report["samples"][0]["gold_interval"] == "20 minutes"


class ConstBackend:
    name = "const"

    def __init__(self, tokenizer, text):
        self.tokenizer, self.text = tokenizer, text

    def generate(self, prompts, *, max_new_tokens=64, desc=None, **_):
        return [self.text for _ in prompts]


def test_renderer_follows_the_checkpoint_recipe_and_utterance_first_is_flagged(tiny_tokenizer, tmp_path):
    (tmp_path / "timealign_recipe.yaml").write_text(
        "task: sft\ntimer:\n  special_tokens: false\n  order: utterance_first\n"
    )
    backend = ConstBackend(tiny_tokenizer, " 20 minutes\nB: hi")
    backend.checkpoint = str(tmp_path)
    renderer = timer_renderer_for_backend(backend)
    assert (renderer.special_tokens, renderer.order) == (False, "utterance_first")
    report = evaluate_timelychat(backend, DIALOGS)
    assert report["settings"]["response_conditioned_on_gold"] is False
    assert any("utterance_first" in n for n in report["notes"])
    assert all(s["response_conditioned_on"] is None for s in report["samples"])
    assert [c["pred_minutes"] for s in report["samples"] for c in s["timing"]] == [20.0] * 5
    assert report["timing"]["fp"] == 3 and report["timing"]["tp"] == 2
    # a DPO checkpoint's recipe (task dpo) says nothing about TIMER: markers are required
    (tmp_path / "timealign_recipe.yaml").write_text("task: dpo\ntimer:\n  special_tokens: false\n")
    with pytest.raises(TimerCheckpointError, match="lacks the TIMER markers"):
        timer_renderer_for_backend(backend)


def test_checkpoint_timer_settings_are_read_from_sft_recipes_only(tiny_tokenizer, timer_tokenizer, tmp_path):
    """The one reader of a checkpoint's TIMER settings (used by the suite and by `TimerInference.from_checkpoint`)."""
    assert trained_timer_section(tmp_path) is None  # no saved recipe: callers use the defaults
    assert timer_renderer_for_checkpoint(timer_tokenizer, tmp_path).order == "time_first"
    (tmp_path / CHECKPOINT_RECIPE).write_text("task: sft\ntimer:\n  order: utterance_first\n  retired_key: 1\n")
    section = trained_timer_section(tmp_path)
    assert (section.special_tokens, section.order) == (True, "utterance_first")
    assert timer_renderer_for_checkpoint(timer_tokenizer, tmp_path, order="time_first").order == "time_first"
    (tmp_path / CHECKPOINT_RECIPE).write_text("task: dpo\ntimer:\n  special_tokens: false\n")
    with pytest.raises(TimerCheckpointError, match="task: dpo"):
        trained_timer_section(tmp_path)
    with pytest.raises(TimerCheckpointError, match="lacks the TIMER markers"):  # even when asked for the plain format
        timer_renderer_for_checkpoint(tiny_tokenizer, tmp_path, special_tokens=False)
