"""What the experiments run and what they must reach, and how their comma-list options are read."""

from timealign.config import RecipeError

DPO_RECIPE = "experiment-dpo"
TIMER_RECIPE = "experiment-timer"
# The targets (never tuned here: a miss is reported with its cause, not hidden by moving the bar).
TARGETS = {"nar_after": 0.90, "timer_f1_after": 0.80}
# "Far lower" for the no-timestamp control: at most this NAR (chance is 0.5).
CONTROL_MAX_NAR = 0.65


def comma_choices(text: str, known, what: str) -> tuple[str, ...]:
    """A comma list of distinct names from `known` (an experiment's arms, modes, variants), or one RecipeError line."""
    picked = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in picked if p not in known]
    if unknown or not picked:
        raise RecipeError(f"{what} takes a comma list of {', '.join(known)}, got {text!r}")
    if len(set(picked)) != len(picked):
        raise RecipeError(f"{what} names an arm twice: {text!r}")
    return picked


def comma_seeds(text: str) -> tuple[int, ...]:
    """A comma list of distinct integer seeds, or one RecipeError line."""
    try:
        seeds = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise RecipeError(f"seeds takes a comma list of integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise RecipeError(f"seeds takes distinct integers, got {text!r}")
    return seeds
