"""The one command-line style of every timealign entry point.

    python train/dpo.py recipe=llama8b training.learning_rate=1e-6 data.timestamps=false
    python train/dpo.py --config my/recipe.yaml lora.enabled=true
    python eval/run.py recipe=tiny checkpoint=outputs/tiny suites=tictoc,timepuzzles timepuzzles.n=200
    python data_prep/reasoning.py suite=tcp n=100 out=data/tcp.jsonl

An argument is `recipe=NAME`, `--config PATH` (a recipe YAML outside recipes/), `-h`/`--help`, or `key=value`:
- a key naming a field of the command's own options dataclass (`checkpoint=`, `out=`, `n=`) sets that option;
- `NAMESPACE.key=value` sets a field of a registered namespace (an eval suite's options: `timepuzzles.n=200`);
- any other dotted key overrides a recipe field (`data.seed=1`, `training.beta=0.05`).

Options are dataclasses with `metadata={"help": ...}` on each field (`timealign.config.options`), so `--help` is
generated from the same text that documents the code. Unknown keys fail with suggestions; a missing or wrong recipe
lists the recipes. Values out of range (`training.beta=0`), an unsafe `name` and, for commands that read them
(`reads_inputs`), a missing `data.path` or model folder fail here too (`timealign.config.validate`): exit 2, one
line, before any work.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable

from timealign.config.options import RecipeError, build_options, describe, unknown_key
from timealign.config.recipes import describe_fields, load_recipe, recipe_listing
from timealign.config.schema import Recipe
from timealign.config.validate import check_inputs

HELP_FLAGS = ("-h", "--help", "help")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATA_HINT = "(use data.on_error=skip to write bad records to rejects.jsonl and keep the rest)"


@dataclass
class Command:
    """What an entry point accepts; `--help` is generated from it."""

    prog: str  # how users call it, e.g. "[accelerate launch] train/dpo.py"
    summary: str  # what it does: the first paragraph of --help
    options: type | None = None  # dataclass of the command's own top-level keys
    recipe: str = "required"  # required | optional | none
    task: str | None = None  # recipes of this task only (dpo | sft); None: any
    namespaces: Callable[[], dict[str, tuple[type, str]]] | None = None  # prefix -> (options dataclass, description)
    examples: str = ""  # extra lines shown after the summary
    actions: dict[str, str] | None = None  # verb -> what it does; the first argument picks one (git-style)
    forward: bool = False  # keep recipe arguments as text in Invocation.forwarded (for commands that start others)
    reads_inputs: bool = False  # reads the recipe's data.path and model here: check they exist before it starts
    # Without recipe= / --config: the recipe file to load instead, found from the command's own options (eval/run.py:
    # the checkpoint's saved timealign_recipe.yaml), or None. Returns (path, how it was found, for recipe.source).
    recipe_from: Callable[[dict[str, str]], tuple[str, str] | None] | None = None


# How the running command was called when not as its script: "timealign dpo" under the `timealign` console command
# (timealign/cli.py sets it), so usage lines and errors name what the user typed.
_invoked_as: str | None = None
_SCRIPT = re.compile(r"^(\[accelerate launch\] )?(python )?(-m \S+|\S+\.py)")


@contextlib.contextmanager
def invoked_as(name: str):
    """Within this block commands show themselves as `name` ("timealign dpo") instead of their script."""
    global _invoked_as
    before, _invoked_as = _invoked_as, name
    try:
        yield
    finally:
        _invoked_as = before


def shown_prog(command: Command) -> str:
    """`command.prog`, its script part replaced by the console command when run as one.

    "[accelerate launch] train/dpo.py" reads "[accelerate launch -m] timealign dpo" (accelerate runs the module with
    `python -m`), "python data_prep/reasoning.py suite=tcp" reads "timealign prep reasoning suite=tcp"."""
    if _invoked_as is None:
        return command.prog

    def replace(match: re.Match) -> str:
        return ("[accelerate launch -m] " if match.group(1) else "") + _invoked_as

    return _SCRIPT.sub(replace, command.prog, count=1)


@dataclass
class Invocation:
    """A parsed command line."""

    recipe: Any = None  # timealign.config.schema.Recipe, or None when the command takes no recipe
    action: str | None = None  # the verb, for commands with `actions`
    options: Any = None  # an instance of Command.options
    namespaces: dict[str, Any] = field(default_factory=dict)  # prefix -> options instance (only those given)
    namespace_raw: dict[str, dict[str, str]] = field(default_factory=dict)  # prefix -> the key=value text given
    forwarded: list[str] = field(default_factory=list)  # with Command.forward: the arguments that are not options


def split_argv(argv: list[str]) -> tuple[str | None, str | None, dict[str, str]]:
    """(recipe name, --config path, {key: value}) from the arguments; anything else is an error."""
    recipe, config, pairs = None, None, {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--config":
            if not args:
                raise RecipeError("--config needs a path: --config my/recipe.yaml")
            config = args.pop(0)
            continue
        if arg.startswith("--config="):
            config = arg.split("=", 1)[1]
            continue
        if "=" not in arg or arg.startswith("-"):
            raise RecipeError(f"expected recipe=NAME, --config PATH or key=value, got {arg!r} (see --help)")
        key, value = arg.split("=", 1)
        key = key.lstrip("+")
        if key == "recipe":
            recipe = value
        else:
            pairs[key] = value
    return recipe, config, pairs


def parse(command: Command, argv: list[str]) -> Invocation:
    """Read `argv` into the recipe, the command's options and namespace options (raises RecipeError)."""
    action = None
    if command.actions:
        if not argv or argv[0] not in command.actions:
            got = f"got {argv[0]!r}" if argv else "got nothing"
            raise RecipeError(
                f"{shown_prog(command)} needs an action first, one of: {', '.join(command.actions)} ({got})"
            )
        action, argv = argv[0], argv[1:]
    name, config, pairs = split_argv(argv)
    own = {f.name for f in dataclasses.fields(command.options)} if command.options else set()
    spaces = command.namespaces() if command.namespaces else {}
    option_raw, space_raw, recipe_raw = {}, {}, {}
    for key, value in pairs.items():
        head = key.split(".", 1)[0]
        if head in own:
            option_raw[key] = value
        elif head in spaces and "." in key:
            space_raw.setdefault(head, {})[key.split(".", 1)[1]] = value
        else:
            recipe_raw[key] = value
    invocation = Invocation(namespace_raw=space_raw, action=action)
    saved = command.recipe_from(option_raw) if command.recipe_from and not (name or config) else None
    if command.forward:
        invocation.forwarded = [a for a in argv if a.split("=", 1)[0].lstrip("+").split(".", 1)[0] not in own]
    elif command.recipe == "none":
        if name or config:
            raise RecipeError(f"{shown_prog(command)} takes no recipe")
        if recipe_raw:
            key = next(iter(recipe_raw))
            raise unknown_key("", key, sorted(own) + [f"{s}.<key>" for s in spaces])
    elif name or config or saved or command.recipe == "required":
        sections = {f.name for f in dataclasses.fields(Recipe)}
        for key in recipe_raw:
            if key.split(".", 1)[0] not in sections:  # neither an option nor a recipe field: list both
                raise unknown_key("", key, sorted(own | sections | {f"{s}.<key>" for s in spaces}))
        invocation.recipe = load_recipe(name, recipe_raw, task=command.task, config=saved[0] if saved else config)
        if saved:
            invocation.recipe.source = saved[1]
        if command.reads_inputs:
            check_inputs(invocation.recipe)
    elif recipe_raw:
        raise RecipeError(f"recipe overrides ({', '.join(recipe_raw)}) need recipe=NAME or --config PATH")
    if command.options:
        invocation.options = build_options(command.options, option_raw)
    for prefix, raw in space_raw.items():
        invocation.namespaces[prefix] = build_options(spaces[prefix][0], raw, where=f"{prefix}.")
    return invocation


