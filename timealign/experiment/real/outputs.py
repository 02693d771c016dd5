"""A summary's files: real.json, real.md and real.png, noted in the folder's record as written."""

from __future__ import annotations

import json
from pathlib import Path

from timealign.experiment.real.claim import note_outputs
from timealign.experiment.real.markdown import markdown_report
from timealign.experiment.real.plots import write_plot


def write_outputs(summary: dict, out: Path) -> None:
    (out / "real.json").write_text(json.dumps(summary, indent=1))
    (out / "real.md").write_text(markdown_report(summary))
    write_plot(summary, out / "real.png")
    note_outputs(out)  # a rerun of the same command may replace them while they are as written
