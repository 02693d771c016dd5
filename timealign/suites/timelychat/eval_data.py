"""Which dialogs the TimelyChat suite scores: a TimelyChat-layout file or folder (a seeded, stratified sample of
`n`), `n` held-out synthetic dialogs, or a TIMER recipe's own held-out split; each with its data identity
(`timealign.data.identity`), and a note when the scored dialogs overlap the ones trained on.
"""

from __future__ import annotations

import logging

from timealign.config import RecipeError

logger = logging.getLogger(__name__)

SYNTHETIC = "synthetic"  # timelychat.data=synthetic: n held-out synthetic dialogs (never the training stream)


def load_eval_dialogs(data: str | None = None, n: int | None = None, seed: int = 12345) -> list:
    """Dialogs from a TimelyChat-layout (or dialog-layout) JSON/JSONL file or folder, or (no data, or "synthetic")
    `n` held-out synthetic ones (`timealign.data.synthetic.dialogs`, split "heldout": never the training stream,
    `seed`). `n` of a file: a seeded sample
    stratified by delayed / instant target (`timealign.data.sampling`)."""
    return load_eval_dialogs_with_identity(data, n, seed)[0]


def load_eval_dialogs_with_identity(
    data: str | None = None, n: int | None = None, seed: int = 12345
) -> tuple[list, dict]:
    """`load_eval_dialogs` and the identity of what it read (`timealign.data.identity`)."""
    from timealign.data.identity import files_identity, generated_identity
    from timealign.data.sampling import sample_dialogs
    from timealign.data.timelychat import TimerDialog, load_files, timelychat_dialog

    if data and data != SYNTHETIC:
        dialogs = load_files(data).dialogs
        rows, info = sample_dialogs([d.to_row() for d in dialogs], n, seed)
        texts = {d.id: d.elapsed_texts for d in dialogs}  # ids are unique in one load; rows keep minutes only
        sampled = [TimerDialog.from_row(r) for r in rows]
        for dialog in sampled:
            dialog.elapsed_texts = texts.get(dialog.id)
        return (
            sampled,
            files_identity("timelychat.data", data, rows, None, **info, from_recipe=False),
        )
    from timealign.data.synthetic.dialogs import generate_timelychat

    n = 40 if n is None else n
    dialogs = [
        timelychat_dialog(r, "synthetic[heldout]", i, split="heldout")
        for i, r in enumerate(generate_timelychat(n, seed=seed, split="heldout"))
    ]
    identity = generated_identity(
        "synthetic heldout dialogs", {"n": n, "seed": seed}, [d.to_row() for d in dialogs], split="heldout"
    )
    identity["from_recipe"] = False
    return dialogs, identity


def _dialog_key(dialog) -> tuple:
    return tuple(dialog.speakers), tuple(dialog.utterances)


def recipe_eval_dialogs(recipe, n: int | None) -> tuple[list, dict, list[str]]:
    """A TIMER (sft) recipe's held-out dialogs: `data.eval_split` of its prepared data (prepared first if needed, as
    training did), `n` of them a seeded stratified sample; plus the identity and the notes (dialogs that are also in
    the training split: scores on them measure recall, not generalization)."""
    from timealign.data.identity import prepared_identity
    from timealign.data.prepared import ensure_prepared
    from timealign.data.sampling import sample_dialogs
    from timealign.data.timelychat import TimerDialog
    from timealign.data.timer_prep import load_timer_prepared

    folder = ensure_prepared(recipe, kind="dialogs")
    data = load_timer_prepared(folder)
    split = recipe.data.eval_split
    if split not in data:
        raise RecipeError(
            f"the TimelyChat suite scores data.eval_split={split!r} of the recipe's data "
            f"(data.source={recipe.data.source} data.path={recipe.data.path}), which has no such split "
            f"(has: {', '.join(data)}); set data.eval_split to one of those (data.eval_split="
            f"{recipe.data.train_split} scores the training dialogs), or timelychat.data=FILE"
        )
    rows, info = sample_dialogs(data[split].to_list(), n, recipe.data.seed)
    identity = prepared_identity(recipe.data, folder, "dialogs", split, rows, info)
    identity["from_recipe"] = True
    dialogs = [TimerDialog.from_row(r) for r in rows]
    notes = overlap_notes(dialogs, data, recipe.data.train_split, split)
    return dialogs, identity, notes


def overlap_notes(dialogs: list, data, train_split: str, split: str | None) -> list[str]:
    """A note (logged as a warning) when evaluated dialogs are also training dialogs (same turns)."""
    from timealign.data.timelychat import TimerDialog

    if train_split not in data:
        return []
    trained = {_dialog_key(TimerDialog.from_row(r)) for r in data[train_split].to_list()}
    seen = [d.id for d in dialogs if _dialog_key(d) in trained]
    if not seen:
        return []
    note = (
        f"{len(seen)} of {len(dialogs)} evaluated dialogs are in the training split {train_split!r} (e.g. "
        f"{seen[0]}): their scores measure what was trained on, not generalization"
    )
    logger.warning(note)
    return [note]
