"""TimelyChat dialog-level evaluation (TimelyChat paper, Sec. 4.2 "Dialog-level Evaluation", Sec. 6.3, Fig. 3, App. B.2
and B.3): the checkpoint converses with a simulated user, and an LLM judge rates each whole dialog.

    python eval/run.py recipe=tiny-timer checkpoint=outputs/tiny-timer suites=timelychat timelychat.level=dialog \
        timelychat.data=eval.jsonl timelychat.partner_url=http://host:8000/v1 timelychat.partner_model=gpt-4o \
        timelychat.judge_url=http://host:8001/v1 timelychat.judge_model=judge

The protocol, as the authors' `evaluate_dialog-level.py` (sb-jang/timelychat) runs it and the paper describes it:

1. Seed. A dialog starts from its first utterance only ("we provide the first turn of conversations from the
   TIMELYCHAT as the initial interaction"), at 0 minutes. The checkpoint is the *agent* and speaks as the dialog's
   target speaker; the simulated partner is the *user* and speaks as the other speaker.
2. Turns. `turns` turns (the paper's 10) follow the seed. Whoever did not speak last speaks next, so a dialog ends
   with turns + 1 utterances, agent and user alternating.
3. Agent turn: the two-step TIMER inference (`timealign.suites.timelychat.infer.TimerInference`) with the
   checkpoint's own `TimerRenderer`. The interval comes first. It is read strictly, then from prose
   (`interval_reading=extract`), and otherwise taken as 0 minutes, which is what the authors' `convert_to_minutes`
   returns when it finds no interval (counted). It is cut to whole minutes (their `int(...)`). That delay is put
   before the agent's turn, and the reply is conditioned on it. Every earlier turn in the agent's prompt carries
   0 minutes (`history="zero"`): the authors' TIMER prompt writes "0 minutes later" before every context turn, as
   TIMER is trained (Sec. 5.2). `history="predicted"` shows the agent its own earlier delays. Replies go through
   the authors' clean-up (`clean_reply`) when `postprocess` is on; their dialog script always applies it.
4. User turn: the partner, any OpenAI-compatible chat model (the paper's GPT-4o). Its system message is the App.
   B.2 simulator prompt (the authors' wording, which spells "dialogue"). The user message is "Conversation:" with
   every turn written `user|agent: (N minutes later) text`, where user turns and the seed carry 0 minutes. The
   partner is asked for the authors' structured output, a JSON object {"answer": ...} (`structured=False` asks
   for plain text instead). The answer is cut after the last "later)", "user:" and "agent:", as the authors do.
   The user replies without delay.
5. Judge: the App. B.3 dialog-level prompt, with the criteria and steps of coherence, delay-appropriateness and
   (dialog-level) time-specificity, as the system message. One call per metric and dialog. The paper does not
   print how the dialog reaches its judge, so that part is ours. Each agent turn is written
   `agent: (N minutes later) text` (B.3: "At each agent's turn, the delay is provided in the parentheses followed
   by the message"), each user turn `user: text`, and the judge is asked for the same JSON as the turn-level judge.
   The score is read by `parse_dialog_score`.
6. Aggregation: for each metric, the mean of the readable 1-5 scores over the completed dialogs (Fig. 3 shows
   means). Unreadable and failed judgements are counted and left out of the mean; their raw replies stay in the
   samples. Sec. 6.3 reads "We sample dialogs that include at least one delayed response" and does not say
   whether it filters the seed dialogs (in TimelyChat every one of them has a delayed target) or the simulated
   ones, so the mean over the simulated dialogs in which the agent delayed at least once is reported beside the
   first (`*_with_delay`). The agent's behaviour is reported too: its turns, the delayed ones, the delay rate, the
   mean delay and the intervals it could not read.

Failures: if an agent generation or a partner call fails, that dialog stops there. It is kept with its error and
its turns so far, counted, and not judged: a shorter dialog would be rated on other terms. When no dialog
completes, the evaluation raises.

What is not the authors' setting is listed in `PROTOCOL_DIFFERENCES` (in every report's settings).
"""

from __future__ import annotations

import json
import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from timealign.render.intervals import extract_interval, paper_interval_minutes
from timealign.render.timer import TimerRenderer, TimerTurn
from timealign.suites.timelychat.infer import TimerInference
from timealign.suites.timelychat.judge import chat_model, parse_judge_score
from timealign.suites.timelychat.metrics import is_delayed
from timealign.suites.timelychat.postprocess import clean_reply

