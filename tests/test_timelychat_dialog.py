"""TimelyChat dialog-level evaluation (timealign.suites.timelychat.dialog): the partner and judge prompts, the
partner-reply and judge-score readers on realistic replies, the aggregation against hand computations, the
simulation loop with a scripted checkpoint (the protocol's turn count, delays and prompts), the suite option, and
the whole path end to end on a real vLLM OpenAI-compatible server (partner and judge) with a tiny TIMER checkpoint
as the agent. The end-to-end test needs vLLM (`make test-vllm`) and is skipped without it."""

from __future__ import annotations

import copy
import json

import pytest
from needs import require_vllm, shared_path
from vllm_server import vllm_server as serve_vllm

from timealign.data.timelychat import TimerDialog
from timealign.render.timer import TIMER_UTT, TimerRenderer, TimerTurn, add_timer_tokens
from timealign.suites.registry import EvalContext, get_suite
from timealign.suites.timelychat.dialog import (
    aggregate_dialogs,
    dialog_judge_messages,
    evaluate_dialog_level,
    parse_dialog_score,
)
from timealign.suites.timelychat.dialog_prompts import DIALOG_JUDGE_METRICS, SIMULATOR_PROMPT
from timealign.suites.timelychat.dialog_simulation import (
    AGENT,
    USER,
    DialogTurn,
    SimulatedDialog,
    agent_context,
    clean_partner_text,
    partner_messages,
    read_partner_reply,
    seed_dialog,
    simulate_dialogs,
)
from timealign.suites.timelychat.eval_data import load_eval_dialogs
from timealign.suites.timelychat.options import TimelyChatOptions
from timealign.suites.timelychat.suite import SUITE
from timealign.suites.timelychat.turn_level import timer_renderer_for_backend

# ----------------------------------------------------------------------------------------------- the prompts

TURNS = [
    DialogTurn(USER, "A", "I finally got home. What a day!"),
    DialogTurn(AGENT, "B", "Welcome back! Long day?", 0.0, AGENT),
    DialogTurn(USER, "A", "Yes. Imma take a shower.", 0.0, "partner"),
    DialogTurn(AGENT, "B", "Feeling better now?", 20.0, AGENT, predicted_minutes=20.75),
]


def test_partner_prompt_is_the_simulator_prompt_and_the_timed_conversation():
    system, user = partner_messages(TURNS)
    assert system == {"role": "system", "content": SIMULATOR_PROMPT}
    assert SIMULATOR_PROMPT.startswith(
        "You are a user simulator (user) engaging in an event-driven dialogue with a "
        "dialogue agent (agent).\nGiven the dialogue context, your task is to proceed"
    )
    assert SIMULATOR_PROMPT.endswith(
        'If the delay is "0 minutes", agent is assumed to respond immediately.\n'
        "2. user is assumed to respond to agent without any delay."
    )
    assert user == {
        "role": "user",
        "content": (
            "Conversation:\n"
            "user: (0 minutes later) I finally got home. What a day!\n"
            "agent: (0 minutes later) Welcome back! Long day?\n"
            "user: (0 minutes later) Yes. Imma take a shower.\n"
            "agent: (20 minutes later) Feeling better now?"
        ),
    }
    # the authors write whole minutes: 90 minutes, not "1 hour 30 minutes"
    late = [*TURNS[:3], DialogTurn(AGENT, "B", "Back.", 90.0, AGENT)]
    assert partner_messages(late)[1]["content"].endswith("agent: (90 minutes later) Back.")


def test_seed_roles_and_the_agents_history():
    d = TimerDialog("x", ["A", "B", "A"], ["hi", "hey", "back"], [0.0, 0.0, 30.0])
    sim = seed_dialog(d)  # target speaker A is the agent and also spoke first
    assert (sim.agent, sim.user) == ("A", "B")
    assert sim.turns == [DialogTurn(AGENT, "A", "hi", 0.0, "seed")]
    d2 = TimerDialog("y", ["A", "B"], ["hi", "back"], [0.0, 30.0])
    assert seed_dialog(d2).turns[0].role == USER and seed_dialog(d2).agent == "B"
    assert agent_context(TURNS, "zero")[-1] == TimerTurn("B", "Feeling better now?", 0.0)
    assert [t.minutes for t in agent_context(TURNS, "predicted")] == [0.0, 0.0, 0.0, 20.0]
    with pytest.raises(ValueError, match="dialog_history='last'"):
        agent_context(TURNS, "last")


