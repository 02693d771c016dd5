"""TimelyChat turn-level evaluation (TimelyChat paper, Sec. 4.2 "Turn-level Evaluation", Sec. 6.2, Appendix B).

    python eval/run.py recipe=tiny-timer checkpoint=outputs/tiny-timer suites=timelychat \
        [timelychat.data=eval.jsonl] [timelychat.n=40] [timelychat.seed=12345] [timelychat.judge_url=http://...]

Two subtasks, each scored the paper's way, on a TIMER-trained checkpoint (the two-step inference of
`timealign.suites.timelychat.infer`, prompts from the `timealign.render.timer.TimerRenderer` the checkpoint was
trained with, read back from its saved recipe by `timealign.render.checkpoint`):

1. Response timing prediction. The model writes the interval before a turn (the prefix up to `<TIME>`); the written
   interval is read (below) and scored by `timealign.suites.timelychat.metrics.timing_metrics` (delayed-vs-instant
   precision, recall, F1, FPR; RMSLE; the `unparsed` policy for intervals that cannot be read).
   - Reading (`interval_reading`): TIMER writes the bare canonical interval, which the renderer reads strictly
     (`timealign.render.intervals.parse_minutes`); what it cannot read ("**20 minutes**", "The estimated time
     interval is: 20 minutes", the prose baselines answer in) is read with
     `timealign.render.intervals.extract_interval` under "extract" (default; counted in `timing_extracted` and
     flagged per sample), and left unparsed under "strict". The authors' script reads every answer leniently too
     (`utils.postprocess.convert_to_minutes`: the first number-and-unit anywhere; it reads "1 hour 30 minutes" as
     60 where we read 90, and scores a reply with no interval as 0 minutes, our default `unparsed=instant`).
   - Headline: the target-turn metrics (`target_precision`, `target_recall`, `target_f1`, `target_fpr`,
     `rmsle_target`), which are what the paper's turn-level evaluation and the authors' script score ("we assess
     each subtask on the target response") and so the numbers comparable with Table 2. The all-turn metrics keep
     their older names (`precision`, `recall`, `f1`, `fpr`, `rmsle`, also as `all_turns_*` in "overall") and are
     shown beside them.
   - Cases (`timing_turns`): "all" (default) predicts the interval before every turn t = 2..T of a dialog; context
     turns have the gold interval 0 minutes (instant), the target turn the dialog's `time_elapsed`. On data whose
     targets are all delayed, the instant class (and FPR) only exists through the context turns; the counts
     implied by Table 2 (precision, recall and FPR give about 5.4 instant cases per delayed one for every model,
     the average dialog context being 6.5 turns, Sec. 4.1) fit one case per context turn. "target" predicts only
     the interval before the target turn (then, on such data, every gold case is delayed and FPR is undefined:
     None). The target-turn metrics are the same under both.
   - Unparseable intervals are counted in `timing_unparsed` and listed in the samples with the text the model
     wrote. Cases whose generation *failed* (a backend error, `timing_failed`) are left out of every metric.

2. Time-conditioned response generation given the GOLD interval (Sec. 4.2: "a model generates a time-conditioned
   response given a dialog context and ground-truth time interval"): the prefix up to `<UTT>` with the target's gold
   interval; the reply is compared with `timely_response` by BLEU-2, ROUGE-L and (with `bertscore_model=`)
   BERTScore (`timealign.suites.timelychat.metrics`), after the authors' reply clean-up when `postprocess=true`
   (`timealign.suites.timelychat.postprocess`; the raw reply is kept in the sample as `response_raw`), and rated
   for naturalness and time-specificity by an LLM judge when one is configured (`timealign.suites.timelychat.judge`).
   A metric that cannot run is skipped with a note in the report.

Dialog-level evaluation (`timelychat.level=dialog` or `both`; Sec. 6.3): the checkpoint converses with a simulated
user (`partner_url=`, `partner_model=`) from each dialog's first utterance and an LLM judge rates every dialog
(`timealign.suites.timelychat.dialog`); its numbers join "overall" as `dialog*` keys, its report is `dialog_level`.

With the "utterance_first" ablation the reply cannot be conditioned on a given interval (the format has no place
for it); the report says so (`settings.response_conditioned_on_gold = false`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from timealign.render.checkpoint import CHECKPOINT_RECIPE, timer_renderer_for_checkpoint
from timealign.render.intervals import paper_interval_minutes, render_minutes
from timealign.render.timer import TimerRenderer, TimerTurn
from timealign.suites.timelychat.judge import JUDGE_METRICS, judge_responses
from timealign.suites.timelychat.metrics import (
    INTERVAL_READINGS,
    UNPARSED_POLICIES,
    bertscore,
    bleu2,
    is_delayed,
    read_intervals,
    rouge_l,
    sentence_bleu2,
    timing_metrics,
)
from timealign.suites.timelychat.postprocess import clean_reply

logger = logging.getLogger(__name__)


TIMING_TURNS = ("all", "target")


# ================================================================================================= the cases


@dataclass(frozen=True)
class TimingCase:
    dialog: int  # index into the dialogs
    turn: int  # the turn whose interval is predicted (1..T-1)
    context: tuple[TimerTurn, ...]
    speaker: str
    gold_minutes: float
    is_target: bool
    gold_text: str | None = None  # the gold interval as the data wrote it (None: a number, or a context turn's 0)


def timing_cases(dialogs: Sequence, timing_turns: str = "all", interval_reading: str = "extract") -> list[TimingCase]:
    """One case per predicted interval: every turn t = 2..T ("all") or the target turn only ("target").

    `dialogs` are `timealign.data.timelychat.TimerDialog`s; a case's context is the dialog up to the turn, with the
    intervals the dialog gives its turns (0 for TimelyChat context turns, as in training). Gold minutes are the
    dialog's; with `interval_reading="paper"` a gold interval the data wrote as text is read as the authors' script
    reads both sides (`paper_interval_minutes`: "1 hour 30 minutes" is 60), so gold and prediction agree in reading.
    """
    if timing_turns not in TIMING_TURNS:
        raise ValueError(f"timing_turns={timing_turns!r}; known: {', '.join(TIMING_TURNS)}")
    cases = []
    for i, dialog in enumerate(dialogs):
        turns = dialog.turns()
        texts = getattr(dialog, "elapsed_texts", None) or [None] * len(turns)
        first = 1 if timing_turns == "all" else len(turns) - 1
        for t in range(first, len(turns)):
            gold = turns[t].minutes
            if interval_reading == "paper" and texts[t] is not None:
                gold = paper_interval_minutes(texts[t])
            cases.append(
                TimingCase(i, t, tuple(turns[:t]), turns[t].speaker, gold, t == len(turns) - 1, gold_text=texts[t])
            )
    return cases


# ==================================================================================== the checkpoint's renderer


def backend_checkpoint(backend) -> str | None:
    """The folder the backend's model came from, where it can be told (for the checkpoint's saved recipe)."""
    for attr in ("checkpoint", "model_path", "path", "_tokenizer_source"):
        value = getattr(backend, attr, None)
        if isinstance(value, (str, Path)) and Path(value, CHECKPOINT_RECIPE).is_file():
            return str(value)
    model = getattr(backend, "model", None)
    for value in (
        getattr(model, "name_or_path", None),
        getattr(getattr(model, "config", None), "_name_or_path", None),
    ):
        if isinstance(value, (str, Path)) and Path(value).is_dir():
            return str(value)
    return None


def timer_renderer_for_backend(
    backend, *, checkpoint: str | None = None, special_tokens: bool | None = None, order: str | None = None
) -> TimerRenderer:
    """The `TimerRenderer` the backend's checkpoint was trained with (`checkpoint`, else the folder the backend's
    model came from): `timealign.render.checkpoint.timer_renderer_for_checkpoint`, whose rules and errors apply;
    `special_tokens` / `order` override the saved settings."""
    return timer_renderer_for_checkpoint(
        backend.tokenizer, checkpoint or backend_checkpoint(backend), special_tokens=special_tokens, order=order
    )


# ================================================================================================ generation


class _CachedGenerator:
    """`generate(prompts, max_new_tokens=, desc=)` through `cached_generate` (resume cache, per-sample failures).

    A failed prompt comes back as "" (so the TIMER readers see an empty, unparseable continuation) and is listed in
    `errors` (index in the call -> message) of the call; `calls` keeps every call's errors, in order.
    """

    def __init__(self, backend, cache_dir: Path | None):
        self.backend, self.cache_dir = backend, cache_dir
        self.calls: list[dict[int, str]] = []
        self.summaries: list[dict] = []

    def generate(self, prompts: list[str], *, max_new_tokens: int = 64, desc: str | None = None) -> list[str]:
        from timealign.backends.cache import cached_generate

        suite = "timelychat-interval" if "interval" in (desc or "") else "timelychat-response"
        gens = cached_generate(
            self.backend, prompts, suite=suite, cache_dir=self.cache_dir, max_new_tokens=max_new_tokens, desc=desc
        )
        self.calls.append(dict(gens.errors))
        self.summaries.append({"step": desc, **gens.summary()})
        return [o if o is not None else "" for o in gens.outputs]

    def failed_since(self, start: int) -> dict[int, str]:
        out: dict[int, str] = {}
        for errors in self.calls[start:]:
            for i, msg in errors.items():
                out.setdefault(i, msg)
        return out


# ================================================================================================ evaluation


@dataclass
class _Timing:
    """Step 1's outcome: the cases, what the model wrote for each, which generations failed, the metrics."""

    cases: list[TimingCase]
    predicted: list[tuple[str, float | None]]
    failed: dict[int, str]
    metrics: dict
    extracted: set[int]  # cases whose interval was read from prose (`extract_interval`), not strictly


