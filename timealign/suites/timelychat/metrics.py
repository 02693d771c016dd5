"""TimelyChat turn-level metrics (TimelyChat paper, Sec. 4.2 "Turn-level Evaluation", Sec. 6.2, Table 2 and 3).

Response timing prediction (`timing_metrics`, `rmsle`):
- Classification (Sec. 4.2: "whether the model correctly classifies the next turn as either delayed or instant"):
  a turn is *delayed* when its interval is > `instant_max_minutes` (default 0: instant = exactly 0 minutes),
  *instant* otherwise. Delayed is the positive class: Sec. 6.2 reads instruction-tuned models' "low precision ...
  and high FPR" as "over-predict[ing] the need for a delay", i.e. a false positive is a predicted delay on an
  instant turn. precision = TP/(TP+FP), recall = TP/(TP+FN), F1 = 2TP/(2TP+FP+FN) (= 2PR/(P+R)), FPR =
  FP/(FP+TN), as fractions in [0, 1] like Table 2. A metric whose denominator is 0 is None (undefined), and the
  four counts are always reported. (The authors' released scripts compute no precision/recall/F1/FPR.)
- RMSLE (Sec. 4.2: "root mean squared logarithmic error ... by converting each time interval into minutes"):
  sqrt(mean_i (ln(1 + pred_i) - ln(1 + gold_i))^2) with minutes, natural log and +1 (the paper states neither
  base nor offset; this is the standard RMSLE, e.g. sklearn's, and the authors' script uses numpy.log1p; the +1
  is what makes 0-minute intervals usable). `rmsle` is over the same cases as the classification.
- Target turn vs all turns. Sec. 4.2: "In turn-level evaluation, we assess each subtask on the target response",
  and the authors' turn-level script (sb-jang/timelychat, evaluate_turn-level.py) scores one prediction per
  dataset example, the interval before its target turn (gold `time_elapsed`), with `utils.metrics.rmsle`
  (numpy.log1p, natural log, sqrt of the mean). So the numbers comparable with Table 2 are the target-turn ones:
  `target_precision`, `target_recall`, `target_f1`, `target_fpr`, `rmsle_target` (with `target_tp` ... counts).
  The unprefixed keys (`precision`, `recall`, `f1`, `fpr`, `rmsle`) are over every scored case, i.e. with
  timing_turns=all also the context turns (gold 0 minutes); they stay under those names for older reports. The
  released script computes only RMSLE for timing; precision/recall/F1/FPR follow the paper's text. Target-turn FPR
  needs instant (0-minute) target turns in the data; on data whose targets are all delayed it is None.
- Unreadable predicted intervals (None: neither `parse_minutes` nor, when the suite reads leniently,
  `extract_interval` finds one) are counted in `unparsed`. How they enter the metrics is
  the `unparsed` policy:
    "instant" (default): scored as 0 minutes, i.e. predicted instant, in the classification and in RMSLE. This is
      what the agent does (the two-step inference replies instantly when it cannot read its own interval:
      `TimerInference.fallback_minutes`) and what the authors' script does (`utils.postprocess.convert_to_minutes`
      returns 0.0 when it finds no interval).
    "wrong": counted as misclassified (a delayed gold -> FN, an instant gold -> FP) and left out of RMSLE.
    "exclude": left out of every timing metric.

Time-conditioned response generation (scores x100 like Table 3):
- BLEU-2 (`bleu2`): corpus BLEU with n-grams up to 2, uniform weights, brevity penalty, sacrebleu's default 13a
  tokenizer, case-sensitive, no smoothing (`sacrebleu.metrics.BLEU(max_ngram_order=2, smooth_method="none")`). The
  paper only says "BLEU (Papineni et al., 2002)" and reports B-2; this is what the authors' script computes
  (torchmetrics `SacreBLEUScore(n_gram=2)`, the same sacrebleu definition). Per sample: `sentence_bleu2`,
  sacrebleu's sentence BLEU-2 (effective order, exp smoothing), for inspection only.
- ROUGE-L (`rouge_l`): the mean over samples of the ROUGE-L F-measure (`rouge_score`, `rougeL`, no stemming:
  lowercased alphanumeric tokens), as the authors' script (torchmetrics `ROUGEScore`, rougeL_fmeasure, same
  tokenization).
- BERTScore (`bertscore`, optional): mean F1 of `bert_score.score` with a model name or local path (the authors used
  the `evaluate` default for English: roberta-large, layer 17, no idf, no baseline rescaling) and `num_layers`
  (required for a model bert_score does not know).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from timealign.render.intervals import extract_interval, paper_interval_minutes
from timealign.suites.units import SampleUnits, mean_metric, rate

__all__ = [
    "UNPARSED_POLICIES",
    "is_delayed",
    "rmsle",
    "score_case",
    "timing_metrics",
    "bleu2",
    "bleu2_statistics",
    "bleu2_from_statistics",
    "sentence_bleu2",
    "rouge_l",
    "bertscore",
    "timelychat_units",
]

UNPARSED_POLICIES = ("instant", "wrong", "exclude")
# How a predicted interval's text becomes minutes: strict (the whole text one interval, `parse_minutes`), extract
# (also from prose and markdown, `extract_interval`), paper (the TimelyChat authors' `convert_to_minutes`, restated
# as `paper_interval_minutes`: the first quantity only, 0 where none, so nothing is ever unparsed).
INTERVAL_READINGS = ("extract", "strict", "paper")


def read_intervals(
    predicted: Sequence[tuple[str, float | None]], interval_reading: str
) -> tuple[list[tuple[str, float | None]], set[int]]:
    """(text, strict minutes or None) pairs read as `interval_reading` says; also the indices read from prose."""
    if interval_reading not in INTERVAL_READINGS:
        raise ValueError(f"interval_reading={interval_reading!r}; known: {', '.join(INTERVAL_READINGS)}")
    if interval_reading == "paper":
        return [(text, paper_interval_minutes(text)) for text, _ in predicted], set()
    extracted: set[int] = set()
    out = []
    for k, (text, minutes) in enumerate(predicted):
        if minutes is None and interval_reading == "extract":
            minutes = extract_interval(text)
            if minutes is not None:
                extracted.add(k)
        out.append((text, minutes))
    return out, extracted


# ================================================================================================ timing metrics


def is_delayed(minutes: float, instant_max_minutes: float) -> bool:
    """Delayed (the positive class) means longer than `instant_max_minutes`; instant otherwise."""
    return minutes > instant_max_minutes


def rmsle(gold: Sequence[float], pred: Sequence[float]) -> float | None:
    """sqrt(mean (ln(1 + pred) - ln(1 + gold))^2), intervals in minutes (module docstring); None for no pairs."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold intervals but {len(pred)} predictions")
    if not gold:
        return None
    for value in (*gold, *pred):
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"intervals must be finite minutes >= 0, got {value!r}")
    return math.sqrt(sum((math.log1p(p) - math.log1p(g)) ** 2 for g, p in zip(gold, pred)) / len(gold))


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def score_case(
    gold: float, pred: float | None, unparsed: str, instant_max_minutes: float
) -> tuple[str | None, tuple[float, float] | None]:
    """One case's confusion cell ("tp" | "fp" | "tn" | "fn", None when the `unparsed` policy leaves it out) and the
    (gold, pred) pair it adds to RMSLE (None when it adds none)."""
    gold_delayed = is_delayed(gold, instant_max_minutes)
    if pred is None:
        if unparsed == "exclude":
            return None, None
        if unparsed == "wrong":
            return ("fn" if gold_delayed else "fp"), None
        pred = 0.0  # "instant"
    pred_delayed = is_delayed(pred, instant_max_minutes)
    if gold_delayed:
        return ("tp" if pred_delayed else "fn"), (gold, pred)
    return ("fp" if pred_delayed else "tn"), (gold, pred)