@pytest.mark.parametrize(
    "content, structured, answer, ok",
    [
        ('{"answer": "Sure, see you then!"}', True, "Sure, see you then!", True),
        ('{"answer"   :"He said \\"ok\\" and left"}', True, 'He said "ok" and left', True),
        ('{"answer": "I was about to say that the movie', True, "I was about to say that the movie", False),  # cut off
        ('{"answer": "ends with a backslash \\', True, "ends with a backslash ", False),
        ("Sure, see you then!", True, "Sure, see you then!", False),  # the server ignored the response format
        ('{"reply": "x"}', True, '{"reply": "x"}', False),
        ("Sure, see you then!", False, "Sure, see you then!", None),
    ],
)
def test_read_partner_reply(content, structured, answer, ok):
    assert read_partner_reply(content, structured) == (answer, ok)


@pytest.mark.parametrize(
    "text, clean",
    [
        ("Sounds great, enjoy!", "Sounds great, enjoy!"),
        ("user: (0 minutes later) Sounds great, enjoy!", "Sounds great, enjoy!"),
        ("user: Sounds great!", "Sounds great!"),
        ("agent: (20 minutes later) I'm back. user: Welcome back!", "Welcome back!"),  # the last turn it wrote
    ],
)
def test_partner_reply_cleaned_the_authors_way(text, clean):
    assert clean_partner_text(text) == clean


def test_dialog_judge_prompt_has_the_papers_text_and_the_transcript():
    system, user = dialog_judge_messages("delay_appropriateness", TURNS)
    s = system["content"]
    assert s.startswith(
        "You will be given a conversation between a dialog agent and a user.\n\nThroughout the "
        "conversation, the agent proactively determines the delay of its response"
    )
    assert "At each agent's turn, the delay is provided in the parentheses followed by the message." in s
    assert (
        "Evaluation Criteria:\nDelay-appropriateness (1-5): the extent to which the agent poses delays with "
        "appropriate frequency and amount.\n\nEvaluation Steps:\n1. Assess whether the agent poses" in s
    )
    assert s.endswith("5 indicates the agent uses delays appropriately in terms of frequency and amount.")
    assert user["content"] == (
        "### Conversation ###\n"
        "user: I finally got home. What a day!\n"
        "agent: (0 minutes later) Welcome back! Long day?\n"
        "user: Yes. Imma take a shower.\n"
        "agent: (20 minutes later) Feeling better now?\n\n"
        'Rate the dialog agent on Delay-appropriateness (1-5). Answer with a JSON object only: {"score": <an '
        'integer from 1 to 5>, "explanation": "<one or two sentences>"}'
    )
    assert set(DIALOG_JUDGE_METRICS) == {"coherence", "delay_appropriateness", "time_specificity"}
    assert (
        "Coherence (1-5): the extent to which the agent maintains a good conversation flow."
        in dialog_judge_messages("coherence", TURNS)[0]["content"]
    )
    assert (
        "4. Rate on a scale from 1 to 5, where 1 indicates the agent's responses are completely time-agnostic"
        in dialog_judge_messages("time_specificity", TURNS)[0]["content"]
    )
    with pytest.raises(ValueError, match="unknown dialog-level judge metric 'naturalness'"):
        dialog_judge_messages("naturalness", TURNS)


@pytest.mark.parametrize(
    "reply, score",
    [
        ('{"score": 4, "explanation": "The agent keeps the flow but the 20-minute delay is abrupt."}', 4),
        ('```json\n{"score": 2, "explanation": "Delays in almost every turn (1-5 scale)."}\n```', 2),
        ("**Coherence:** 4\n\nThe agent's replies follow the user's messages naturally.", 4),
        ("Delay-appropriateness: 2/5. The agent waits 120 minutes before answering a yes/no question.", 2),
        ("Delay appropriateness score: 3", 3),
        ("Evaluation:\n1. The delays are rare and fit the shower (20 minutes).\n\nRating: 5 out of 5", 5),
        ("Time-specificity (1-5): 1 - the replies make sense at any time.", 1),
        ("I would rate the agent 3/5 on coherence.", 3),
        ("4", 4),
        ("The agent is coherent and natural.", None),  # no score
        ("Score: 3\n...on reflection...\nScore: 4", None),  # two different scores
        ('{"score": 7, "explanation": "great"}', None),  # out of range
        ("\n\n\n\n", None),
        ("", None),
        (None, None),
        ('{"score": 3, "explanation": "The agent answers the ques', 3),  # cut off after the score
    ],
)
def test_parse_dialog_score_on_realistic_judge_replies(reply, score):
    assert parse_dialog_score(reply) == score