@dataclass
class _Replies:
    """Step 2's outcome: one reply per dialog ("" where generation failed) and the metrics over the others."""

    replies: list[str]  # as scored (cleaned when postprocess=true)
    raw: list[str]  # as generated
    failed: dict[int, str]
    scored: list[int]  # dialogs whose reply was generated
    per_sample: dict[int, dict]  # dialog index -> its per-sample metric values
    bleu2: float | None = None
    rouge_l: float | None = None
    bertscore: float | None = None
    judged: dict | None = None


def _predict_timing(
    infer,
    gen: _CachedGenerator,
    dialogs: Sequence,
    notes: list[str],
    *,
    timing_turns: str,
    unparsed: str,
    instant_max_minutes: float,
    interval_reading: str = "extract",
) -> _Timing:
    """Subtask 1: the interval before each case's turn, scored against the gold interval."""
    cases = timing_cases(dialogs, timing_turns, interval_reading)
    if interval_reading == "paper" and any(c.is_target and c.gold_text is None for c in cases):
        notes.append(
            "interval_reading=paper: some gold intervals are given in minutes, not as the text the authors' script "
            "reads (a TIMER recipe's prepared dialogs keep minutes only); they are scored as given"
        )
    start = len(gen.calls)
    predicted = infer.predict_intervals([list(c.context) for c in cases], [c.speaker for c in cases])
    failed = gen.failed_since(start)
    predicted, extracted = read_intervals(predicted, interval_reading)  # extract | strict | paper (metrics.py)
    extracted -= set(failed)
    scored = [i for i in range(len(cases)) if i not in failed]
    metrics = timing_metrics(
        [cases[i].gold_minutes for i in scored],
        [predicted[i][1] for i in scored],
        unparsed=unparsed,
        instant_max_minutes=instant_max_minutes,
        targets=[cases[i].is_target for i in scored],
    )
    metrics["failed"] = len(failed)
    metrics["extracted"] = len(extracted)
    metrics["target_extracted"] = sum(cases[i].is_target for i in extracted)
    metrics["interval_reading"] = interval_reading
    if extracted:
        notes.append(
            f"{len(extracted)} predicted intervals were not bare intervals and were read from the text "
            "around them (interval_reading=extract; flagged `extracted` in the samples)"
        )
    if failed:
        notes.append(
            f"{len(failed)} interval generations failed (backend errors); they are left out of the "
            "timing metrics and listed in the samples"
        )
    if metrics["unparsed"]:
        how = {
            "instant": "scored as 0 minutes (predicted instant)",
            "wrong": "counted as misclassified and left out of RMSLE",
            "exclude": "left out of every timing metric",
        }[unparsed]
        notes.append(
            f"{metrics['unparsed']} of {len(scored)} predicted intervals could not be parsed: {how} "
            f"(unparsed={unparsed})"
        )
    if metrics["fpr"] is None:
        notes.append(
            "FPR is undefined: no instant (0-minute) gold cases"
            + (" (timing_turns=target on data whose targets are all delayed)" if timing_turns == "target" else "")
        )
    elif metrics["target_fpr"] is None and metrics["target_cases"]:
        notes.append(
            "target-turn FPR is undefined: every target turn's gold interval is delayed (the all-turn FPR "
            "comes from the context turns)"
        )
    return _Timing(cases, predicted, failed, metrics, extracted)


