"""The TimelyChat LLM judge: naturalness and time-specificity of a reply, rated 1-5 (TimelyChat paper, App. B.3).

Each reply is rated with the paper's turn-level prompt, criteria and steps (`judge_messages`) through any object with
`chat(messages) -> str` (an `OpenAIBackend` built from the suite's `judge_url=` / `judge_model=`, or `ctx.judge`).
The score is read from the judge's reply by `parse_judge_score`; a reply whose score cannot be read is counted
(`unparsed`) and left out of the mean (the authors' script scores a failed judgement as 1).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Sequence

from timealign.render.intervals import render_minutes
from timealign.render.timer import TimerTurn

__all__ = ["JUDGE_METRICS", "judge_messages", "parse_judge_score", "judge_responses"]

# Appendix B.3, "Turn-level Prompt" and "Evaluation Criteria and Steps" (the paper's wording; its "on potential
# response" is read as "one potential response").
JUDGE_TEMPLATE = """You will be given a conversation between two individuals via messaging, along with the elapsed \
time since the last utterance. You will then be given one potential response for the next turn.

Your task is to rate the response on one metric. Please make sure you read and understand these instructions \
carefully.

Evaluation Criteria:
{metric} (1-5): {criteria}

Evaluation Steps:
{steps}"""

JUDGE_METRICS: dict[str, dict[str, str]] = {
    "naturalness": {
        "metric": "Naturalness",
        "criteria": "the extent to which the response reads naturally given the dialog context.",
        "steps": (
            "1. Assess the flow and coherence of the response in the conversation: Consider how seamlessly the "
            "response connects with the previous message.\n"
            "2. Evaluate the tone and style compatibility: Determine if the response's tone and style match those of "
            "the previous messages.\n"
            "3. Rate on a scale from 1 to 5, where 1 indicates the response is unnatural or inappropriate, and 5 "
            "indicates a perfectly natural continuation of the conversation."
        ),
    },
    "time_specificity": {
        "metric": "Time-specificity",
        "criteria": (
            "the extent to which the response ONLY makes sense when the specified time has passed, contrary "
            "to a time-agnostic response that makes sense regardless of time."
        ),
        "steps": (
            "1. Read the provided conversation and take note of the elapsed time since the previous message.\n"
            "2. Consider the context of the conversation, focusing on how the passage of time might affect the "
            "relevance or appropriateness of the response.\n"
            "3. Evaluate whether the potential response provided is time-specific. That is, determine if the response "
            "directly relates to or is clearly influenced by the elapsed time between the last utterance and the "
            "response.\n"
            "4. Rate on a scale from 1 to 5, where 1 indicates the response is completely time-agnostic and "
            "unaffected by the passage of time, and 5 indicates the response is entirely time-specific; it only "
            "makes sense because of the amount of time that has passed since the previous message."
        ),
    },
}

# The paper does not print how the dialog is handed to the judge; this part is ours. The dialog uses the layout of
# the paper's own generation prompts (Appendix B.1: "### Dialog context ###", "speaker: utterance"); the authors'
# judge answered in a structured {score, explanation} form, asked for here as JSON.
JUDGE_INPUT = """### Dialog context ###
{context}

### Elapsed time since the last utterance ###
{elapsed}

### Potential response ###
{response}

