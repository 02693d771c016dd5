"""Checkpoint evaluation entry point (`eval/run.py` is the thin script).

    python eval/run.py checkpoint=outputs/tiny [suites=tictoc] [out=results/tiny] [key=value ...]
    python eval/run.py recipe=tiny [checkpoint=...] [key=value ...]

Without recipe=, the checkpoint's saved recipe (timealign_recipe.yaml) is the recipe: it is scored on the data it was
trained for; recipe= and overrides still win, and how the evaluated data differs from the training data is logged
and written in each report (`timealign.eval.data_identity`). Every report names its data (`"data"`: source, path,
split, sample count, fingerprint; `timealign.data.identity`). `checkpoint` defaults to the recipe's model (the base
model). Each run writes `<out>/runs/NNN/<suite>.json` and
`report.md` (kept: a rerun never overwrites them), then copies them to `<out>/<suite>.json` and `<out>/report.md` and
points `<out>/latest` at the run (`timealign.eval.runs`). Every report carries bootstrap intervals of its metrics
(`eval.bootstrap`, `eval.confidence`; `timealign.eval.bootstrap`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from timealign.config import RecipeError
from timealign.config.cli import Command, Invocation, run_command
from timealign.config.schema import opt
from timealign.config.validate import check_data_path, check_model_reference
from timealign.eval.data_identity import recipe_from_checkpoint
from timealign.eval.lock import out_lock

logger = logging.getLogger("timealign.eval")

SUMMARY = """Scores a checkpoint (full model folder or LoRA adapter folder; default: the recipe's base model) with the
same prompt rendering as training. Without recipe=, checkpoint=DIR is scored with the recipe it was trained with
(DIR/timealign_recipe.yaml: its data source, path, held-out split, protocol and render settings); recipe=NAME or
key=value overrides change that, and every difference from the training data is logged and written in the report.
Every report names its data (source, path, split, samples, fingerprint). eval.max_samples=N scores a seeded sample
stratified by label, the same rows for every checkpoint (and live_eval.max_samples=N's). Writes <out>/<suite>.json
and <out>/report.md; every run is also kept in
<out>/runs/NNN/ (<out>/latest: the newest). Each metric gets a bootstrap interval (eval.bootstrap resamples,
eval.confidence level; eval.bootstrap=0: none), in the JSON's "intervals" block and in report.md.

Generation engine: eval.backend=hf|vllm|openai|chat (default: the recipe's); vllm: eval.tensor_parallel_size,
eval.max_model_len, eval.enforce_eager; openai: eval.base_url, eval.served_model, eval.api_key_env.
eval.backend=clock scores no model but the elapsed-time rule (a tool call when the last tool result is older than
eval.clock_seconds, or there is none) on the recipe's TicToc samples, written to <output_dir>/eval-clock-1800s;
every TicToc report of a model also carries the rule's NAR on the same samples. Sampling:
eval.temperature/top_p/top_k/min_p (default: greedy; with eval.reasoning=true, Qwen3's 0.6/0.95/20/0). Finished
samples are cached in <out>/generations/ and a rerun with the same out= resumes (eval.cache=false: off).
Failed generations are counted in each report; above eval.max_failed_share of a suite the run fails (exit 1, not
published). One evaluation per out= at a time (<out>/.eval.lock). out= must be empty, new or an evaluation's own
folder: one holding other files (a report.md of your own) is refused, nothing in it changed."""


@dataclass
class EvalOptions:
    checkpoint: str | None = opt(
        None,
        "model or adapter folder, hub id, or a local name: tiny, tiny-agent, smol (default: the recipe's "
        "model.name_or_path)",
    )
    suites: str | None = opt(
        None,
        "comma-separated suites to run (see the SUITE.* options below for the list; "
        "default: tictoc for a dpo recipe, timelychat for an sft one)",
    )
    out: str | None = opt(None, "where the reports go (default: <checkpoint>/eval, or <output_dir>/eval-base)")
    timestamps: bool | None = opt(None, "render with or without timestamps (default: the recipe's data.timestamps)")
    prompt_mode: str = opt(
        "none", "none | reminder | rules: the TicToc paper's system-prompt strategies (Sec. 3.4, Fig. 12)"
    )
    family: str | None = opt(
        None,
        "tool-call syntax and the paper protocol's template: tiny | qwen | llama3 | "
        "mistral | deepseek_r1 | api (eval.backend=chat) (default: detected from the chat "
        "template; api for the chat backend)",
    )
    wandb: bool = opt(False, "log suite metrics and per-sample tables to a W&B run (project: wandb.project)")


def suite_namespaces() -> dict[str, tuple[type, str]]:
    """`SUITE.key=value` options of every registered suite that has options."""
    from timealign.suites.registry import available_suites

    return {
        name: (suite.options, suite.description)
        for name, suite in available_suites().items()
        if getattr(suite, "options", None) is not None
    }


COMMAND = Command(
    prog="python eval/run.py",
    summary=SUMMARY,
    options=EvalOptions,
    recipe="required",
    namespaces=suite_namespaces,
    recipe_from=recipe_from_checkpoint,
    examples="    python eval/run.py recipe=tiny checkpoint=outputs/tiny suites=tictoc,timepuzzles timepuzzles.n=200",
)


def make_backend(recipe, checkpoint: str):
    """The recipe's `eval.backend` (hf | vllm | openai | chat) for `checkpoint` (`timealign.backends.factory`)."""
    from timealign.backends.factory import make_backend as build

    dtype = recipe.eval.dtype or (recipe.model.dtype if recipe.model.dtype != "bfloat16" else "auto")
    return build(recipe.eval, checkpoint, dtype=dtype, trust_remote_code=recipe.model.trust_remote_code)


def evaluate(
    recipe,
    checkpoint: str,
    suites: list[str],
    out: Path,
    *,
    timestamps: bool | None = None,
    prompt_mode: str = "none",
    family: str | None = None,
    suite_options: dict[str, dict[str, str]] | None = None,
    data_differences: list[str] | None = None,
) -> dict[str, dict]:
    """Run each suite on one backend; write <out>/runs/NNN/<suite>.json and report.md, then publish them as
    <out>/<suite>.json, <out>/report.md and <out>/latest (`timealign.eval.runs`); return the reports.

    The generation cache stays at <out>/generations (shared by the runs: a killed run resumes from it).
    `data_differences`: how the recipe's data differs from the checkpoint's training data
    (`timealign.eval.data_identity.training_differences`), written into the reports that read the recipe's data."""
    from timealign.backends.cache import count_generations
    from timealign.config.written import record_evaluation
    from timealign.eval.bootstrap import attach_intervals, intervals_markdown
    from timealign.eval.failures import check_failures, failure_markdown, failure_summary
    from timealign.eval.runs import check_out_folder, new_run_dir, now, publish, write_run_info
    from timealign.suites.registry import EvalContext, get_suite, overall_markdown

    if recipe.eval.backend == "clock" and (
        str(checkpoint) != clock_label(recipe.eval.clock_seconds) or suites != ["tictoc"]
    ):
        # A caller other than `run` (an experiment) would have the rule scored in place of its model or suites.
        raise RecipeError(
            f"eval.backend=clock scores the elapsed-time rule on tictoc, not checkpoint={checkpoint} on "
            f"{','.join(suites)}: use eval.backend=hf, vllm, openai or chat to evaluate a model"
        )
    check_out_folder(out)  # before the lock file is made: a folder of the user's stays as it was
    with out_lock(out):  # one evaluation per out= at a time (timealign/eval/lock.py)
        selected = [get_suite(name) for name in suites]  # fail on a bad name or option before loading any model
        options = {suite.name: suite.parse_options((suite_options or {}).get(suite.name)) for suite in selected}
        backend = make_backend(recipe, checkpoint)
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        run_dir = new_run_dir(out)
        write_run_info(
            run_dir, checkpoint=str(checkpoint), suites=[s.name for s in selected], started=now(), complete=False
        )
        reports, sections = {}, []
        try:
            for suite in selected:
                ctx = EvalContext(
                    recipe=recipe,
                    out_dir=out,
                    prompt_mode=prompt_mode,
                    family=family,
                    timestamps=recipe.data.timestamps if timestamps is None else timestamps,
                    options=options[suite.name],
                    checkpoint=str(checkpoint),
                )
                with count_generations() as tally:
                    report = suite.run(backend, ctx)
                report["failures"] = failure_summary(suite.name, tally, recipe.eval.max_failed_share)
                report["suite"], report["checkpoint"] = suite.name, str(checkpoint)
                report["backend"] = {
                    "name": backend.name,
                    "model": getattr(backend, "fingerprint", None),
                    "sampling": backend.resolve_sampling() if hasattr(backend, "resolve_sampling") else None,
                }
                report["run"] = f"{run_dir.parent.name}/{run_dir.name}"
                name_data(report, suite.name, options[suite.name], data_differences)
                attach_intervals(
                    report, resamples=recipe.eval.bootstrap, confidence=recipe.eval.confidence, suite=suite.name
                )
                markdown = report.pop("markdown", None)
                title = f"{suite.name}: {checkpoint} on {report['data']['label']}"
                section = f"## {title}\n\n{markdown}" if markdown else overall_markdown(title, report)
                differs = report["data"].get("differs_from_training")
                if differs:
                    section += (
                        "\n**Not the data the checkpoint was trained on:**\n\n"
                        + "\n".join(f"- {line}" for line in differs)
                        + "\n"
                    )
                intervals = intervals_markdown(report)
                section += failure_markdown(report["failures"])
                sections.append(f"{section}\n{intervals}" if intervals else section)
                (run_dir / f"{suite.name}.json").write_text(json.dumps(report, indent=1))
                logger.info(
                    "%s on %s: %s",
                    suite.name,
                    report["data"]["label"],
                    {k: v for k, v in report["overall"].items() if not isinstance(v, dict)},
                )
                reports[suite.name] = report
        finally:
            close = getattr(backend, "close", None)
            if close is not None:
                close()
        (run_dir / "report.md").write_text("\n".join(sections))
        check_failures(reports, run_dir)  # above eval.max_failed_share: exit 1, the run not published
        write_run_info(
            run_dir, finished=now(), complete=True, data={name: report["data"] for name, report in reports.items()}
        )
        publish(out, run_dir, [*(f"{name}.json" for name in reports), "report.md"])
        record_evaluation(out)  # <output_dir>/eval belongs to that run's record (overwrite_output_dir may remove it)
        logger.info("run kept in %s (%s/latest)", run_dir, out)
        return reports


def name_data(report: dict, suite: str, options, differences: list[str] | None) -> None:
    """Every report names its data: a suite that reads the recipe's data says so itself (`report["data"]`); one that
    generates its items gets the identity of its generator settings. The differences from the training data are
    written into the reports on the recipe's data."""
    import dataclasses

    from timealign.data.identity import generated_identity

    if not isinstance(report.get("data"), dict):
        settings = dataclasses.asdict(options) if dataclasses.is_dataclass(options) else {}
        samples = [r for r in report.get("samples") or [] if isinstance(r, dict)]
        report["data"] = generated_identity(f"{suite} items", settings, samples)
        report["data"]["from_recipe"] = False
    if differences and report["data"].get("from_recipe"):
        report["data"]["differs_from_training"] = list(differences)


def nar_line(report: dict) -> str:
    """A TicToc report's NAR with its interval, and the elapsed-time rule's on the same samples when it has it."""
    from timealign.eval.bootstrap import fmt_interval

    def with_interval(block: dict) -> str:
        nar = block["overall"]["nar"]
        interval = ((block.get("intervals") or {}).get("metrics") or {}).get("nar")
        level = (block.get("intervals") or {}).get("confidence")
        shown = "n/a" if nar is None else f"{nar:.3f}"
        return shown + (f" ({100 * level:g}% interval {fmt_interval(interval)})" if interval is not None else "")

    line = f"NAR {with_interval(report)} on {report['overall']['n']} samples"
    rule = report.get("clock_rule")
    if rule:
        line += f"; the elapsed-time rule ({rule['seconds']:g} s) on the same samples: NAR {with_interval(rule)}"
    reference = report.get("volatility_rule")
    if reference:  # one threshold per sensitivity class, fit on the train split (suites/tictoc/volatility.py)
        line += f"; the volatility-aware reference (thresholds per class): NAR {with_interval(reference)}"
    return line


def clock_label(seconds: float) -> str:
    """What an `eval.backend=clock` run is named in its reports (their `checkpoint`) and its default out= folder."""
    return f"clock-{seconds:g}s"


def check_clock_run(recipe, suites: list[str], opts: EvalOptions) -> None:
    """`eval.backend=clock` scores the elapsed-time rule on TicToc samples, no model: refuse, in one line each, what
    would have it score something else or ignore a setting (a model, another suite, a rendering option)."""
    other = [s for s in suites if s != "tictoc"]
    if other:
        raise RecipeError(
            f"eval.backend=clock (the elapsed-time rule, no model) scores TicToc tool-call decisions only; suite "
            f"{', '.join(other)} has no such rule: run it with eval.backend=hf, vllm, openai or chat (suites=tictoc)"
        )
    if opts.checkpoint:
        raise RecipeError(
            f"eval.backend=clock evaluates no model, but checkpoint={opts.checkpoint} names one: leave checkpoint= "
            "out and name the data with recipe= (a model's TicToc report already carries the rule on its samples)"
        )
    if opts.timestamps is False or opts.prompt_mode != "none":
        raise RecipeError(
            "eval.backend=clock renders no prompt and always reads the messages' times: leave timestamps= and "
            "prompt_mode= out"
        )
    if opts.family not in (None, "api"):
        raise RecipeError(f"eval.backend=clock replies as chat messages (family api): leave family={opts.family} out")


def check_torch_files(checkpoint: str, key: str) -> None:
    """A local checkpoint's torch files pass the weights-only check resume makes (`timealign.train.checkpoints`):
    a pickle that is not weights is refused in one line, before anything loads it."""
    from timealign.backends.weights import unsafe_torch_files

    folder = Path(checkpoint).expanduser()
    problem = unsafe_torch_files(folder) if folder.is_dir() else None
    if problem:
        raise RecipeError(
            f"{key}={checkpoint}: {problem}. Give a model folder whose weights are tensors only (model.safetensors, "
            "or a pytorch_model.bin that torch.load(weights_only=True) reads)"
        )


def run(invocation: Invocation) -> int:
    from timealign.eval.data_identity import adopt_checkpoint_recipe, training_differences
    from timealign.eval.wandb_reports import log_reports_to_wandb
    from timealign.suites.registry import available_suites

    recipe, opts = invocation.recipe, invocation.options
    from_checkpoint = str(getattr(recipe, "source", "")).startswith("checkpoint ")
    if from_checkpoint:
        adopt_checkpoint_recipe(recipe, opts.checkpoint)
        logger.info(
            "evaluating with the recipe %s was trained with (%s; data.source=%s, data.path=%s, data.eval_split=%s)",
            opts.checkpoint,
            recipe.source,
            recipe.data.source,
            recipe.data.path,
            recipe.data.eval_split,
        )
    suites = [s for s in (opts.suites or ("timelychat" if recipe.task == "sft" else "tictoc")).split(",") if s]
    if not suites:
        raise RecipeError("suites= names no suite (e.g. suites=tictoc)")
    known = available_suites()
    unknown = [s for s in suites if s not in known]
    if unknown:
        raise RecipeError(f"unknown suite(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if recipe.eval.backend == "chat" and set(suites) - {"tictoc"}:
        # The chat backend sends message lists to an API; the other suites render prompt strings for a tokenizer.
        raise RecipeError(
            f"eval.backend=chat evaluates the tictoc suite only (API models through chat completions); "
            f"run {', '.join(s for s in suites if s != 'tictoc')} with eval.backend=openai, vllm or hf"
        )
    clock = recipe.eval.backend == "clock"
    if clock:
        check_clock_run(recipe, suites, opts)
        checkpoint = clock_label(recipe.eval.clock_seconds)
    else:
        checkpoint = opts.checkpoint or recipe.model.name_or_path
        # A missing local folder is said so here, not by the hub client ("Repo id must be in the form ...").
        check_model_reference(checkpoint, "checkpoint" if opts.checkpoint else "model.name_or_path")
        check_torch_files(checkpoint, "checkpoint" if opts.checkpoint else "model.name_or_path")
    if "tictoc" in suites or (recipe.task == "sft" and "timelychat" in suites):  # they read the recipe's data
        check_data_path(recipe)
    out = Path(
        opts.out
        or (
            Path(recipe.resolved_output_dir()) / f"eval-{checkpoint}"
            if clock
            else Path(checkpoint) / "eval"
            if Path(checkpoint).is_dir()
            else Path(recipe.resolved_output_dir()) / "eval-base"
        )
    )
    differences = training_differences(recipe, checkpoint, timestamps=opts.timestamps) if opts.checkpoint else []
    for line in differences:
        logger.warning("evaluated on other data than %s was trained on: %s", checkpoint, line)
    reports = evaluate(
        recipe,
        checkpoint,
        suites,
        out,
        timestamps=opts.timestamps,
        prompt_mode=opts.prompt_mode,
        family=opts.family,
        suite_options=invocation.namespace_raw,
        data_differences=differences,
    )
    run_dir = out / next(iter(reports.values()))["run"]
    if opts.wandb:
        wandb_dir = log_reports_to_wandb(recipe, checkpoint, run_dir)
        print(f"logged to W&B ({wandb_dir})")
    for name, report in reports.items():
        print(
            f"{name}: {report['data']['label']}"
            + (
                " (differs from the training data: see the report)"
                if report["data"].get("differs_from_training")
                else ""
            )
        )
        if name == "tictoc":
            print(f"  {nar_line(report)}")
    print(f"wrote {out}/report.md (this run: {run_dir})")
    return 0


def main(argv: list[str] | None = None) -> int:
    from timealign.backends.base import BackendError

    return run_command(COMMAND, argv, run, errors={BackendError: 1})


if __name__ == "__main__":  # python -m timealign.eval.runner
    raise SystemExit(main())
