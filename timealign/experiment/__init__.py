"""Does the pipeline teach time? `make experiment` (`python -m timealign.experiment`).

Two controlled experiments on CPU, with the embedded tiny model and synthetic data, each scored on held-out data by
the same evaluator users run on real checkpoints (`timealign.eval.runner.evaluate`):

1. Offset-DPO and the tool-call decision (TicToc, recipe `experiment-dpo`). The base is `tiny-agent-blind`: the
   random tiny model after a warm-up that teaches both actions (call the tool again, answer directly) with a coin
   flip that ignores time. Offset-DPO then trains on the 7 train-split scenarios and is scored (normalized alignment
   rate, NAR) on the 7 held-out scenarios. Each synthetic tool states how often its data changes (the only way a
   model without world knowledge can tell a held-out scenario's sensitivity), the reply carries the elapsed-time
   badge (`data.elapsed`), and half the train tools are given another sensitivity
   (`data.synthetic_sensitivity_swap`) so the scenario itself stops predicting it. Arms:
     offset         delta = |S - 1.5|, timestamps on (the method)
     no_timestamps  the same, trained and evaluated without timestamps: the control. It sees everything but time,
                    so anything it learns beyond chance is a shortcut; the train split is label-balanced per scenario
                    (`data.balance_train_labels`), so no label prior can help it either
     delta0         plain DPO (offset_scale = 0) on the same pairs: the offset's ablation
2. TIMER SFT and response timing (TimelyChat, recipe `experiment-timer`): the random tiny model, SFT on synthetic
   dialogs, scored on held-out synthetic dialogs (delay F1 and FPR with delayed = positive class, RMSLE in minutes).
   Arms: timer (lambda = 1, special tokens), lambda0 (L_time switched off), no_special_tokens (plain-text markers):
   the TIMER paper's Table 5 ablations.

Writes `<out>/summary.json` (the numbers), `<out>/report.md` (tables, targets, plots), `<out>/nar.png`,
`<out>/timing.png`, and every arm's evaluator report under `<out>/eval/`. Models go to `<out>/models/`.
"""
