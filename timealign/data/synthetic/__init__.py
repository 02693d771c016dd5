"""Seeded synthetic data, embedded so the pipeline needs no download: same seed -> same records.

- TicToc-style tool-use trajectories with a learnable time rule (`generate_annotated`): scenario `templates`,
  timed by the paper's interaction model (`timealign.data.timing`), labelled and scored by `labels`, written in the
  annotated or v1 release `layouts`.
- TimelyChat-style dialogs about everyday events with typical durations (`generate_timelychat`, `dialogs`).

`python -m timealign.data.synthetic --help` writes either to files (`cli`).
"""

from timealign.data.synthetic.dialogs import EVENTS, Event, generate_timelychat
from timealign.data.synthetic.generator import generate_annotated
from timealign.data.synthetic.labels import DEFAULT_THRESHOLDS, SCORE_ORIENTATION, prefers_tool, simulate_score
from timealign.data.synthetic.layouts import V1_FILES, to_v1_layout, write_v1_layout
from timealign.data.synthetic.templates import FRESHNESS, TEMPLATES, Template, templates_for

__all__ = [
    "EVENTS",
    "Event",
    "generate_timelychat",
    "generate_annotated",
    "DEFAULT_THRESHOLDS",
    "SCORE_ORIENTATION",
    "prefers_tool",
    "simulate_score",
    "V1_FILES",
    "to_v1_layout",
    "write_v1_layout",
    "FRESHNESS",
    "TEMPLATES",
    "Template",
    "templates_for",
]