# ------------------------------------------------------------------------------------------------ aggregation


def judged(id_, delays, scores, failed=(), error=None):
    turns = [DialogTurn(USER, "A", "seed")]
    for m in delays:
        turns += [DialogTurn(AGENT, "B", "reply", m, AGENT), DialogTurn(USER, "A", "ok", 0.0, "partner")]
    sim = SimulatedDialog(id_, "B", "A", turns, error=error)
    sim.scores = dict(scores)
    sim.judge_failed = {m: m in failed for m in scores}
    return sim


def test_aggregation_by_hand():
    sims = [
        judged("d1", [0.0, 30.0, 0.0], {"coherence": 4, "delay_appropriateness": 3, "time_specificity": None}),
        judged(
            "d2",
            [0.0, 0.0],
            {"coherence": 2, "delay_appropriateness": None, "time_specificity": 5},
            failed={"delay_appropriateness"},
        ),
        judged("d3", [60.0], {}, error="partner call failed at turn 3: boom"),
    ]
    o = aggregate_dialogs(sims)
    # completed: d1, d2; agent turns 3 + 2 = 5, one delayed (30 min); d3 failed and is left out everywhere
    assert (o["dialogs_simulated"], o["dialogs_completed"], o["dialogs_failed"], o["dialogs_with_delay"]) == (
        3,
        2,
        1,
        1,
    )
    assert (o["dialog_agent_turns"], o["dialog_agent_delayed_turns"]) == (5, 1)
    assert o["dialog_delay_rate"] == pytest.approx(1 / 5) and o["dialog_mean_delay_minutes"] == 30.0
    assert o["dialog_partner_turns"] == 5
    # coherence: (4 + 2) / 2; with a delay: d1 only
    assert o["dialog_coherence"] == pytest.approx(3.0) and o["dialog_coherence_with_delay"] == 4
    assert (o["dialog_coherence_judged"], o["dialog_coherence_unparsed"], o["dialog_coherence_failed"]) == (2, 0, 0)
    # delay-appropriateness: d2's call failed -> mean of d1 alone
    assert o["dialog_delay_appropriateness"] == 3
    assert (
        o["dialog_delay_appropriateness_judged"],
        o["dialog_delay_appropriateness_unparsed"],
        o["dialog_delay_appropriateness_failed"],
    ) == (1, 0, 1)
    # time-specificity: d1 unreadable -> d2 alone; no readable score among dialogs with a delay
    assert o["dialog_time_specificity"] == 5 and o["dialog_time_specificity_with_delay"] is None
    assert (o["dialog_time_specificity_judged"], o["dialog_time_specificity_unparsed"]) == (1, 1)
    # a threshold: delays up to 30 minutes count as instant
    assert aggregate_dialogs(sims, instant_max_minutes=30.0)["dialog_agent_delayed_turns"] == 0
    no_judge = aggregate_dialogs(sims, judged=False)
    assert no_judge["dialog_coherence"] is None and no_judge["dialog_coherence_judged"] == 0


# ------------------------------------------------------------------------- the loop with a scripted checkpoint


@pytest.fixture(scope="module")
def timer_tokenizer(tiny_tokenizer):
    tok = copy.deepcopy(tiny_tokenizer)
    add_timer_tokens(tok)
    return tok


class ScriptedTimer:
    """A TIMER checkpoint stand-in: at <TIME> it writes the next scripted interval, at <UTT> a numbered reply."""

    name = "scripted"

    def __init__(self, tokenizer, intervals, then=None):
        self.tokenizer, self.intervals, self.then, self.prompts = tokenizer, list(intervals), then, []

    def generate(self, prompts, *, max_new_tokens=64, desc=None, **_):
        out = []
        for p in prompts:
            self.prompts.append(p)
            if p.endswith("<TIME>"):
                out.append((self.intervals.pop(0) if self.intervals or self.then is None else self.then) + TIMER_UTT)
            else:
                out.append(f"reply {len(self.prompts)}" + self.tokenizer.eos_token)
        return out


