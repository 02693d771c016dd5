"""ChronoSense's 3 temporal-arithmetic tasks: End Timepoint, Next Occurrence, Intermediate Timepoint."""

from __future__ import annotations

import random

ARITHMETIC_TASKS = ("End Timepoint", "Next Occurrence", "Intermediate Timepoint")


def end_timepoint(start: int, duration: int) -> int:
    """End Timepoint: the year an event that started in `start` and lasted `duration` years ended."""
    return start + duration


def next_occurrence(first: int, every: int) -> int:
    """Next Occurrence: the year after `first` in which an event recurring every `every` years happens again."""
    return first + every


def occurs_in(first: int, every: int, year: int) -> bool:
    """Whether a recurring event (first year, period) occurred again in `year`."""
    return year > first and (year - first) % every == 0


def is_intermediate(start: int, end: int, year: int) -> bool:
    """Intermediate Timepoint: whether an event spanning start..end (inclusive years) was happening in `year`."""
    return start <= year <= end


def arithmetic_truth(task: str, params: dict, year: int) -> bool:
    """Correctness of the hypothesis year for one arithmetic item."""
    if task == "End Timepoint":
        return year == end_timepoint(params["start"], params["duration"])
    if task == "Next Occurrence":
        return occurs_in(params["first"], params["every"], year)
    if task == "Intermediate Timepoint":
        return is_intermediate(params["start"], params["end"], year)
    raise KeyError(f"unknown arithmetic task {task!r}")


def _wrong_year(rng: random.Random, true_year: int, ok) -> int:
    for _ in range(1000):
        y = true_year + rng.choice([-1, 1]) * rng.randint(1, 30)
        if ok(y):
            return y
    raise RuntimeError("no negative year found")  # unreachable with the ranges used here


def sample_arithmetic(task: str, rng: random.Random, *, years: tuple[int, int] = (1500, 2020)) -> dict:
    """Parameters, the positive hypothesis year and a negative one for an arithmetic task."""
    if task == "End Timepoint":
        start, duration = rng.randint(years[0], years[1] - 60), rng.randint(2, 50)
        pos = end_timepoint(start, duration)
        neg = _wrong_year(rng, pos, lambda y: y > start and y != pos)
        params = {"start": start, "duration": duration}
    elif task == "Next Occurrence":
        first, every = rng.randint(years[0], years[1] - 60), rng.randint(2, 20)
        pos = next_occurrence(first, every)
        # Any year first + k*every would also be "True"; negatives avoid every occurrence year.
        neg = _wrong_year(rng, pos, lambda y: y > first and not occurs_in(first, every, y))
        params = {"first": first, "every": every}
    elif task == "Intermediate Timepoint":
        start = rng.randint(years[0], years[1] - 60)
        end = start + rng.randint(2, 50)
        pos = rng.randint(start + 1, end - 1)  # strictly inside: no boundary-year ambiguity
        neg = rng.choice([rng.randint(start - 30, start - 1), rng.randint(end + 1, end + 30)])
        params = {"start": start, "end": end}
    else:
        raise KeyError(f"unknown arithmetic task {task!r}")
    assert arithmetic_truth(task, params, pos) and not arithmetic_truth(task, params, neg)
    return {"params": params, "positive_year": pos, "negative_year": neg}