__all__ = [
    "AGENT",
    "USER",
    "DIALOG_HISTORIES",
    "DIALOG_JUDGE_METRICS",
    "SIMULATOR_PROMPT",
    "PROTOCOL_DIFFERENCES",
    "DialogTurn",
    "SimulatedDialog",
    "delay_text",
    "seed_dialog",
    "agent_context",
    "partner_messages",
    "read_partner_reply",
    "clean_partner_text",
    "transcript",
    "dialog_judge_messages",
    "parse_dialog_score",
    "aggregate_dialogs",
    "simulate_dialogs",
    "judge_dialogs",
    "partner_from_options",
    "evaluate_dialog_level",
]

AGENT, USER = "agent", "user"
DIALOG_HISTORIES = ("zero", "predicted")

# App. B.2, in the words of the authors' script (the paper prints "dialog" where the script sends "dialogue").
SIMULATOR_PROMPT = """You are a user simulator (user) engaging in an event-driven dialogue with a dialogue agent \
(agent).
Given the dialogue context, your task is to proceed the conversation by one turn under the following assumptions:
1. agent responds after the elapsed time specified in the parentheses from the previous user utterance. If the \
delay is "0 minutes", agent is assumed to respond immediately.
2. user is assumed to respond to agent without any delay."""

# The authors' `Output` response format ({"answer": str}) as an OpenAI json_schema response format.
PARTNER_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "Output",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    },
}

# App. B.3, "Dialog-level Prompt".
DIALOG_JUDGE_TEMPLATE = """You will be given a conversation between a dialog agent and a user.

Throughout the conversation, the agent proactively determines the delay of its response to the user's previous \
message, simulating delayed responses due to event experiences that take certain time to process.

At each agent's turn, the delay is provided in the parentheses followed by the message. Your task is to rate the \
dialog agent on one metric. Please make sure you read and understand these instructions carefully.

Evaluation Criteria:
{metric} (1-5): {criteria}

Evaluation Steps:
{steps}"""

# App. B.3, "Evaluation Criteria and Steps": the three dialog-level metrics.
DIALOG_JUDGE_METRICS: dict[str, dict[str, str]] = {
    "coherence": {
        "metric": "Coherence",
        "criteria": "the extent to which the agent maintains a good conversation flow.",
        "steps": (
            "1. Assess the flow and coherence of the agent's responses in the conversation.\n"
            "2. Evaluate the tone and style compatibility throughout the conversation.\n"
            "3. Rate on a scale from 1 to 5, where 1 indicates the agent's responses are incoherent or "
            "inappropriate, and 5 indicates the agent's responses are perfectly coherent and appropriate."
        ),
    },
    "delay_appropriateness": {
        "metric": "Delay-appropriateness",
        "criteria": "the extent to which the agent poses delays with appropriate frequency and amount.",
        "steps": (
            "1. Assess whether the agent poses unnecessary or excessively frequent delays that could harm the "
            "conversation flow.\n"
            "2. Evaluate whether the amounts of delays (if not 0 minutes) reflect the typical duration of events "
            "implied in the corresponding message.\n"
            "3. Rate on a scale from 1 to 5, where 1 indicates the agent overuses and misuses delays, and 5 "
            "indicates the agent uses delays appropriately in terms of frequency and amount."
        ),
    },
    "time_specificity": {
        "metric": "Time-specificity",
        "criteria": (
            "the extent to which the agent's responses ONLY make sense when the specified time has passed, "
            "contrary to a time-agnostic responses that make sense regardless of time."
        ),
        "steps": (
            "1. Read the provided conversation and take note of the elapsed times since the previous messages.\n"
            "2. Consider the context of the conversation, focusing on how the passage of time might affect the "
            "relevance or appropriateness of the agent's responses.\n"
            "3. Evaluate whether the agent's responses are time-specific. That is, determine if the responses "
            "directly relate to or are clearly influenced by the elapsed times.\n"
            "4. Rate on a scale from 1 to 5, where 1 indicates the agent's responses are completely time-agnostic "
            "and unaffected by the passage of time, and 5 indicates the agent's responses are entirely "
            "time-specific; they only make sense because of the amount of time that has passed since the previous "
            "message."
        ),
    },
}