def _generate_replies(
    infer, gen: _CachedGenerator, dialogs: Sequence, notes: list[str], *, postprocess: bool = False
) -> _Replies:
    """Subtask 2: each dialog's reply given its gold interval, scored by BLEU-2 and ROUGE-L against the reference
    (after the authors' clean-up, `clean_reply`, when `postprocess`)."""
    start = len(gen.calls)
    raw = infer.respond(
        [d.context for d in dialogs], [d.target_speaker for d in dialogs], [d.target_minutes for d in dialogs]
    )
    failed = gen.failed_since(start)
    replies = [clean_reply(r) for r in raw] if postprocess else list(raw)
    if postprocess:
        changed = sum(a != b for a, b in zip(raw, replies))
        notes.append(
            f"replies cleaned the TimelyChat authors' way before scoring (postprocess=true): {changed} of "
            f"{len(raw)} changed"
        )
    scored = [i for i in range(len(dialogs)) if i not in failed]
    hyps = [replies[i] for i in scored]
    refs = [dialogs[i].utterances[-1] for i in scored]
    if failed:
        notes.append(f"{len(failed)} reply generations failed (backend errors); left out of the response metrics")
    rl, rl_per = rouge_l(hyps, refs)
    per_sample = {
        i: {"rouge_l": r, "bleu2_sentence": sentence_bleu2(h, ref)} for i, r, h, ref in zip(scored, rl_per, hyps, refs)
    }
    return _Replies(replies, list(raw), failed, scored, per_sample, bleu2=bleu2(hyps, refs), rouge_l=rl)