class ScriptedPartner:
    """A simulated user answering in the asked-for JSON; `fail_on` call numbers raise."""

    model = "scripted-partner"

    def __init__(self, fail_on=()):
        self.calls, self.fail_on = [], set(fail_on)

    def chat(self, messages, **kwargs):
        self.calls.append((messages, kwargs))
        if len(self.calls) in self.fail_on:
            raise ConnectionError("partner down")
        return json.dumps({"answer": f"user: (0 minutes later) answer {len(self.calls)}"})


class ScriptedJudge:
    model = "scripted-judge"

    def __init__(self, replies):
        self.replies, self.calls = dict(replies), []

    def chat(self, messages, **kwargs):
        self.calls.append((messages, kwargs))
        for metric, reply in self.replies.items():
            if DIALOG_JUDGE_METRICS[metric]["metric"] + " (1-5):" in messages[0]["content"]:
                if isinstance(reply, Exception):
                    raise reply
                return reply
        return "Score: 3"  # a turn-level judgement (level=both)


DIALOG = TimerDialog(
    "paper-1",
    ["A", "B", "A", "B", "A"],
    [
        "I finally got home. What a day!",
        "It's 11 p.m.!",
        "Imma take a shower.",
        "Wash it off.",
        "I feel much better now!",
    ],
    [0.0, 0.0, 0.0, 0.0, 20.0],
)


def test_simulation_follows_the_protocol(timer_tokenizer):
    renderer = TimerRenderer(timer_tokenizer)
    # agent A spoke first, so the user speaks at turns 1, 3, 5 and the agent at 2, 4: 2 agent turns in 4 turns
    backend = ScriptedTimer(timer_tokenizer, ["20 minutes", "about 1 hour 30 minutes, I guess"])
    partner = ScriptedPartner()
    (sim,) = simulate_dialogs(
        backend,
        [DIALOG],
        renderer=renderer,
        partner=partner,
        turns=4,
        partner_temperature=0.7,
        partner_max_new_tokens=33,
    )
    assert sim.complete and len(sim.turns) == 5
    assert [t.role for t in sim.turns] == [AGENT, USER, AGENT, USER, AGENT]
    assert [t.speaker for t in sim.turns] == ["A", "B", "A", "B", "A"]
    assert [t.source for t in sim.turns] == ["seed", "partner", AGENT, "partner", AGENT]
    assert [t.minutes for t in sim.turns] == [0.0, 0.0, 20.0, 0.0, 90.0]
    assert [t.interval_read for t in sim.agent_turns()] == ["strict", "extracted"]
    assert [t.utterance for t in sim.turns if t.source == "partner"] == ["answer 1", "answer 2"]  # cleaned
    assert all(t.structured for t in sim.turns if t.source == "partner")
    # the agent's prompts: the history at 0 minutes, the reply conditioned on the delay it chose
    history = [TimerTurn("A", DIALOG.utterances[0]), TimerTurn("B", "answer 1")]
    assert backend.prompts[0] == renderer.interval_prompt(history, "A")
    assert backend.prompts[1] == renderer.response_prompt(history, "A", 20.0)
    assert sim.turns[2].utterance == "reply 2"
    history += [TimerTurn("A", "reply 2"), TimerTurn("B", "answer 2")]  # the 20-minute turn at 0 in the prompt
    assert backend.prompts[2] == renderer.interval_prompt(history, "A")
    assert backend.prompts[3] == renderer.response_prompt(history, "A", 90.0)
    # the partner: the authors' layout, the sampling and structured output asked for
    messages, kwargs = partner.calls[1]
    assert messages[1]["content"] == (
        "Conversation:\nagent: (0 minutes later) I finally got home. What a day!\n"
        "user: (0 minutes later) answer 1\nagent: (20 minutes later) reply 2"
    )
    assert kwargs["temperature"] == 0.7 and kwargs["max_new_tokens"] == 33
    assert kwargs["seed"] != partner.calls[0][1]["seed"]  # a seed per dialog and turn, not one for every call
    assert kwargs["response_format"]["json_schema"]["schema"]["required"] == ["answer"]

    # an unreadable interval is inserted as 0 minutes (counted); history=predicted shows the agent its delays
    backend = ScriptedTimer(timer_tokenizer, ["soon-ish", "45 minutes"])
    (sim,) = simulate_dialogs(
        backend,
        [DIALOG],
        renderer=renderer,
        partner=ScriptedPartner(),
        turns=4,
        history="predicted",
        interval_reading="strict",
    )
    assert [(t.interval_text, t.interval_read, t.minutes) for t in sim.agent_turns()] == [
        ("soon-ish", "unparsed", 0.0),
        ("45 minutes", "strict", 45.0),
    ]
    later = [
        TimerTurn("A", DIALOG.utterances[0]),
        TimerTurn("B", "answer 1"),
        TimerTurn("A", "reply 2", 0.0),
        TimerTurn("B", "answer 2"),
    ]
    assert backend.prompts[2] == renderer.interval_prompt(later, "A")
    # greedy partner: no seed; plain text asked for, and used as it came
    partner = ScriptedPartner()
    simulate_dialogs(
        ScriptedTimer(timer_tokenizer, [], then="0 minutes"),
        [DIALOG],
        renderer=renderer,
        partner=partner,
        turns=1,
        partner_temperature=0.0,
        partner_structured=False,
    )
    assert set(partner.calls[0][1]) == {"max_new_tokens", "temperature"}


