"""The column-carrying collators around TRL's own collators: the extra column reaches the batch, the wrapped
collator never sees it, and bad or missing values fail with the column named."""

import pickle

import pytest
import torch
from trl.trainer.dpo_trainer import DataCollatorForPreference
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

from timealign.train.collators import OffsetPreferenceCollator, TokenTypesCollator


class Recording:
    """A collator that remembers the keys it was given, then defers to a real one."""

    def __init__(self, base):
        self.base = base
        self.seen: list[set[str]] = []

    def __call__(self, examples):
        self.seen += [set(ex) for ex in examples]
        return self.base(examples)


def preference_rows(margins):
    return [{"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4, 5], "margin": m} for m in margins]


def test_offsets_reach_the_batch_and_not_the_wrapped_collator():
    base = Recording(DataCollatorForPreference(pad_token_id=0))
    collator = OffsetPreferenceCollator(base)
    batch = collator(preference_rows([0.5, 1.5]))
    assert torch.equal(batch["margin"], torch.tensor([0.5, 1.5]))
    assert batch["input_ids"].shape[0] == 4  # chosen and rejected rows of both pairs
    assert base.seen and all("margin" not in keys for keys in base.seen)


@pytest.mark.parametrize(
    "margins, message", [([0.5, -1.0], "must be >= 0"), ([float("nan")], "NaN/inf"), (["high"], "must hold numbers")]
)
def test_bad_offsets_are_refused(margins, message):
    with pytest.raises(ValueError, match=message):
        OffsetPreferenceCollator(DataCollatorForPreference(pad_token_id=0))(preference_rows(margins))


def test_missing_column_names_it():
    rows = preference_rows([1.0, 1.0])
    del rows[1]["margin"]
    with pytest.raises(ValueError, match="ODPO offset column 'margin' is missing from 1 example"):
        OffsetPreferenceCollator(DataCollatorForPreference(pad_token_id=0))(rows)


def test_token_types_are_right_padded_to_the_batch_width():
    base = Recording(DataCollatorForLanguageModeling(pad_token_id=0))
    collator = TokenTypesCollator(base)
    rows = [
        {"input_ids": [5, 6, 7], "labels": [-100, 6, 7], "token_types": [0, 1, 2]},
        {"input_ids": [5], "labels": [5], "token_types": [2]},
    ]
    batch = collator(rows)
    assert batch["token_types"].tolist() == [[0, 1, 2], [2, 0, 0]]
    assert batch["token_types"].shape == batch["input_ids"].shape
    assert all("token_types" not in keys for keys in base.seen)
    with pytest.raises(ValueError, match="example 0: 2 token types for 3 input ids"):
        collator([dict(rows[0], token_types=[0, 1])])


def test_wrapper_reads_through_to_the_wrapped_collator_and_pickles():
    collator = TokenTypesCollator(DataCollatorForLanguageModeling(pad_token_id=7))
    assert collator.pad_token_id == 7  # attribute reads go to the TRL collator
    copy = pickle.loads(pickle.dumps(collator))  # DataLoader workers receive it pickled
    assert copy.pad_token_id == 7 and copy.column == "token_types"