# Ours (the paper does not print it): the dialog and the answer format, laid out like the turn-level judge's input.
DIALOG_JUDGE_INPUT = """### Conversation ###
{transcript}

Rate the dialog agent on {metric} (1-5). Answer with a JSON object only: \
{{"score": <an integer from 1 to 5>, "explanation": "<one or two sentences>"}}"""

# `judge_structured`: the same answer, enforced by the server (a weak local judge otherwise rarely answers in form).
JUDGE_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "Judgement",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}, "explanation": {"type": "string"}},
            "required": ["score", "explanation"],
            "additionalProperties": False,
        },
    },
}

PROTOCOL_DIFFERENCES = (
    "agent decoding: the backend's sampling settings (the recipe's eval section; greedy by default). The authors "
    "ran TIMER with beam search (3 beams) plus top-p 0.95 sampling at temperature 1.0 and no_repeat_ngram_size=2, "
    "which the backends here do not offer",
    "agent prompt: the checkpoint's own TIMER format (<SPK>/<TIME>/<UTT> markers and canonical intervals), not the "
    "authors' T5 text '<spk> A: <time> 0 minutes later <utt> ...'; the same information in each turn",
    "agent token budgets: interval_max_new_tokens / response_max_new_tokens (12 / 64 by default); the authors "
    "gave each step 100 new tokens",
    "agent reply clean-up: only with postprocess=true; the authors' dialog script always applies it",
    "judge input: the paper does not print how the dialog reaches its judge or how the judge answers; here it is "
    "a '### Conversation ###' transcript and a JSON {score, explanation} answer (the paper's judge: Claude Sonnet "
    "4.5; the released code has no judge)",
    "partner sampling: partner_temperature (default 1.0, the API default the authors' GPT-4o simulator ran with) "
    "with a seed per dialog and turn (reproducible; the authors set none); structured output is requested as an "
    "OpenAI json_schema response format (the authors used the openai client's parse with a pydantic model)",
)


# ============================================================================================== the dialog


@dataclass
class DialogTurn:
    """One turn of a simulated dialog. `minutes` is the delay before it: the agent's (whole minutes) or 0."""

    role: str  # AGENT | USER
    speaker: str  # the dialog's speaker label ("A" / "B")
    utterance: str
    minutes: float = 0.0
    source: str = "seed"  # "seed" (the dataset's first utterance) | "agent" | "partner"
    raw: str | None = None  # what the model or partner wrote, before reading and clean-up
    interval_text: str | None = None  # agent turns: what the model wrote for the interval
    interval_read: str | None = None  # agent turns: "strict" | "extracted" | "unparsed" | "paper"
    predicted_minutes: float | None = None  # agent turns: the interval read, before cutting to whole minutes
    structured: bool | None = None  # partner turns with partner_structured: the reply was the asked-for JSON

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class SimulatedDialog:
    id: str
    agent: str  # the agent's speaker label (the dataset dialog's target speaker)
    user: str
    turns: list[DialogTurn]
    error: str | None = None  # why the dialog stopped early
    scores: dict = field(default_factory=dict)  # metric -> 1-5 score, or None (unreadable or failed)
    judge_replies: dict = field(default_factory=dict)  # metric -> the judge's raw reply (or the error)
    judge_failed: dict = field(default_factory=dict)  # metric -> True when the judge call raised

    @property
    def complete(self) -> bool:
        return self.error is None

    def agent_turns(self) -> list[DialogTurn]:
        """The turns the agent generated (the seed is the dataset's, not the agent's)."""
        return [t for t in self.turns if t.source == AGENT]

    def to_dict(self, instant_max_minutes: float = 0.0) -> dict:
        agent = self.agent_turns()
        out = {
            "id": self.id,
            "agent_speaker": self.agent,
            "user_speaker": self.user,
            "complete": self.complete,
            "agent_turns": len(agent),
            "delayed_turns": sum(is_delayed(t.minutes, instant_max_minutes) for t in agent),
            "turns": [t.to_dict() for t in self.turns],
        }
        if self.error is not None:
            out["error"] = self.error
        if self.scores or self.judge_replies:
            out.update(
                scores=dict(self.scores),
                judge_replies=dict(self.judge_replies),
                judge_failed=sorted(m for m, bad in self.judge_failed.items() if bad),
            )
        return out


def delay_text(minutes: float) -> str:
    """A delay as the authors write it: whole minutes, "90 minutes" (not "1 hour 30 minutes")."""
    return f"{int(minutes)} minutes"


