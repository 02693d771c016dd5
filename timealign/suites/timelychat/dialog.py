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

Modules: the prompts (`dialog_prompts`), the simulation (`dialog_simulation`); the judge, the aggregation and the
report here. What is not the authors' setting is listed in `PROTOCOL_DIFFERENCES` (in every report's settings).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from timealign.render.timer import TimerRenderer
from timealign.suites.timelychat.dialog_prompts import (
    DIALOG_JUDGE_INPUT,
    DIALOG_JUDGE_METRICS,
    DIALOG_JUDGE_TEMPLATE,
    JUDGE_FORMAT,
    PROTOCOL_DIFFERENCES,
)
from timealign.suites.timelychat.dialog_simulation import (
    AGENT,
    USER,
    AgentGenerator,
    DialogTurn,
    SimulatedDialog,
    delay_text,
    simulate_dialogs,
)
from timealign.suites.timelychat.judge import chat_model, parse_judge_score
from timealign.suites.timelychat.metrics import is_delayed

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
    gen = AgentGenerator(backend, Path(cache_dir) if cache_dir is not None else None)
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
