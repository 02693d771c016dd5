"""The data-prep commands: TicToc offset-DPO pairs and TIMER SFT dialogs, each from a recipe's `data` section.

    python data_prep/tictoc.py recipe=tiny out=/tmp/pairs data.synthetic_trajectories=60
    python data_prep/timelychat.py recipe=tiny-timer data.source=timelychat data.path=/data/timelychat

Each writes a prepared folder (`dataset/`, `manifest.json` with the data's fingerprint, `rejects.jsonl`) to
`out=`, else `data.prepared_dir`, else `<output_dir>/data/<pairs|dialogs>-<fingerprint>` (where training looks for
it), and prints the manifest's counts. The folder is written under its lock into a temporary sibling and renamed
into place; data already there is replaced (a folder with files but no manifest.json is refused). Bad input data
exits 1 with a hint on skipping bad records; a bad recipe or option, or data that is not there, exits 2.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from timealign.config.cli import DATA_HINT, Command, Invocation, run_command
from timealign.config.disk import NoSpaceLeft
from timealign.data.hub import check_release
from timealign.data.prepared import answer_generation, fingerprint_of, prepared_dir_for, write_prepared
from timealign.data.records import MissingData, RecordError

# Exceptions printed as one line instead of a traceback. Bad records: exit 1, with DATA_HINT (skip mode keeps the
# rest). Data that is not there: exit 2 without the hint, like a data.path that does not exist (skipping records
# cannot help). Only timealign's own MissingData: any other FileNotFoundError is an internal failure (a library's
# temporary file gone) and keeps its traceback instead of passing for bad data.
DATA_ERRORS: dict[type[BaseException], int] = {NoSpaceLeft: 2, RecordError: 1, MissingData: 2}


@dataclass
class PrepOptions:
    out: str | None = field(
        default=None,
        metadata={
            "help": "folder to write (dataset/, manifest.json, rejects.jsonl); default: data.prepared_dir, else "
            "<output_dir>/data/<pairs|dialogs>-<fingerprint> (where training looks). Data there is replaced"
        },
    )


PAIRS = Command(
    prog="python data_prep/tictoc.py",
    summary="Builds margin-weighted offset-DPO pairs from TicToc data (data.source=synthetic|v1|annotated|hub, "
    "data.path=FOLDER/FILE/HUB_ID) and saves them (datasets save_to_disk) with a manifest.",
    options=PrepOptions,
    reads_inputs=True,
    examples="examples:\n"
    "  python data_prep/tictoc.py recipe=tiny out=/tmp/pairs\n"
    "  python data_prep/tictoc.py recipe=llama8b data.source=v1 data.path=/data/tictoc-v1 "
    "data.on_error=skip",
)

DIALOGS = Command(
    prog="python data_prep/timelychat.py",
    summary="Loads and validates dialogs for TIMER-style SFT (data.source=synthetic|timelychat|dialogs|hub, "
    "data.path=FILE/FOLDER/HUB_ID) and saves them (datasets save_to_disk) with a manifest.",
    options=PrepOptions,
    task="sft",
    reads_inputs=True,
    examples="examples:\n"
    "  python data_prep/timelychat.py recipe=tiny-timer out=/tmp/dialogs timer.synthetic_dialogs=100\n"
    "  python data_prep/timelychat.py recipe=timer3b data.source=timelychat data.path=/data/timelychat",
)


def _prepare(invocation: Invocation, kind: str, keys: tuple[str, ...]) -> int:
    recipe = invocation.recipe
    check_release(recipe.data)  # data.source=hub: the release is here (or downloads now), before any work
    fingerprint = fingerprint_of(recipe, kind)
    out = invocation.options.out
    target = Path(out) if out else prepared_dir_for(recipe, fingerprint=fingerprint)
    info = write_prepared(
        kind,
        recipe.data,
        recipe.timer,
        target,
        fingerprint=fingerprint,
        replace=True,
        recipe_name=recipe.name,
        generation=answer_generation(recipe, kind),
    )
    print(json.dumps({**{k: info[k] for k in keys}, "fingerprint": fingerprint.sha256[:12]}, indent=2))
    print(f"wrote {target}")
    return 0


def _prepare_pairs(invocation: Invocation) -> int:
    return _prepare(invocation, "pairs", ("pairs", "splits", "rejects", "reject_reasons", "seconds"))


def _prepare_dialogs(invocation: Invocation) -> int:
    return _prepare(invocation, "dialogs", ("dialogs", "splits", "rejects", "reject_reasons", "seconds"))


def pairs_main(argv: list[str] | None = None) -> int:
    """`python data_prep/tictoc.py`: TicToc offset-DPO pairs; returns the exit code."""
    return run_command(PAIRS, argv, _prepare_pairs, errors=DATA_ERRORS, hint=DATA_HINT)


def dialogs_main(argv: list[str] | None = None) -> int:
    """`python data_prep/timelychat.py`: TIMER SFT dialogs; returns the exit code."""
    return run_command(DIALOGS, argv, _prepare_dialogs, errors=DATA_ERRORS, hint=DATA_HINT)