def seed_dialog(dialog) -> SimulatedDialog:
    """The dialog's first utterance, with the target speaker as the agent and the other speaker as the user."""
    agent = dialog.target_speaker
    others = [s for s in dialog.speakers if s != agent]
    user = others[0] if others else ("A" if agent == "B" else "B")  # the authors' rule for A/B dialogs
    first = dialog.speakers[0]
    return SimulatedDialog(
        dialog.id, agent, user, [DialogTurn(AGENT if first == agent else USER, first, dialog.utterances[0])]
    )


def agent_context(turns: Sequence[DialogTurn], history: str = "zero") -> list[TimerTurn]:
    """The agent's prompt turns: every earlier turn at 0 minutes ("zero") or at the delay it had ("predicted")."""
    if history not in DIALOG_HISTORIES:
        raise ValueError(f"dialog_history={history!r}; known: {', '.join(DIALOG_HISTORIES)}")
    return [TimerTurn(t.speaker, t.utterance, 0.0 if history == "zero" else t.minutes) for t in turns]


# ============================================================================================= the partner


def partner_messages(turns: Sequence[DialogTurn]) -> list[dict]:
    """The simulator's chat messages: the App. B.2 prompt, then every turn as `role: (N minutes later) text`."""
    history = "\n".join(f"{t.role}: ({delay_text(t.minutes)} later) {t.utterance}" for t in turns)
    return [{"role": "system", "content": SIMULATOR_PROMPT}, {"role": "user", "content": f"Conversation:\n{history}"}]


_PARTIAL_ANSWER = re.compile(r'^\s*\{\s*"answer"\s*:\s*"((?:[^"\\]|\\.)*)', re.DOTALL)


def read_partner_reply(content: str, structured: bool = True) -> tuple[str, bool | None]:
    """(answer, whether it came in the asked-for form) from the partner's reply.

    structured: the JSON {"answer": ...} was asked for. A reply that is not that JSON object (`False`): the answer
    string of a JSON reply cut off mid-answer (the token budget), else the whole text. Without `structured` the
    reply is the answer (`None`).
    """
    if not structured:
        return content, None
    try:
        data = json.loads(content)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("answer"), str):
        return data["answer"], True
    partial = _PARTIAL_ANSWER.match(content)
    if partial:
        body = partial.group(1)
        body = body[:-1] if body.endswith("\\") and not body.endswith("\\\\") else body
        try:
            return json.loads(f'"{body}"'), False
        except json.JSONDecodeError:
            return body, False
    return content, False


def clean_partner_text(text: str) -> str:
    """The authors' clean-up of a simulator reply: the text after the last "later)", then "user:", then "agent:"
    (a simulator that writes its turn as a transcript line, "user: (0 minutes later) Sure!", gives "Sure!")."""
    for marker in ("later)", "user:", "agent:"):
        text = text.split(marker)[-1].strip()
    return text


# =============================================================================================== the judge


def transcript(turns: Sequence[DialogTurn]) -> str:
    """The dialog as the judge reads it: `agent: (N minutes later) text` and `user: text`."""
    return "\n".join(
        f"{AGENT}: ({delay_text(t.minutes)} later) {t.utterance}" if t.role == AGENT else f"{USER}: {t.utterance}"
        for t in turns
    )


def dialog_judge_messages(metric: str, turns: Sequence[DialogTurn]) -> list[dict]:
    """The judge's chat messages for one dialog and metric: the App. B.3 prompt (system) and the dialog (user)."""
    if metric not in DIALOG_JUDGE_METRICS:
        raise ValueError(f"unknown dialog-level judge metric {metric!r}; known: {', '.join(DIALOG_JUDGE_METRICS)}")
    rubric = DIALOG_JUDGE_METRICS[metric]
    return [
        {"role": "system", "content": DIALOG_JUDGE_TEMPLATE.format(**rubric)},
        {"role": "user", "content": DIALOG_JUDGE_INPUT.format(transcript=transcript(turns), metric=rubric["metric"])},
    ]


# The turn-level reader knows the labels Score, Rating, Naturalness and Time-specificity; a dialog-level judge also
# labels its score with its metric ("**Coherence:** 4", "Delay appropriateness: 3/5"), read as "Score: 4".
_DIALOG_LABELS = re.compile(r"\b(?:coherence|delay[- ]appropriateness)\b", re.IGNORECASE)


