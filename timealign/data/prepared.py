"""The prepared-data folder: where data prep writes and training/evaluation read (`data.prepared_dir`).

`ensure_prepared(recipe)` runs the recipe's data prep once, on the main process, when the folder holds no
prepared data yet; every process then reads the saved dataset. DPO recipes get TicToc pairs
(`timealign.data.pairs`), SFT recipes TIMER dialogs (`timealign.data.timer_prep`).
"""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"


def prepared_dir_for(recipe) -> Path:
    """`data.prepared_dir`, else `<output_dir>/data`."""
    return Path(recipe.data.prepared_dir or Path(recipe.resolved_output_dir()) / "data")


def ensure_prepared(recipe, kind: str | None = None) -> Path:
    """Run data prep on the main process if needed; every process then reads the saved dataset.

    `kind`: "pairs" (TicToc offset-DPO pairs) or "dialogs" (TIMER SFT dialogs); default: from `recipe.task`.
    """
    from accelerate import PartialState

    state = PartialState()
    path = prepared_dir_for(recipe)
    if state.is_main_process and not (path / MANIFEST).exists():
        kind = kind or ("dialogs" if recipe.task == "sft" else "pairs")
        if kind == "dialogs":
            from timealign.data.timer_prep import prepare_timer_data

            logger.info("preparing %s dialogs into %s", recipe.data.source, path)
            prepare_timer_data(recipe.data, recipe.timer, path)
        else:
            from timealign.data.pairs import prepare

            logger.info("preparing %s data into %s", recipe.data.source, path)
            prepare(recipe.data, path)
    state.wait_for_everyone()
    return path