def test_a_failed_partner_stops_its_dialog_and_the_report_counts_it(timer_tokenizer):
    renderer = TimerRenderer(timer_tokenizer)
    other = TimerDialog("synthetic-2", ["A", "B"], ["Going for a run.", "Back!"], [0.0, 40.0])  # the user opens
    backend = ScriptedTimer(timer_tokenizer, [], then="0 minutes")
    # round 1: the user answers in DIALOG (call 1), the agent in `other`; round 2: the agent in DIALOG, the user in
    # `other` (call 2, fails)
    judge = ScriptedJudge(
        {
            "coherence": '{"score": 4, "explanation": "fine"}',
            "delay_appropriateness": "no idea",
            "time_specificity": TimeoutError("judge timed out"),
        }
    )
    report = evaluate_dialog_level(
        backend,
        [DIALOG, other],
        renderer=renderer,
        partner=ScriptedPartner(fail_on={2}),
        judge=judge,
        turns=2,
        judge_max_new_tokens=40,
    )
    o = report["overall"]
    assert (o["dialogs_simulated"], o["dialogs_completed"], o["dialogs_failed"]) == (2, 1, 1)
    done, failed = report["samples"]
    assert done["complete"] and len(done["turns"]) == 3 and failed["error"].startswith("partner call failed at turn 3")
    assert len(failed["turns"]) == 2 and "scores" not in failed  # not judged
    assert done["scores"] == {"coherence": 4, "delay_appropriateness": None, "time_specificity": None}
    assert done["judge_replies"]["delay_appropriateness"] == "no idea"
    assert done["judge_replies"]["time_specificity"].startswith("error: TimeoutError")
    assert done["judge_failed"] == ["time_specificity"]
    assert (
        o["dialog_coherence"],
        o["dialog_delay_appropriateness_unparsed"],
        o["dialog_time_specificity_failed"],
    ) == (4, 1, 1)
    assert report["judge"]["delay_appropriateness"] == {
        "mean": None,
        "mean_with_delay": None,
        "judged": 0,
        "unparsed": 1,
        "failed": 0,
    }
    assert all(kw["max_new_tokens"] == 40 and "response_format" not in kw for _, kw in judge.calls)
    assert len(judge.calls) == 3  # one per metric, the completed dialog only
    assert any("1 of 2 simulated dialogs stopped early" in n for n in report["notes"])
    assert any("delay_appropriateness: 1 unreadable and 0 failed" in n for n in report["notes"])

    with pytest.raises(RuntimeError, match="none of the 1 dialogs completed.*partner down"):
        evaluate_dialog_level(
            ScriptedTimer(timer_tokenizer, [], then="0 minutes"),
            [other],
            renderer=renderer,
            partner=ScriptedPartner(fail_on={1}),
            turns=2,
        )