def parse_dialog_score(text: str | None) -> float | int | None:
    """The 1-5 score in a dialog-level judge's reply, or None (`timealign.suites.timelychat.judge.parse_judge_score`,
    with the dialog-level metric names also read as score labels)."""
    if text is None:
        return None
    return parse_judge_score(_DIALOG_LABELS.sub("Score", text))


# ============================================================================================ aggregation


def _mean(values: list) -> float | None:
    return sum(values) / len(values) if values else None


def aggregate_dialogs(
    sims: Sequence[SimulatedDialog],
    metrics: Sequence[str] = tuple(DIALOG_JUDGE_METRICS),
    *,
    instant_max_minutes: float = 0.0,
    judged: bool = True,
) -> dict:
    """The dialog-level numbers over the completed dialogs (keys prefixed `dialog`, beside the turn-level ones).

    Per metric: the mean of the readable scores (`dialog_<metric>`), how many were readable (`_judged`), unreadable
    (`_unparsed`) or failed (`_failed`), and the mean over the dialogs with at least one agent delay
    (`_with_delay`). Without a judge (`judged=False`) the metric keys are None. Agent behaviour: its generated
    turns, the delayed ones (> instant_max_minutes), their share, the mean delay of the delayed ones, and the
    intervals read from prose or not read at all (inserted as 0 minutes).
    """
    done = [s for s in sims if s.complete]
    agent = [t for s in done for t in s.agent_turns()]
    delayed = [t for t in agent if is_delayed(t.minutes, instant_max_minutes)]
    with_delay = [s for s in done if any(is_delayed(t.minutes, instant_max_minutes) for t in s.agent_turns())]
    partner = [t for s in done for t in s.turns if t.source == "partner"]
    out = {
        "dialogs_simulated": len(sims),
        "dialogs_completed": len(done),
        "dialogs_failed": len(sims) - len(done),
        "dialogs_with_delay": len(with_delay),
        "dialog_agent_turns": len(agent),
        "dialog_agent_delayed_turns": len(delayed),
        "dialog_delay_rate": len(delayed) / len(agent) if agent else None,
        "dialog_mean_delay_minutes": _mean([t.minutes for t in delayed]),
        "dialog_intervals_extracted": sum(t.interval_read == "extracted" for t in agent),
        "dialog_intervals_unparsed": sum(t.interval_read == "unparsed" for t in agent),
        "dialog_partner_turns": len(partner),
        "dialog_partner_unstructured": sum(t.structured is False for t in partner),
    }
    for metric in metrics:
        key = f"dialog_{metric}"
        if not judged:
            out.update(
                {key: None, f"{key}_with_delay": None, f"{key}_judged": 0, f"{key}_unparsed": 0, f"{key}_failed": 0}
            )
            continue
        readable = [s.scores[metric] for s in done if s.scores.get(metric) is not None]
        failed = sum(bool(s.judge_failed.get(metric)) for s in done)
        out[key] = _mean(readable)
        out[f"{key}_with_delay"] = _mean([s.scores[metric] for s in with_delay if s.scores.get(metric) is not None])
        out[f"{key}_judged"] = len(readable)
        out[f"{key}_unparsed"] = len(done) - len(readable) - failed
        out[f"{key}_failed"] = failed
    return out


# ============================================================================================= simulation


class _AgentGenerator:
    """`generate(prompts, max_new_tokens=, desc=)` for TimerInference through the resume cache; a failed prompt
    comes back as "" and its message is kept in `calls` (one dict per call: index -> message)."""

    def __init__(self, backend, cache_dir: Path | None):
        self.backend, self.cache_dir = backend, cache_dir
        self.calls: list[dict[int, str]] = []
        self.totals = {"cached": 0, "generated": 0, "failed": 0}

    def generate(self, prompts: list[str], *, max_new_tokens: int = 64, desc: str | None = None) -> list[str]:
        from timealign.backends.cache import cached_generate

        suite = "timelychat-dialog-interval" if "interval" in (desc or "") else "timelychat-dialog-response"
        gens = cached_generate(
            self.backend, prompts, suite=suite, cache_dir=self.cache_dir, max_new_tokens=max_new_tokens, desc=None
        )
        self.calls.append(dict(gens.errors))
        for key, value in gens.summary().items():
            if key in self.totals:
                self.totals[key] += value
        return [o if o is not None else "" for o in gens.outputs]

    def failed_since(self, start: int) -> dict[int, str]:
        out: dict[int, str] = {}
        for errors in self.calls[start:]:
            for i, msg in errors.items():
                out.setdefault(i, msg)
        return out


