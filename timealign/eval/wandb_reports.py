"""One W&B run per evaluation: `SUITE/metric` summaries (with `SUITE/metric_low` / `_high`, the bootstrap interval's
bounds) and a per-sample table per suite (`wandb=true`).

The run goes to the project training uses (`timealign.config.tracking.wandb_project`: WANDB_PROJECT, else
wandb.project) and joins the group of the training run that made the checkpoint (read from its wandb_run.json). Its
name says which checkpoint, suites, data and run (`eval:tiny:tictoc@v1-test-3f2a9c1b#002`,
`timealign.eval.data_identity.run_label`: no absolute paths, unique per evaluation) and its config holds each
suite's data identity (`data`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from timealign.config.tracking import training_run_of, wandb_entity, wandb_project
from timealign.eval.data_identity import run_label

logger = logging.getLogger("timealign.eval")


def log_reports_to_wandb(recipe, checkpoint: str, out: Path, max_rows: int = 1000) -> str:
    """One W&B run per evaluation: `SUITE/metric` summaries and a per-sample table per suite, from the suite reports
    in `out` (the run's folder, `<out>/runs/NNN`)."""
    import wandb

    trained = training_run_of(checkpoint)
    project = wandb_project(recipe)
    if trained is None:
        logger.info(
            "%s records no W&B training run (%s): the eval run is not grouped",
            checkpoint,
            "trained without W&B" if Path(str(checkpoint)).is_dir() else "not a local checkpoint",
        )
    elif trained.get("project") != project:
        logger.warning(
            "the training run of %s is in W&B project %r, this eval goes to %r (WANDB_PROJECT or "
            "wandb.project differ): its group %r is per project",
            checkpoint,
            trained.get("project"),
            project,
            trained.get("group"),
        )
    reports = {}
    for path in sorted(out.glob("*.json")):
        report = json.loads(path.read_text())
        if "overall" in report:
            reports[report.get("suite", path.stem)] = report
    data = {suite: report.get("data") for suite, report in reports.items() if report.get("data")}
    # Short (no absolute paths) and one per evaluation: the checkpoint folder, suites and data, the run number.
    name = run_label(checkpoint, list(reports), data, f"{out.parent.name}/{out.name}")
    run = wandb.init(
        project=project,
        entity=wandb_entity(recipe),
        job_type="eval",
        name=name,
        group=trained.get("group") if trained else None,
        tags=[
            *recipe.wandb.tags,
            f"recipe:{recipe.name}",
            *sorted({f"data:{d.get('source')}" for d in data.values()}),
        ],
        config={
            "checkpoint": str(checkpoint),
            "timealign": recipe.to_dict(),
            "training_run": trained,
            "data": data,
            "eval_run": f"{out.parent.name}/{out.name}",
        },
    )
    try:
        for suite, report in reports.items():
            metrics = {f"{suite}/{k}": v for k, v in report["overall"].items() if isinstance(v, (int, float))}
            for key, interval in ((report.get("intervals") or {}).get("metrics") or {}).items():
                if interval is not None:
                    metrics[f"{suite}/{key}_low"], metrics[f"{suite}/{key}_high"] = interval
            run.summary.update(metrics)
            run.log(metrics)
            rows = [r for r in report.get("samples", []) if isinstance(r, dict)][:max_rows]
            if rows:
                columns = sorted({k for r in rows for k in r})
                table = wandb.Table(
                    columns=columns,
                    data=[
                        [json.dumps(r.get(c)) if isinstance(r.get(c), (dict, list)) else r.get(c) for c in columns]
                        for r in rows
                    ],
                )
                run.log({f"{suite}/samples": table})
        return str(run.dir)
    finally:
        run.finish()