def help_text(command: Command) -> str:
    verb = f" {'|'.join(command.actions)}" if command.actions else ""
    parts = [
        f"usage: {shown_prog(command)}{verb}"
        + ("" if command.recipe == "none" else " recipe=NAME|--config PATH")
        + " [key=value ...]",
        "",
        "\n\n".join(textwrap.fill(p, width=110) for p in command.summary.split("\n\n")),
    ]
    if command.actions:
        parts += ["", "Actions:"] + [f"  {name:<10} {text}" for name, text in command.actions.items()]
    if command.examples:
        parts += ["", command.examples]
    if command.options:
        parts += ["", "Options:", describe(command.options)]
    if command.namespaces:
        for prefix, (cls, description) in command.namespaces().items():
            parts += ["", f"{prefix}.* options ({description}):", describe(cls, prefix=f"{prefix}.")]
    if command.recipe != "none":
        parts += [
            "",
            "Recipes (recipe=NAME; recipes/NAME.yaml, $TIMEALIGN_RECIPES, or --config PATH):",
            recipe_listing(command.task),
            "",
            "Recipe fields (override any with key=value):",
            describe_fields(),
        ]
    return "\n".join(parts)


# The launcher's rank variables, first set wins. Not SLURM_PROCID: it numbers srun tasks, and slurm/launch.sh runs
# one task per node that starts `accelerate launch`, so there it is the node's rank, not a training process's; a
# process started by srun alone (no RANK) trains by itself and is its own rank 0.
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "LOCAL_RANK")


def launcher_rank(env=None) -> int:
    """This process's global rank as its launcher set it (torchrun, accelerate launch, mpirun); 0 without one. The
    one rank helper: logging, data prep, the output_dir claim and the launch check all ask it.

    Read from the environment, not from accelerate's state: it is known before anything is initialized, and under
    torchrun on CPU accelerate reports "main process" on every rank."""
    env = os.environ if env is None else env
    for key in RANK_VARIABLES:
        value = env.get(key, "").strip()
        if value.lstrip("-").isdigit():
            return int(value)
    return 0


def run_command(
    command: Command,
    argv: list[str] | None,
    fn: Callable[[Invocation], int | None],
    *,
    errors: dict[type[BaseException], int] | None = None,
    hint: str = "",
) -> int:
    """--help, parsing (exit 2 on a bad recipe or option), then `fn(invocation)`.

    `errors` maps exception types raised by `fn` to exit codes; their message is printed (with `hint`) instead of
    a traceback. Anything else propagates.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a in HELP_FLAGS for a in argv):
        print(help_text(command))
        return 0
    level = logging.INFO if launcher_rank() == 0 else logging.WARNING  # N ranks, one INFO log
    logging.basicConfig(level=level, format=LOG_FORMAT)
    try:
        invocation = parse(command, argv)
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    handled = {RecipeError: 2, **(errors or {})}
    try:
        code = fn(invocation)
    except tuple(handled) as err:
        code = next(c for t, c in handled.items() if isinstance(err, t))
        if getattr(err, "rank_zero_only", False) and launcher_rank() != 0:
            return code  # every rank found the same problem (a launch check): rank 0 says it, once
        suffix = f"\n{hint}" if hint and code != 2 else ""
        print(f"error: {err}{suffix}", file=sys.stderr)
        return code
    return int(code or 0)