def _add_bertscore(
    result: _Replies,
    dialogs: Sequence,
    notes: list[str],
    *,
    model: str | None,
    num_layers: int | None,
    batch_size: int,
) -> None:
    """BERTScore of the generated replies, when a model is given and `bert_score` is installed (else a note)."""
    if not model:
        notes.append(
            "BERTScore skipped: no bertscore_model= given (the authors' setting: "
            "bertscore_model=roberta-large bertscore_num_layers=17; needs the bert_score package)"
        )
        return
    if not result.scored:
        notes.append("BERTScore skipped: no replies")
        return
    hyps = [result.replies[i] for i in result.scored]
    refs = [dialogs[i].utterances[-1] for i in result.scored]
    try:
        result.bertscore, per = bertscore(hyps, refs, model, num_layers=num_layers, batch_size=batch_size)
    except ImportError as err:
        notes.append(f"BERTScore skipped: {err}")
        return
    for i, value in zip(result.scored, per):
        result.per_sample[i]["bertscore"] = value


def _add_judgements(
    result: _Replies, dialogs: Sequence, notes: list[str], *, judge: Any, max_samples: int | None
) -> None:
    """Naturalness and time-specificity of the first `max_samples` generated replies, when a judge is configured."""
    if judge is None:
        notes.append(
            "naturalness / time-specificity skipped: no LLM judge configured (timelychat.judge_url= and "
            "timelychat.judge_model=, an OpenAI-compatible server)"
        )
        return
    chosen = result.scored[:max_samples] if max_samples is not None else result.scored
    if not chosen:
        return
    items = [
        {
            "context": dialogs[i].context,
            "elapsed": dialogs[i].target_minutes,
            "speaker": dialogs[i].target_speaker,
            "response": result.replies[i],
        }
        for i in chosen
    ]
    judged = judge_responses(judge, items)
    for metric in JUDGE_METRICS:
        for i, score, reply in zip(chosen, judged["scores"][metric], judged["replies"][metric]):
            result.per_sample[i][metric] = score
            result.per_sample[i][f"{metric}_judge_reply"] = reply
        bad = judged["unparsed"][metric] + judged["failed"][metric]
        if bad:
            notes.append(
                f"judge {metric}: {judged['unparsed'][metric]} unreadable and {judged['failed'][metric]} "
                f"failed judgements of {len(chosen)}, left out of the mean"
            )
    result.judged = judged