Rate the potential response on {metric} (1-5). Answer with a JSON object only: \
{{"score": <an integer from 1 to 5>, "explanation": "<one or two sentences>"}}"""


def judge_messages(
    metric: str,
    context: Sequence[tuple[str, str]] | Sequence[TimerTurn],
    elapsed: str | float,
    speaker: str,
    response: str,
) -> list[dict]:
    """The judge's chat messages for one reply: the paper's prompt (system) and the dialog (user).

    context: (speaker, utterance) pairs or TimerTurns; elapsed: the gold interval (a phrase, or minutes rendered with
    `render_minutes`); speaker / response: the reply being rated.
    """
    if metric not in JUDGE_METRICS:
        raise ValueError(f"unknown judge metric {metric!r}; known: {', '.join(JUDGE_METRICS)}")
    rubric = JUDGE_METRICS[metric]
    pairs = [(t.speaker, t.utterance) if isinstance(t, TimerTurn) else (t[0], t[1]) for t in context]
    elapsed_text = elapsed if isinstance(elapsed, str) else render_minutes(elapsed)
    system = JUDGE_TEMPLATE.format(**rubric)
    user = JUDGE_INPUT.format(
        context="\n".join(f"{s}: {u}" for s, u in pairs),
        elapsed=elapsed_text,
        response=f"{speaker}: {response}",
        metric=rubric["metric"],
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_JSON_SCORE = re.compile(r"\{[^{}]*\}", re.DOTALL)
_LABELLED = re.compile(
    r"(?:score|rating|naturalness|time[- ]specificity)\W{0,6}(?:is|of|=)?\W{0,6}" + _NUM + r"(?:\s*(?:/|out of)\s*5)?",
    re.IGNORECASE,
)
_OUT_OF_5 = re.compile(_NUM + r"\s*(?:/|out of)\s*5\b", re.IGNORECASE)
_BARE = re.compile(r"^\W*" + _NUM + r"\W*$")
_SCALE = re.compile(r"\(?\b1\s*(?:-|\u2013|to)\s*5\b\)?", re.IGNORECASE)  # "(1-5)", "1 to 5": the scale, not a score


def _in_range(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number) or not 1 <= number <= 5:
        return None
    return int(number) if number == int(number) else number


def parse_judge_score(text: str | None) -> float | int | None:
    """The 1-5 score in a judge's reply, or None when there is no single readable score in range.

    Read in this order: a JSON object's `score`; a labelled score ("Score: 4", "**Naturalness:** 5", "rating of
    3/5"); "4/5" or "4 out of 5"; a reply that is only a number. The scale itself ("(1-5)", "1 to 5") is not a
    score. Several different labelled scores, or a number outside 1-5, give None.
    """
    if not text or not text.strip():
        return None
    for blob in _JSON_SCORE.findall(text):
        try:
            data = json.loads(blob)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "score" in data:
            return _in_range(data["score"])
    text = _SCALE.sub(" ", text)
    for pattern in (_LABELLED, _OUT_OF_5):
        found = set(pattern.findall(text))
        if found:
            values = {_in_range(v) for v in found}
            return values.pop() if len(values) == 1 else None
    bare = _BARE.match(text)
    return _in_range(bare.group(1)) if bare else None


def judge_responses(judge: Any, items: Sequence[dict], metrics: Sequence[str] = tuple(JUDGE_METRICS)) -> dict:
    """Rate every item with `judge.chat(messages) -> str` on each metric.

    items: {"context": [(speaker, utterance) | TimerTurn], "elapsed": phrase or minutes, "speaker", "response"}.
    Returns {"scores": {metric: [score or None per item]}, "replies": {metric: [raw reply or error]}, "mean": {metric:
    mean of the readable scores or None}, "unparsed": {metric: n}, "failed": {metric: n}}. A call that raises is
    counted as failed (its message kept), not retried here (the backend retries transient errors itself).
    """
    out: dict[str, dict] = {"scores": {}, "replies": {}, "mean": {}, "unparsed": {}, "failed": {}}
    for metric in metrics:
        scores, replies, failed = [], [], 0
        for item in items:
            messages = judge_messages(metric, item["context"], item["elapsed"], item["speaker"], item["response"])
            try:
                reply = judge.chat(messages)
                if not isinstance(reply, str):  # a dict-like chat reply
                    reply = reply["choices"][0]["message"]["content"] if isinstance(reply, dict) else str(reply)
            except Exception as err:  # noqa: BLE001 - one failed judgement must not stop the report
                failed += 1
                scores.append(None)
                replies.append(f"error: {type(err).__name__}: {err}"[:2000])
                continue
            scores.append(parse_judge_score(reply))
            replies.append(reply)
        readable = [s for s in scores if s is not None]
        out["scores"][metric] = scores
        out["replies"][metric] = replies
        out["mean"][metric] = sum(readable) / len(readable) if readable else None
        out["failed"][metric] = failed
        out["unparsed"][metric] = len(scores) - len(readable) - failed
    return out


def chat_model(url: str, model: str, api_key_env: str | None, allow_insecure_key: bool = False) -> Any:
    """A chat model behind an OpenAI-compatible /v1 URL (the judge, the simulated user): an `OpenAIBackend` whose
    chat endpoint applies the served model's own template. `api_key_env` None: the backend's default variable;
    `allow_insecure_key` is the recipe's `eval.allow_insecure_key` (a key over plain http to another host)."""
    from timealign.backends.openai import OpenAIBackend

    kwargs = {"model": model, "allow_insecure_key": allow_insecure_key}
    if api_key_env:
        kwargs["api_key_env"] = api_key_env
    return OpenAIBackend(url, **kwargs)
