"""TimelyChat reply post-processing and metrics against the TimelyChat authors' own code (../shared/reference/
timelychat/utils: postprocess.py, metrics.py, sb-jang/timelychat at f717753), imported as they wrote it (their
metrics module's `evaluate` import gets a stand-in: only BERTScore uses it). Replies come from the real TimelyChat
sample and from run-on, tagged and marked-up variants of them, as models write them."""

from __future__ import annotations

import importlib.util
import json
import sys
import types

import pytest
from needs import shared_path

from timealign.suites.timelychat.metrics import bleu2, rmsle, rouge_l
from timealign.suites.timelychat.postprocess import clean_reply


def _load(name: str, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def theirs():
    utils = shared_path("reference", "timelychat", "utils")
    stand_in = types.ModuleType("evaluate")
    stand_in.load = lambda *a, **k: pytest.fail("BERTScore is not compared here")
    sys.modules.setdefault("evaluate", stand_in)
    return types.SimpleNamespace(
        postprocess=_load("timelychat_authors_postprocess", utils / "postprocess.py"),
        metrics=_load("timelychat_authors_metrics", utils / "metrics.py"),
    )


@pytest.fixture(scope="module")
def replies():
    records = [
        json.loads(line)
        for line in shared_path("data", "timelychat-sample", "eval.jsonl").read_text().splitlines()
        if line.strip()
    ]
    base = [r[k] for r in records for k in ("timely_response", "untimely_response")]
    base += [u for r in records for u in r["context"]]
    variants = []
    for k, text in enumerate(base):
        variants += [
            text,
            f"B: {text}",
            f"A: (20 minutes later) {text}",
            f"{text}\nA: Sure, see you then.",
            f"[laughs] (sighs) {text} -- ok",
            f"  {text}   <end>",
            f"{text} ... and then",
            f"B : {text}#x",
            f"(2 hours later) [B] {text} (smiles)",
            f"{text} ''quoted'' __",
            f"**{text}** == done",
        ]
        if k % 3 == 0:
            variants.append(f"{text.upper()} B: {text.lower()}")
    return variants


def test_reply_clean_up_equals_the_authors_postprocess_response(theirs, replies):
    assert len(replies) > 300
    different = [
        (r, clean_reply(r), theirs.postprocess.postprocess_response(r))
        for r in replies
        if clean_reply(r) != theirs.postprocess.postprocess_response(r)
    ]
    assert not different, different[:5]


def test_bleu2_rouge_l_and_rmsle_equal_the_authors_metrics(theirs, replies):
    preds = [clean_reply(r) for r in replies[::2]]
    refs = [clean_reply(r) for r in replies[1::2]][: len(preds)]
    preds = preds[: len(refs)]
    ours_bleu = bleu2(preds, refs)
    assert ours_bleu == pytest.approx(theirs.metrics.bleu(refs, preds), abs=1e-4)
    ours_rouge, _ = rouge_l(preds, refs)
    # Their ROUGEScore() also computes rougeLsum, which needs nltk's punkt data from the internet; they read only
    # rougeL_fmeasure, so their scorer is built with that key alone (the same rougeL computation).
    from torchmetrics.text import ROUGEScore

    full = theirs.metrics.ROUGEScore
    theirs.metrics.ROUGEScore = lambda: ROUGEScore(rouge_keys="rougeL")
    try:
        assert ours_rouge == pytest.approx(theirs.metrics.rouge(refs, preds), abs=1e-3)
    finally:
        theirs.metrics.ROUGEScore = full
    gold, pred = [0.0, 20.0, 120.0, 1440.0, 5.0], [0.0, 30.0, 60.0, 2880.0, 0.0]
    assert rmsle(gold, pred) == pytest.approx(float(theirs.metrics.rmsle(gold, pred)), abs=1e-12)