def _read_delay(text: str, minutes: float | None, interval_reading: str) -> tuple[str, float | None]:
    if interval_reading == "paper":  # the authors' convert_to_minutes, which reads every text (0 where it finds none)
        return "paper", paper_interval_minutes(text)
    if minutes is not None:
        return "strict", minutes
    if interval_reading == "extract":
        found = extract_interval(text)
        if found is not None:
            return "extracted", found
    return "unparsed", None


def _agent_step(
    infer: TimerInference,
    gen: _AgentGenerator,
    due: list[SimulatedDialog],
    *,
    history: str,
    interval_reading: str,
    postprocess: bool,
) -> None:
    """One agent turn in each dialog of `due` (batched through the backend)."""
    contexts = [agent_context(s.turns, history) for s in due]
    speakers = [s.agent for s in due]
    start = len(gen.calls)
    if infer.renderer.order == "time_first":
        intervals = infer.predict_intervals(contexts, speakers)
        reads = [_read_delay(text, minutes, interval_reading) for text, minutes in intervals]
        delays = [float(int(m)) if m is not None else 0.0 for _, m in reads]
        replies = infer.respond(contexts, speakers, delays)
    else:  # utterance-first: the reply comes before (and so without) its interval
        preds = infer.run(contexts, speakers)
        intervals = [(p.interval_text, p.minutes) for p in preds]
        reads = [_read_delay(text, minutes, interval_reading) for text, minutes in intervals]
        delays = [float(int(m)) if m is not None else 0.0 for _, m in reads]
        replies = [p.response for p in preds]
    failed = gen.failed_since(start)
    for i, sim in enumerate(due):
        if i in failed:
            sim.error = f"agent generation failed at turn {len(sim.turns) + 1}: {failed[i]}"
            continue
        reply = clean_reply(replies[i]) if postprocess else replies[i]
        sim.turns.append(
            DialogTurn(
                AGENT,
                sim.agent,
                reply,
                delays[i],
                AGENT,
                raw=replies[i],
                interval_text=intervals[i][0],
                interval_read=reads[i][0],
                predicted_minutes=reads[i][1],
            )
        )


def _partner_step(
    partner, due: list[SimulatedDialog], *, temperature: float, structured: bool, max_new_tokens: int
) -> None:
    """One simulated-user turn in each dialog of `due` (concurrent chat calls)."""
    extra = {"response_format": PARTNER_FORMAT} if structured else {}
    base_seed = int((getattr(partner, "sampling", None) or {}).get("seed", 0) or 0)

    def one(sim: SimulatedDialog) -> None:
        # Sampled replies get a seed of their own per dialog and turn: reproducible, yet not the same draws at every
        # turn (one fixed seed for every call made a random partner repeat itself).
        seed = {"seed": base_seed + zlib.crc32(f"{sim.id}:{len(sim.turns)}".encode())} if temperature > 0 else {}
        try:
            content = partner.chat(
                partner_messages(sim.turns), max_new_tokens=max_new_tokens, temperature=temperature, **extra, **seed
            )
        except Exception as err:  # noqa: BLE001 - recorded on the dialog, counted and reported
            sim.error = f"partner call failed at turn {len(sim.turns) + 1}: {type(err).__name__}: {err}"[:2000]
            return
        answer, ok = read_partner_reply(content, structured)
        sim.turns.append(
            DialogTurn(USER, sim.user, clean_partner_text(answer), 0.0, "partner", raw=content, structured=ok)
        )

    with ThreadPoolExecutor(max_workers=max(1, min(int(getattr(partner, "concurrency", 8)), len(due)))) as pool:
        list(pool.map(one, due))