def test_suite_option_level_dialog(timer_tokenizer, tmp_path):
    from timealign.config import load_recipe

    with pytest.raises(ValueError, match="timelychat.level=dialog needs a simulated user"):
        SUITE.parse_options({"level": "dialog"})
    with pytest.raises(ValueError, match="timelychat.level='dialogue'; known: turn, dialog, both"):
        SUITE.parse_options({"level": "dialogue"})
    assert TimelyChatOptions().level == "turn"
    options = SUITE.parse_options(
        {
            "level": "both",
            "data": "synthetic",
            "n": "2",
            "seed": "5",
            "dialog_turns": "3",
            "partner_url": "http://127.0.0.1:9/v1",
            "partner_model": "sim",
        }
    )
    ctx = EvalContext(recipe=load_recipe("tiny-timer", task="sft"), out_dir=tmp_path, options=options)
    ctx.partner = ScriptedPartner()  # instead of the OpenAIBackend the options name
    ctx.judge = ScriptedJudge({m: "Score: 3" for m in DIALOG_JUDGE_METRICS})
    dialogs = load_eval_dialogs(None, 2, 5)
    speakers_first = sum(d.speakers[0] == d.target_speaker for d in dialogs)
    backend = ScriptedTimer(timer_tokenizer, [], then="30 minutes")
    report = get_suite("timelychat").run(backend, ctx)
    o = report["overall"]
    assert "target_f1" in o and o["dialogs_completed"] == 2  # both levels in one report
    assert o["dialog_coherence"] == 3 and o["dialog_coherence_judged"] == 2
    # 3 turns after the seed: 2 agent turns where the user opened, 1 where the agent did
    assert o["dialog_agent_turns"] == 2 * (2 - speakers_first) + speakers_first
    assert [len(s["turns"]) for s in report["dialog_level"]["samples"]] == [4, 4]
    md = report["markdown"]
    assert "Response timing prediction, target turn" in md and "**Dialog-level evaluation**" in md
    assert "| coherence | 3.00 | 3.00 | 2 | 0 | 0 |" in md
    assert report["settings"]["level"] == "both"
    assert (tmp_path / "generations" / "timelychat-dialog-interval.jsonl").is_file()


# ------------------------------------------------------------------- end to end on a real vLLM server (CPU)


@pytest.fixture(scope="module")
def vllm_server(tiny_model_dir, tmp_path_factory):
    """`python -m vllm.entrypoints.openai.api_server` on the tiny model (its own chat template), CPU engine."""
    require_vllm()
    with serve_vllm(
        tiny_model_dir,
        "tiny-chat",
        tmp_path_factory.mktemp("vllm-server") / "server.log",
        # compact JSON under response_format: a random model otherwise fills the object with whitespace
        "--structured-outputs-config",
        '{"backend": "xgrammar", "disable_any_whitespace": true}',
        max_model_len=4096,
    ) as url:
        yield f"{url}/v1"


@pytest.fixture(scope="module")
def timer_checkpoint(tiny_model_dir, tmp_path_factory):
    """A TIMER checkpoint from two optimizer steps of `timealign.train.sft` on 8 synthetic dialogs."""
    require_vllm()
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


def _e2e_data():
    """Dialogs of the real TimelyChat sample (tests/needs.py: skipped where ../shared is absent, failed in CI)."""
    return {"data": str(shared_path("data", "timelychat-sample", "eval.jsonl"))}