def _classify(gold: Sequence[float], pred: Sequence[float | None], unparsed: str, instant_max_minutes: float) -> dict:
    """Confusion counts, unparsed count, and the (gold, pred) pairs RMSLE is over, under the `unparsed` policy."""
    counts = {"tp": 0, "fp": 0, "tn": 0, "fn": 0}
    pairs: list[tuple[float, float]] = []
    for g, p in zip(gold, pred):
        cell, pair = score_case(g, p, unparsed, instant_max_minutes)
        if cell is not None:
            counts[cell] += 1
        if pair is not None:
            pairs.append(pair)
    tp, fp, tn, fn = counts["tp"], counts["fp"], counts["tn"], counts["fn"]
    n_unparsed = sum(p is None for p in pred)
    return {
        "cases": len(gold),
        "delayed_gold": sum(is_delayed(g, instant_max_minutes) for g in gold),
        "instant_gold": sum(not is_delayed(g, instant_max_minutes) for g in gold),
        "unparsed": n_unparsed,
        "classified": tp + fp + tn + fn,
        "tp": tp,
        "fp": fp,
        "tn": tn,
        "fn": fn,
        "precision": _ratio(tp, tp + fp),
        "recall": _ratio(tp, tp + fn),
        "f1": _ratio(2 * tp, 2 * tp + fp + fn),
        "fpr": _ratio(fp, fp + tn),
        "rmsle": rmsle([g for g, _ in pairs], [p for _, p in pairs]),
        "rmsle_cases": len(pairs),
    }