def _overall(dialogs: Sequence, timing: dict, replies: _Replies) -> dict:
    judged = replies.judged
    return {
        "dialogs": len(dialogs),
        "timing_cases": timing["cases"],
        "timing_delayed_gold": timing["delayed_gold"],
        "timing_instant_gold": timing["instant_gold"],
        "timing_unparsed": timing["unparsed"],
        "timing_failed": timing["failed"],
        "precision": timing["precision"],
        "recall": timing["recall"],
        "f1": timing["f1"],
        "fpr": timing["fpr"],
        "rmsle": timing["rmsle"],
        "rmsle_target": timing["rmsle_target"],
        "timing_extracted": timing["extracted"],
        "target_cases": timing["target_cases"],
        "target_delayed_gold": timing["target_delayed_gold"],
        "target_instant_gold": timing["target_instant_gold"],
        "target_unparsed": timing["target_unparsed"],
        "target_precision": timing["target_precision"],
        "target_recall": timing["target_recall"],
        "target_f1": timing["target_f1"],
        "target_fpr": timing["target_fpr"],
        **{f"all_turns_{k}": timing[k] for k in ("precision", "recall", "f1", "fpr", "rmsle")},
        "responses": len(replies.scored),
        "bleu2": replies.bleu2,
        "rouge_l": replies.rouge_l,
        "bertscore": replies.bertscore,
        "naturalness": judged["mean"]["naturalness"] if judged else None,
        "time_specificity": judged["mean"]["time_specificity"] if judged else None,
    }


def _samples(
    dialogs: Sequence, timing: _Timing, replies: _Replies, *, conditioned: bool, instant_max_minutes: float
) -> list[dict]:
    """One record per dialog: its reply and metric values, and the timing cases of its turns."""
    by_dialog: dict[int, list[dict]] = {}
    for k, (case, (text, minutes)) in enumerate(zip(timing.cases, timing.predicted)):
        record = {
            "turn": case.turn,
            "speaker": case.speaker,
            "gold_minutes": case.gold_minutes,
            **({"gold_text": case.gold_text} if case.gold_text is not None else {}),
            "interval_text": text,
            "pred_minutes": minutes,
            "parsed": minutes is not None,
            "extracted": k in timing.extracted,
            "is_target": case.is_target,
            "gold_delayed": is_delayed(case.gold_minutes, instant_max_minutes),
            "pred_delayed": None if minutes is None else is_delayed(minutes, instant_max_minutes),
        }
        if k in timing.failed:
            record["error"] = timing.failed[k]
        by_dialog.setdefault(case.dialog, []).append(record)
    samples = []
    for i, d in enumerate(dialogs):
        sample = {
            "id": d.id,
            "target_speaker": d.target_speaker,
            "gold_minutes": d.target_minutes,
            "gold_interval": render_minutes(d.target_minutes),
            "reference": d.utterances[-1],
            "response": replies.replies[i],
            "response_conditioned_on": d.target_minutes if conditioned else None,
            **replies.per_sample.get(i, {}),
            "timing": by_dialog.get(i, []),
        }
        if replies.raw[i] != replies.replies[i]:
            sample["response_raw"] = replies.raw[i]
        if i in replies.failed:
            sample["error"] = replies.failed[i]
        samples.append(sample)
    return samples