def simulate_dialogs(
    backend,
    dialogs: Sequence,
    *,
    renderer: TimerRenderer,
    partner: Any,
    turns: int = 10,
    history: str = "zero",
    interval_reading: str = "extract",
    postprocess: bool = False,
    interval_max_new_tokens: int = 12,
    response_max_new_tokens: int = 64,
    partner_temperature: float = 1.0,
    partner_structured: bool = True,
    partner_max_new_tokens: int = 256,
    cache_dir: str | Path | None = None,
    generator: _AgentGenerator | None = None,
) -> list[SimulatedDialog]:
    """Seed every dialog with its first utterance and add `turns` turns: the checkpoint (through `backend`, with
    `renderer`) as the agent, `partner.chat(messages, max_new_tokens=, temperature=, [response_format=]) -> str`
    as the user. The dialogs advance together, one turn per round, so agent turns are batched."""
    if turns < 1:
        raise ValueError(f"dialog_turns={turns}: at least one turn must follow the seed")
    agent_context([], history)  # checks `history`
    gen = generator or _AgentGenerator(backend, Path(cache_dir) if cache_dir is not None else None)
    infer = TimerInference(
        gen, renderer, interval_max_new_tokens=interval_max_new_tokens, response_max_new_tokens=response_max_new_tokens
    )
    sims = [seed_dialog(d) for d in dialogs]
    for _ in tqdm(range(turns), desc="TimelyChat dialog-level turns", unit="turn"):
        active = [s for s in sims if s.complete]
        agent_due = [s for s in active if s.turns[-1].role == USER]
        user_due = [s for s in active if s.turns[-1].role == AGENT]
        if agent_due:
            _agent_step(
                infer, gen, agent_due, history=history, interval_reading=interval_reading, postprocess=postprocess
            )
        if user_due:
            _partner_step(
                partner,
                user_due,
                temperature=partner_temperature,
                structured=partner_structured,
                max_new_tokens=partner_max_new_tokens,
            )
    return sims