# The target-turn numbers under the names the report gives them ("target_f1", ...); "rmsle_target" keeps its
# older name.
_TARGET_KEYS = {
    "cases": "target_cases",
    "delayed_gold": "target_delayed_gold",
    "instant_gold": "target_instant_gold",
    "unparsed": "target_unparsed",
    "tp": "target_tp",
    "fp": "target_fp",
    "tn": "target_tn",
    "fn": "target_fn",
    "precision": "target_precision",
    "recall": "target_recall",
    "f1": "target_f1",
    "fpr": "target_fpr",
    "rmsle": "rmsle_target",
    "rmsle_cases": "rmsle_target_cases",
}


def timing_metrics(
    gold: Sequence[float],
    pred: Sequence[float | None],
    *,
    unparsed: str = "instant",
    instant_max_minutes: float = 0.0,
    targets: Sequence[bool] | None = None,
) -> dict:
    """Delayed-vs-instant classification and RMSLE (module docstring, Sec. 4.2), over all cases and target turns.

    gold: gold minutes per case; pred: predicted minutes, None where the model's interval could not be read;
    unparsed: how an unreadable prediction is scored ("instant" | "wrong" | "exclude"); targets: which cases are
    target turns (default: none). Unprefixed keys (`f1`, `fpr`, `rmsle`, ...) are over every case; `target_*`
    keys and `rmsle_target` over the target turns only (the Table 2-comparable numbers).
    """
    if unparsed not in UNPARSED_POLICIES:
        raise ValueError(f"unparsed={unparsed!r}; known: {', '.join(UNPARSED_POLICIES)}")
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold intervals but {len(pred)} predictions")
    targets = list(targets) if targets is not None else [False] * len(gold)
    if len(targets) != len(gold):
        raise ValueError(f"{len(targets)} target flags for {len(gold)} cases")
    every = _classify(gold, pred, unparsed, instant_max_minutes)
    target = _classify(
        [g for g, t in zip(gold, targets) if t], [p for p, t in zip(pred, targets) if t], unparsed, instant_max_minutes
    )
    return {
        **every,
        "unparsed_rate": _ratio(every["unparsed"], len(gold)),
        **{name: target[key] for key, name in _TARGET_KEYS.items()},
        "unparsed_policy": unparsed,
        "instant_max_minutes": instant_max_minutes,
    }


# ============================================================================================== response metrics


def _need(module: str, pip_name: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"the TimelyChat response metrics need `{pip_name}`: pip install {pip_name}") from None


