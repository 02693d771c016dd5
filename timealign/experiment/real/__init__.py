"""Does timealign teach a real model time? `make experiment-real` (`python -m timealign.experiment.real`), issue 34.

A real pretrained model (`smol`: SmolLM2-135M-Instruct, real weights and tokenizer) is trained with offset-DPO on the
released TicToc v1 data and scored on held-out samples of the v1 test split (the paper's scenario split), against its
untrained self, a no-timestamp control, plain DPO, an elapsed-badge variant and the elapsed-time rule, all on the same
samples and by the same evaluator code. Everything runs through the commands users run (`timealign.train.dpo.run`,
`timealign.eval.runner.evaluate`) on recipe `smol`.

Arms (`arms=`):
- base: `smol` untrained, prompts with timestamps;
- method: offset-DPO with timestamps (the v1 release has no annotator scores: every pair's offset is the recipe's
  data.margin_prefer_* = 1.0);
- elapsed: the same with the elapsed badge (`data.elapsed=true`: the prompt says how old the last tool result is);
- control: offset-DPO without timestamps, trained and scored without them (what is learnt without time);
- plain: plain DPO with timestamps (`dpo.margin_mode=plain`);
- clock: the elapsed-time rule (`eval.backend=clock`, 1800 s), no model.

The budget (90 minutes on 2 CPU cores for the default options) decides the training size: each trained arm sees the
same `train_pairs` pairs (the label-balanced v1 train split, `data.balance_train_labels`, read in the same seeded
order), one optimizer step per `batch_pairs` of them, full fine-tuning in fp32, the reference on the fly (a
precomputed reference would first score all 182 balanced pairs, more than one epoch of the subsample costs). The
held-out evaluation is the whole test split by default (`eval_samples=0`, 685 samples) or a seeded sample of it,
stratified by label and spread over its scenarios, the same in every arm. The vLLM CPU engine computes on one core
here, so with `overlap` (the default on a CPU with two or more cores) each arm is evaluated in its own process on half
the cores while the next arm trains on the other half (`timealign.experiment.background`): the six arms on the
whole split took 86 minutes on 2 cores. The learning curve scores `curve_samples` stratified held-out samples
every `curve_every` steps (the evaluator's hf code on the model in memory, the same rows in all arms).
`call_forms` tells calls in the trained form from other call-shaped JSON.

TIMER (`timer=true`): recipe `smol-timer` (LoRA and the TIMER tokens' rows) on synthetic dialogs; delay F1 and RMSLE
before and after, on held-out synthetic dialogs and on the authors' TimelyChat sample (`timelychat_sample=`).

Seeds (`seeds=0,1,2`): a seed changes each trained arm's label-balanced train subset and its order, never the held-out
samples; the untrained arms are scored once and stand for every seed. real.json keeps every arm's per-sample
decisions, and `merge=` joins runs made apart (other seeds, other arms) into one report with the across-seed tables
and picture (`timealign.experiment.seeds`). `heldout=validation` scores on a validation split carved from the train
split (`data.validation_share`) instead of the test split, and `overrides=` changes the trained arms' recipe: the
two together choose a configuration without looking at the test split. `rescore=RUN` scores a finished run's models
again (another backend, batch size or device; no training) and counts, per arm and seed, the held-out samples on which
it decides as RUN did: a number checked with a second backend before it is believed.

Writes `<out>/real.json` (every number), `<out>/real.md` (the report, made from that JSON alone), `<out>/real.png`,
every evaluator report under `<out>/eval/` and the models under `<out>/models/`, into a folder that is new, empty or
this very command's own run (`claim`: its record `timealign_experiment.json`, a rerun goes on there); `rescore=` and
`merge=` first check that the runs scored the same data and prompts (`identity`: every arm's `scored_on` in real.json).
"""

from timealign.experiment.real.arms import ARMS, COMPARISONS, RECIPE, TIMER_RECIPE, TRAINED, Arm
from timealign.experiment.real.cli import COMMAND, main, run
from timealign.experiment.real.experiment import HELDOUT_SEED, TIMELYCHAT_SYNTHETIC, RealExperiment
from timealign.experiment.real.markdown import (
    across_seeds_markdown,
    before_after,
    markdown_report,
    rescore_markdown,
)
from timealign.experiment.real.merge import merge_into, run_in_parallel
from timealign.experiment.real.options import (
    DEFAULT_TIMELYCHAT,
    DEFAULT_V1,
    READABLE_CURVE_SAMPLES,
    REPO_ROOT,
    RealOptions,
    recipe_overrides,
    resolve_device,
    validate,
)
from timealign.experiment.real.outputs import write_outputs
from timealign.experiment.real.plots import write_plot, write_seeds_plot
from timealign.experiment.real.rescore import RESCORE_OWN, rescore_run
from timealign.experiment.real.summary import analyse, arm_numbers, call_forms
