"""A checkpoint's torch files, checked before anything loads them: torch's weights-only loader must accept each one.

Resume (`timealign.train.checkpoints`) and evaluation (`timealign.eval.runner`) make the same check, so a pickle that
is not weights (it would run code, or build objects other than tensors) is refused in one line by either.
"""

from __future__ import annotations

from pathlib import Path


def unsafe_torch_file(path: Path) -> str | None:
    """Why torch's weights-only loader refuses `path` (a pickle that would run code or build other objects), or
    None. transformers loads a checkpoint's torch files the same way; this says so in one line, before it."""
    import torch
    from transformers.trainer_pt_utils import safe_globals  # numpy's RNG state types, as the Trainer allows them

    try:
        with safe_globals():
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as err:  # noqa: BLE001 (UnpicklingError, RuntimeError, ...: any refusal is the answer)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"{path.name} is not a plain tensor file: torch's weights-only loader refuses it ({first[:200]})"
    return None


def unsafe_torch_files(folder: str | Path) -> str | None:
    """The first torch file of a checkpoint folder that torch's weights-only loader refuses (`unsafe_torch_file`),
    or None: what resume (`checkpoint_model_problem`) and evaluation (`timealign.eval.runner`) check before a
    checkpoint is loaded."""
    folder = Path(folder)
    for file in sorted([*folder.glob("*.bin"), *folder.glob("*.pt"), *folder.glob("*.pth")]):
        if file.name == "training_args.bin":  # the Trainer pickles its arguments there and never loads them back
            continue
        problem = unsafe_torch_file(file)
        if problem:
            return problem
    return None
