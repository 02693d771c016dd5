"""Data: loaders and validation, the scenario registry, synthetic generators, and data prep for training.

- `records`: what every loader returns (`LoadResult`) and the `RecordError` that names a bad record.
- TicToc: `tictoc_layout` (what a usable record is: its checks, `TicTocSample`), `tictoc` (the release layouts'
  loaders: v1, annotated, in memory), `tictoc_pairs` (samples as preference-pair rows); `timelychat` (dialog
  loaders), `scenarios` (the paper's 76 scenarios), `timing` (the paper's interaction-time model), `synthetic`
  (embedded seeded data).
- `pairs` (offset-DPO pairs) and `timer_prep` (TIMER SFT dialogs) write a prepared folder; `prepared` finds and
  fills it for training; `commands` holds their command lines (`data_prep/tictoc.py`, `data_prep/timelychat.py`).
"""
