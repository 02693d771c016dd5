"""Simulating TimelyChat dialogs for the dialog-level evaluation (`timealign.suites.timelychat.dialog`, protocol steps
1-4): seed a dialog with its first utterance, then alternate the checkpoint as the agent (two-step TIMER inference:
the delay, then the reply conditioned on it) and the simulated user (an OpenAI-compatible chat model). A failed
generation or partner call stops that dialog, kept with its error.
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
from timealign.suites.timelychat.dialog_prompts import PARTNER_FORMAT, SIMULATOR_PROMPT
from timealign.suites.timelychat.infer import TimerInference
from timealign.suites.timelychat.metrics import is_delayed
from timealign.suites.timelychat.postprocess import clean_reply

AGENT, USER = "agent", "user"
DIALOG_HISTORIES = ("zero", "predicted")


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


# ============================================================================================= simulation


class AgentGenerator:
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
    gen: AgentGenerator,
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
    generator: AgentGenerator | None = None,
) -> list[SimulatedDialog]:
    """Seed every dialog with its first utterance and add `turns` turns: the checkpoint (through `backend`, with
    `renderer`) as the agent, `partner.chat(messages, max_new_tokens=, temperature=, [response_format=]) -> str`
    as the user. The dialogs advance together, one turn per round, so agent turns are batched."""
    if turns < 1:
        raise ValueError(f"dialog_turns={turns}: at least one turn must follow the seed")
    agent_context([], history)  # checks `history`
    gen = generator or AgentGenerator(backend, Path(cache_dir) if cache_dir is not None else None)
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
