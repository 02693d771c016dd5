"""One W&B run per evaluation: `SUITE/metric` summaries and a per-sample table per suite (`wandb=true`)."""

from __future__ import annotations

import json
from pathlib import Path


def log_reports_to_wandb(recipe, checkpoint: str, out: Path, max_rows: int = 1000) -> str:
    """One W&B run per evaluation: `SUITE/metric` summaries and a per-sample table per suite."""
    import wandb

    run = wandb.init(project=recipe.wandb.project, entity=recipe.wandb.entity, job_type="eval",
                     name=f"eval-{Path(str(checkpoint)).name}", tags=[*recipe.wandb.tags, f"recipe:{recipe.name}"],
                     config={"checkpoint": str(checkpoint), "timealign": recipe.to_dict()})
    try:
        for path in sorted(out.glob("*.json")):
            report = json.loads(path.read_text())
            if "overall" not in report:
                continue
            suite = report.get("suite", path.stem)
            metrics = {f"{suite}/{k}": v for k, v in report["overall"].items() if isinstance(v, (int, float))}
            run.summary.update(metrics)
            run.log(metrics)
            rows = [r for r in report.get("samples", []) if isinstance(r, dict)][:max_rows]
            if rows:
                columns = sorted({k for r in rows for k in r})
                table = wandb.Table(columns=columns,
                                    data=[[json.dumps(r.get(c)) if isinstance(r.get(c), (dict, list)) else r.get(c)
                                           for c in columns] for r in rows])
                run.log({f"{suite}/samples": table})
        return str(run.dir)
    finally:
        run.finish()