def bleu2(hypotheses: Sequence[str], references: Sequence[str]) -> float | None:
    """Corpus BLEU-2 (x100) with sacrebleu: n-grams 1-2, 13a tokenizer, no smoothing (module docstring)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        return None
    metrics = _need("sacrebleu.metrics", "sacrebleu")
    scorer = metrics.BLEU(max_ngram_order=2, smooth_method="none")
    return float(scorer.corpus_score(list(hypotheses), [list(references)]).score)


BLEU2_STATISTICS = ("sys_len", "ref_len", "correct_1", "correct_2", "total_1", "total_2")


def bleu2_statistics(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Each reply's BLEU-2 sufficient statistics (`BLEU2_STATISTICS`: lengths, matched and total 1- and 2-grams),
    read from sacrebleu's score of the reply alone; corpus BLEU-2 is `bleu2_from_statistics` of their sum."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metrics = _need("sacrebleu.metrics", "sacrebleu")
    scorer = metrics.BLEU(max_ngram_order=2, smooth_method="none")
    rows = []
    for hyp, ref in zip(hypotheses, references):
        one = scorer.corpus_score([hyp], [[ref]])
        rows.append([one.sys_len, one.ref_len, *one.counts, *one.totals])
    return np.asarray(rows, dtype=float).reshape(len(rows), len(BLEU2_STATISTICS))


def bleu2_from_statistics(stats: Sequence[float]) -> float | None:
    """Corpus BLEU-2 (x100) from summed `BLEU2_STATISTICS` (sacrebleu's `BLEU.compute_bleu`, as `bleu2` scores);
    None for no replies (sys_len and ref_len both 0)."""
    sys_len, ref_len, c1, c2, t1, t2 = (float(v) for v in stats)
    if sys_len == 0 and ref_len == 0:
        return None
    metrics = _need("sacrebleu.metrics", "sacrebleu")
    return float(
        metrics.BLEU.compute_bleu(
            correct=[c1, c2],
            total=[t1, t2],
            sys_len=int(sys_len),
            ref_len=int(ref_len),
            smooth_method="none",
            max_ngram_order=2,
        ).score
    )


def sentence_bleu2(hypothesis: str, reference: str) -> float:
    """Sentence-level BLEU-2 (x100; effective order, exp smoothing): per-sample inspection only."""
    metrics = _need("sacrebleu.metrics", "sacrebleu")
    return float(metrics.BLEU(max_ngram_order=2, effective_order=True).sentence_score(hypothesis, [reference]).score)


def rouge_l(
    hypotheses: Sequence[str], references: Sequence[str], *, use_stemmer: bool = False
) -> tuple[float | None, list[float]]:
    """(mean ROUGE-L F-measure x100, per-sample F-measures x100) with rouge_score's `rougeL`."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    scorer_mod = _need("rouge_score.rouge_scorer", "rouge-score")
    scorer = scorer_mod.RougeScorer(["rougeL"], use_stemmer=use_stemmer)
    per = [100.0 * scorer.score(ref, hyp)["rougeL"].fmeasure for hyp, ref in zip(hypotheses, references)]
    return (sum(per) / len(per) if per else None), per


def bertscore(
    hypotheses: Sequence[str],
    references: Sequence[str],
    model: str,
    *,
    num_layers: int | None = None,
    batch_size: int = 32,
    device: str | None = None,
    idf: bool = False,
) -> tuple[float, list[float]]:
    """(mean BERTScore F1 x100, per-sample F1 x100) with `bert_score.score`; raises ImportError if not installed."""
    try:
        from bert_score import score
    except ImportError:
        raise ImportError("BERTScore needs the `bert_score` package (pip install bert-score)") from None
    try:
        _, _, f1 = score(
            list(hypotheses),
            list(references),
            model_type=model,
            num_layers=num_layers,
            batch_size=batch_size,
            device=device,
            idf=idf,
            lang="en",
            verbose=False,
        )
    except KeyError:
        raise ValueError(
            f"bert_score does not know the layer to use for {model!r}: give bertscore_num_layers=N "
            "(roberta-large: 17, the authors' setting)"
        ) from None
    per = [100.0 * float(v) for v in f1.tolist()]
    return sum(per) / len(per), per


# ====================================================================================================== intervals

# The overall metrics the bootstrap intervals cover (timealign.eval.bootstrap): the all-turn and the target-turn
# timing metrics, and the response metrics over the scored replies.
_TIMING_INTERVALS = {
    "": ("precision", "recall", "f1", "fpr", "rmsle"),
    "target_": ("target_precision", "target_recall", "target_f1", "target_fpr", "rmsle_target"),
}


def _timing_metrics_of(prefix: str) -> dict:
    tp, fp, tn, fn, sq, n = (f"{prefix}{k}" for k in ("tp", "fp", "tn", "fn", "sq_log_error", "rmsle_cases"))
    precision, recall, f1, fpr, rmsle_key = _TIMING_INTERVALS[prefix]
    return {
        precision: lambda c: rate(c[tp], c[tp] + c[fp]),
        recall: lambda c: rate(c[tp], c[tp] + c[fn]),
        f1: lambda c: rate(2 * c[tp], 2 * c[tp] + c[fp] + c[fn]),
        fpr: lambda c: rate(c[fp], c[fp] + c[tn]),
        rmsle_key: lambda c: math.sqrt(c[sq] / c[n]) if c[n] else None,
    }


def timelychat_units(report: dict) -> SampleUnits | None:
    """The turn-level report's dialogs as bootstrap units (None for a dialog-level-only report: no timing cases).

    One unit per dialog (its sample record): the timing cases of a dialog's turns share its context, so they are
    drawn together (a cluster bootstrap), not case by case. A dialog's counts are its cases' confusion cells and
    squared log errors under the report's `unparsed` policy (`score_case`, what `timing_metrics` sums), all turns and
    target turn apart; failed cases (`error`) add nothing, as in the metrics. Its reply adds its BLEU-2 statistics,
    ROUGE-L and BERTScore values when it was generated (no dialog-level `error`). No strata.
    """
    if "timing" not in report:
        return None
    settings = report.get("settings") or {}
    unparsed, instant = settings.get("unparsed", "instant"), settings.get("instant_max_minutes", 0.0)
    samples = report.get("samples") or []
    names = [f"{p}{k}" for p in _TIMING_INTERVALS for k in ("tp", "fp", "tn", "fn", "sq_log_error", "rmsle_cases")]
    counts = {k: np.zeros(len(samples)) for k in names}
    scored = [i for i, s in enumerate(samples) if "error" not in s]
    for i, sample in enumerate(samples):
        for case in sample.get("timing") or []:
            if "error" in case:
                continue
            cell, pair = score_case(case["gold_minutes"], case["pred_minutes"], unparsed, instant)
            for prefix in ("", "target_") if case["is_target"] else ("",):
                if cell is not None:
                    counts[f"{prefix}{cell}"][i] += 1
                if pair is not None:
                    counts[f"{prefix}sq_log_error"][i] += (math.log1p(pair[1]) - math.log1p(pair[0])) ** 2
                    counts[f"{prefix}rmsle_cases"][i] += 1
    metrics = {**_timing_metrics_of(""), **_timing_metrics_of("target_")}
    if scored:
        counts["responses"] = np.zeros(len(samples))
        counts["responses"][scored] = 1
        stats = bleu2_statistics([samples[i]["response"] for i in scored], [samples[i]["reference"] for i in scored])
        for j, name in enumerate(BLEU2_STATISTICS):
            counts[f"bleu_{name}"] = np.zeros(len(samples))
            counts[f"bleu_{name}"][scored] = stats[:, j]
        metrics["bleu2"] = lambda c: bleu2_from_statistics([c[f"bleu_{k}"] for k in BLEU2_STATISTICS])
        for key in ("rouge_l", "bertscore"):
            if all(samples[i].get(key) is not None for i in scored):
                counts[key] = np.zeros(len(samples))
                counts[key][scored] = [samples[i][key] for i in scored]
                metrics[key] = mean_metric(key, "responses")
    return SampleUnits("dialog", tuple(str(s["id"]) for s in samples), ("all",) * len(samples), counts, metrics)
