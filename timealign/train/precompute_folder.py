"""TRL's reference precompute over more than one process, on datasets held in memory.

TRL (`DPOTrainer._precompute_ref_logps`) computes the reference log-probs on every rank; rank 0 then writes them with
`Dataset.map` to `dataset._get_cache_file_path(fingerprint)` and every rank reads that file back. The path lies beside
the dataset's Arrow files. timealign holds the prepared splits in memory (`timealign.data.records.
load_saved_datasets`: no map cache beside the sealed data), so the datasets TRL gets have no files, and `datasets`
then names a random file in a temporary folder of each process's own: the other ranks find nothing there
(FileNotFoundError) and the launch stops.

`SharedPrecomputeFolder`, with more than one process, first saves such a dataset (rank 0) to
`<output_dir>/reference_log_probs/<name>` and every rank reads it from there, so TRL's cache file lands in a folder all
ranks see (output_dir is shared across a job's nodes, as its checkpoints need). The folder is this run's (the output
folder's claim, `timealign.train.output_dir`, records it among the run's files) and is written anew at every launch,
so log-probs of an earlier launch are never read back. One process keeps TRL's temporary folder.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

logger = logging.getLogger("timealign.train.precompute_folder")

FOLDER = "reference_log_probs"


class SharedPrecomputeFolder:
    """Mixin for `trl.DPOTrainer` subclasses: the reference precompute's dataset and cache in a folder every rank
    reads (see the module docstring)."""

    def _precompute_ref_logps(self, dataset, name, batch_size):
        if self.accelerator.num_processes > 1 and not dataset.cache_files:
            dataset = self._dataset_in_shared_folder(dataset, name)
        return super()._precompute_ref_logps(dataset, name, batch_size)

    def _dataset_in_shared_folder(self, dataset, name):
        from datasets import load_from_disk

        folder = Path(self.args.output_dir) / FOLDER / name
        if self.accelerator.is_main_process:
            if folder.exists():
                shutil.rmtree(folder)  # an earlier launch's copy and TRL cache: computed again, never read back
            dataset.save_to_disk(str(folder))
            logger.info("reference precompute (%s): the dataset saved to %s for every rank to read", name, folder)
        self.accelerator.wait_for_everyone()
        return load_from_disk(str(folder))