def judge_dialogs(
    judge: Any,
    sims: Sequence[SimulatedDialog],
    metrics: Sequence[str] = tuple(DIALOG_JUDGE_METRICS),
    *,
    max_new_tokens: int = 512,
    structured: bool = False,
) -> None:
    """Rate every completed dialog on each metric with `judge.chat(messages, max_new_tokens=, [response_format=])`;
    fills each dialog's `scores`, `judge_replies` (raw, or the error) and `judge_failed`."""
    extra = {"response_format": JUDGE_FORMAT} if structured else {}
    jobs = [(s, m) for s in sims if s.complete for m in metrics]

    def one(job) -> None:
        sim, metric = job
        try:
            reply = judge.chat(dialog_judge_messages(metric, sim.turns), max_new_tokens=max_new_tokens, **extra)
        except Exception as err:  # noqa: BLE001 - one failed judgement is counted, not fatal
            sim.scores[metric], sim.judge_failed[metric] = None, True
            sim.judge_replies[metric] = f"error: {type(err).__name__}: {err}"[:2000]
            return
        sim.scores[metric], sim.judge_failed[metric] = parse_dialog_score(reply), False
        sim.judge_replies[metric] = reply

    if jobs:
        workers = max(1, min(int(getattr(judge, "concurrency", 8)), len(jobs)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(tqdm(pool.map(one, jobs), total=len(jobs), desc="TimelyChat dialog-level judge", unit="rating"))


# ============================================================================================== the report


def partner_from_options(options, allow_insecure_key: bool = False) -> Any:
    """The simulated user the suite's `partner_url=` / `partner_model=` (/ `partner_api_key_env=`) name: an
    `OpenAIBackend` (its chat endpoint: the server applies the partner model's own chat template).
    `allow_insecure_key` is the recipe's `eval.allow_insecure_key` (a key over plain http to another host)."""
    if not (options.partner_url and options.partner_model):
        raise ValueError(
            "the dialog-level evaluation needs a simulated user: timelychat.partner_url= (an "
            "OpenAI-compatible /v1 URL) and timelychat.partner_model="
        )
    return chat_model(options.partner_url, options.partner_model, options.partner_api_key_env, allow_insecure_key)


def evaluate_dialog_level(
    backend,
    dialogs: Sequence,
    *,
    renderer: TimerRenderer,
    partner: Any,
    judge: Any = None,
    turns: int = 10,
    history: str = "zero",
    interval_reading: str = "extract",
    postprocess: bool = False,
    instant_max_minutes: float = 0.0,
    interval_max_new_tokens: int = 12,
    response_max_new_tokens: int = 64,
    partner_temperature: float = 1.0,
    partner_structured: bool = True,
    partner_max_new_tokens: int = 256,
    judge_max_new_tokens: int = 512,
    judge_structured: bool = False,
    cache_dir: str | Path | None = None,
) -> dict:
    """Simulate, judge and aggregate (module docstring); returns {"overall", "judge", "notes", "settings",
    "generation", "samples"}. Raises when no dialog completes (the first error says why)."""
    if not dialogs:
        raise ValueError("no dialogs to evaluate")
    gen = _AgentGenerator(backend, Path(cache_dir) if cache_dir is not None else None)
    sims = simulate_dialogs(
        backend,
        dialogs,
        renderer=renderer,
        partner=partner,
        turns=turns,
        history=history,
        interval_reading=interval_reading,
        postprocess=postprocess,
        interval_max_new_tokens=interval_max_new_tokens,
        response_max_new_tokens=response_max_new_tokens,
        partner_temperature=partner_temperature,
        partner_structured=partner_structured,
        partner_max_new_tokens=partner_max_new_tokens,
        generator=gen,
    )
    failed = [s for s in sims if not s.complete]
    if len(failed) == len(sims):
        raise RuntimeError(
            f"dialog-level evaluation: none of the {len(sims)} dialogs completed; first error "
            f"({failed[0].id}): {failed[0].error}"
        )
    metrics = tuple(DIALOG_JUDGE_METRICS)
    if judge is not None:
        judge_dialogs(judge, sims, metrics, max_new_tokens=judge_max_new_tokens, structured=judge_structured)
    overall = aggregate_dialogs(sims, metrics, instant_max_minutes=instant_max_minutes, judged=judge is not None)

    notes = []
    if failed:
        notes.append(
            f"{len(failed)} of {len(sims)} simulated dialogs stopped early (agent or partner failure) and "
            f"were not judged; first ({failed[0].id}): {failed[0].error[:300]}"
        )
    if judge is None:
        notes.append(
            "judge skipped: no LLM judge configured (timelychat.judge_url= and "
            "timelychat.judge_model=); only the agent's delay statistics are reported"
        )
    else:
        for metric in metrics:
            bad_read, bad_call = overall[f"dialog_{metric}_unparsed"], overall[f"dialog_{metric}_failed"]
            if bad_read or bad_call:
                notes.append(
                    f"judge, {metric}: {bad_read} unreadable and {bad_call} failed replies "
                    f"of {overall['dialogs_completed']}, left out of the mean (raw replies in the samples)"
                )
    if overall["dialog_intervals_unparsed"]:
        notes.append(
            f"{overall['dialog_intervals_unparsed']} of {overall['dialog_agent_turns']} agent intervals "
            "could not be read and were inserted as 0 minutes (the authors' convert_to_minutes gives 0 "
            "for an unreadable interval)"
        )
    if overall["dialog_partner_unstructured"]:
        notes.append(
            f"{overall['dialog_partner_unstructured']} of {overall['dialog_partner_turns']} partner replies "
            'were not the asked-for JSON {"answer": ...}; their text (or the answer cut off mid-string) '
            "was used"
        )
    if renderer.order != "time_first":
        notes.append(
            "order=utterance_first: each agent reply is written before its delay, so it is not conditioned on it"
        )
    resolve = getattr(backend, "resolve_sampling", None)
    settings = {
        "turns": turns,
        "history": history,
        "interval_reading": interval_reading,
        "postprocess": postprocess,
        "instant_max_minutes": instant_max_minutes,
        "special_tokens": renderer.special_tokens,
        "order": renderer.order,
        "interval_max_new_tokens": interval_max_new_tokens,
        "response_max_new_tokens": response_max_new_tokens,
        "agent_sampling": resolve() if resolve else None,
        "partner": getattr(partner, "model", None) or type(partner).__name__,
        "partner_temperature": partner_temperature,
        "partner_structured": partner_structured,
        "partner_max_new_tokens": partner_max_new_tokens,
        "judge": (getattr(judge, "model", None) or type(judge).__name__) if judge is not None else None,
        "judge_structured": judge_structured,
        "judge_max_new_tokens": judge_max_new_tokens,
        "protocol_differences": list(PROTOCOL_DIFFERENCES),
    }
    judge_summary = (
        None
        if judge is None
        else {
            m: {
                name: overall[f"dialog_{m}{suffix}"]
                for name, suffix in (
                    ("mean", ""),
                    ("mean_with_delay", "_with_delay"),
                    ("judged", "_judged"),
                    ("unparsed", "_unparsed"),
                    ("failed", "_failed"),
                )
            }
            for m in metrics
        }
    )
    return {
        "overall": overall,
        "judge": judge_summary,
        "notes": notes,
        "settings": settings,
        "generation": dict(gen.totals),
        "samples": [s.to_dict(instant_max_minutes) for s in sims],
    }