def evaluate_timelychat(
    backend,
    dialogs: Sequence,
    *,
    renderer: TimerRenderer | None = None,
    timing_turns: str = "all",
    unparsed: str = "instant",
    instant_max_minutes: float = 0.0,
    interval_reading: str = "extract",
    postprocess: bool = False,
    interval_max_new_tokens: int = 12,
    response_max_new_tokens: int = 64,
    cache_dir: str | Path | None = None,
    bertscore_model: str | None = None,
    bertscore_num_layers: int | None = None,
    bertscore_batch_size: int = 32,
    judge: Any = None,
    judge_max_samples: int | None = None,
) -> dict:
    """Score a TIMER checkpoint's backend on TimerDialogs; returns {"overall", "timing", "samples", "notes", ...}.

    `renderer` defaults to the one the backend's checkpoint was trained with (`timer_renderer_for_backend`).
    """
    from timealign.suites.timelychat.infer import TimerInference

    if not dialogs:
        raise ValueError("no dialogs to evaluate")
    if unparsed not in UNPARSED_POLICIES:
        raise ValueError(f"unparsed={unparsed!r}; known: {', '.join(UNPARSED_POLICIES)}")
    if interval_reading not in INTERVAL_READINGS:
        raise ValueError(f"interval_reading={interval_reading!r}; known: {', '.join(INTERVAL_READINGS)}")
    renderer = renderer or timer_renderer_for_backend(backend)
    gen = _CachedGenerator(backend, Path(cache_dir) if cache_dir is not None else None)
    infer = TimerInference(
        gen, renderer, interval_max_new_tokens=interval_max_new_tokens, response_max_new_tokens=response_max_new_tokens
    )
    notes: list[str] = []

    timing = _predict_timing(
        infer,
        gen,
        dialogs,
        notes,
        timing_turns=timing_turns,
        unparsed=unparsed,
        instant_max_minutes=instant_max_minutes,
        interval_reading=interval_reading,
    )
    conditioned = renderer.order == "time_first"
    if not conditioned:
        notes.append(
            "order=utterance_first: replies cannot be conditioned on the gold interval (the format has no "
            "place for it before the utterance)"
        )
    replies = _generate_replies(infer, gen, dialogs, notes, postprocess=postprocess)
    _add_bertscore(
        replies,
        dialogs,
        notes,
        model=bertscore_model,
        num_layers=bertscore_num_layers,
        batch_size=bertscore_batch_size,
    )
    _add_judgements(replies, dialogs, notes, judge=judge, max_samples=judge_max_samples)

    resolve = getattr(backend, "resolve_sampling", None)
    judged = replies.judged
    return {
        "overall": _overall(dialogs, timing.metrics, replies),
        "timing": timing.metrics,
        "judge": judged and {k: judged[k] for k in ("mean", "unparsed", "failed")},
        "notes": notes,
        "settings": {
            "timing_turns": timing_turns,
            "unparsed": unparsed,
            "instant_max_minutes": instant_max_minutes,
            "interval_reading": interval_reading,
            "postprocess": postprocess,
            "special_tokens": renderer.special_tokens,
            "order": renderer.order,
            "response_conditioned_on_gold": conditioned,
            "interval_max_new_tokens": interval_max_new_tokens,
            "response_max_new_tokens": response_max_new_tokens,
            "backend": getattr(backend, "name", type(backend).__name__),
            "sampling": resolve() if resolve else None,
            "bertscore_model": bertscore_model,
            "bertscore_num_layers": bertscore_num_layers,
            "judge": getattr(judge, "model", None) or (type(judge).__name__ if judge is not None else None),
        },
        "generation": gen.summaries,
        "samples": _samples(
            dialogs, timing, replies, conditioned=conditioned, instant_max_minutes=instant_max_minutes
        ),
    }