@pytest.mark.slow
@pytest.mark.vllm
def test_dialog_level_end_to_end_on_a_real_vllm_server(vllm_server, timer_checkpoint, tmp_path):
    from timealign.backends.hf import HFBackend
    from timealign.backends.openai import OpenAIBackend

    recipe, ckpt = timer_checkpoint
    agent = HFBackend(str(ckpt), dtype="float32", device="cpu", batch_size=8)
    data = _e2e_data()
    options = SUITE.parse_options(
        {
            **data,
            "n": "2",
            "level": "dialog",
            "interval_max_new_tokens": "6",
            "response_max_new_tokens": "12",
            "partner_url": vllm_server,
            "partner_model": "tiny-chat",
            "partner_max_new_tokens": "24",
            "judge_url": vllm_server,
            "judge_model": "tiny-chat",
            "dialog_judge_max_new_tokens": "24",
        }
    )
    ctx = EvalContext(recipe=recipe, out_dir=tmp_path, options=options, checkpoint=str(ckpt))
    report = get_suite("timelychat").run(agent, ctx)
    dialogs = load_eval_dialogs(options.data, 2, options.seed)
    dl, o = report["dialog_level"], report["overall"]
    assert [s["id"] for s in dl["samples"]] == [d.id for d in dialogs]
    assert o["dialogs_completed"] == 2, dl["notes"]
    agent_turns = 0
    for sample, d in zip(dl["samples"], dialogs):
        turns = sample["turns"]
        assert len(turns) == 11  # the seed and the paper's 10 turns
        assert turns[0]["utterance"] == d.utterances[0] and turns[0]["minutes"] == 0.0
        assert turns[0]["role"] == (AGENT if d.speakers[0] == d.target_speaker else USER)
        assert all(a["role"] != b["role"] for a, b in zip(turns, turns[1:]))  # alternating
        assert {t["speaker"] for t in turns if t["role"] == AGENT} == {d.target_speaker}
        for t in turns[1:]:
            if t["role"] == USER:  # the partner's turn: no delay, its raw reply kept, the JSON form recorded
                assert t["minutes"] == 0.0 and t["source"] == "partner" and isinstance(t["raw"], str)
                assert isinstance(t["structured"], bool)
            else:  # the agent's turn: the delay it wrote, in whole minutes, or 0 when unreadable
                agent_turns += 1
                assert t["interval_read"] in ("strict", "extracted", "unparsed")
                expected = 0.0 if t["interval_read"] == "unparsed" else float(int(t["predicted_minutes"]))
                assert t["minutes"] == expected
                assert not any(m in t["utterance"] for m in ("<SPK>", "<TIME>", "<UTT>"))
        # the judge's raw replies are kept; a score is there exactly when it can be read from them
        assert set(sample["scores"]) == set(DIALOG_JUDGE_METRICS) and sample["judge_failed"] == []
        for metric, reply in sample["judge_replies"].items():
            assert sample["scores"][metric] == parse_dialog_score(reply)
    assert o["dialog_agent_turns"] == agent_turns == 10
    assert o["dialog_intervals_unparsed"] == sum(
        t.get("interval_read") == "unparsed" for s in dl["samples"] for t in s["turns"]
    )
    for metric in DIALOG_JUDGE_METRICS:
        readable = [s["scores"][metric] for s in dl["samples"] if s["scores"][metric] is not None]
        assert o[f"dialog_{metric}_judged"] == len(readable)
        assert o[f"dialog_{metric}_unparsed"] == 2 - len(readable) and o[f"dialog_{metric}_failed"] == 0
        assert o[f"dialog_{metric}"] == (sum(readable) / len(readable) if readable else None)
    # the report says how many judge replies were unreadable, per metric
    for metric, name in (
        ("coherence", "coherence"),
        ("delay_appropriateness", "delay-appropriateness"),
        ("time_specificity", "time-specificity"),
    ):
        row = f"| {name} | "
        line = next(line for line in report["markdown"].splitlines() if line.startswith(row))
        assert line.endswith(f"| {o[f'dialog_{metric}_judged']} | {o[f'dialog_{metric}_unparsed']} | 0 |")
    if any(o[f"dialog_{m}_unparsed"] for m in DIALOG_JUDGE_METRICS):
        assert any("unreadable and 0 failed replies" in n for n in report["notes"])

    # The judge with the server enforcing its JSON answer: every rating readable, the mean by hand.
    renderer = timer_renderer_for_backend(agent)
    assert renderer.special_tokens and renderer.order == "time_first"
    partner = OpenAIBackend(vllm_server, model="tiny-chat")
    structured = evaluate_dialog_level(
        agent,
        dialogs,
        renderer=renderer,
        partner=partner,
        judge=partner,
        turns=2,
        interval_max_new_tokens=6,
        response_max_new_tokens=12,
        partner_max_new_tokens=24,
        judge_max_new_tokens=24,
        judge_structured=True,
    )
    for metric in DIALOG_JUDGE_METRICS:
        scores = [s["scores"][metric] for s in structured["samples"]]
        assert all(score in (1, 2, 3, 4, 5) for score in scores), [s["judge_replies"] for s in structured["samples"]]
        assert structured["overall"][f"dialog_{metric}"] == pytest.approx(sum(scores) / 2)
    assert all(len(s["turns"]) == 3 for s in structured["samples"])
