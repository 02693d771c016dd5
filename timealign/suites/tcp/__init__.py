"""TCP (Ding et al., 2025): temporal constraint-based planning, as abstract problem prototypes (paper Sec. 3.2).

A prototype is a dialogue between two participants (Agent1, Agent2) about a project of three tasks (A, B, C),
followed by a question about the earliest completion time (Fig. 3). Constraints (Table 1): task durations, one of
the three dependency types of Table 2 (assigned evenly), and per participant:

* short problems (hours, finish within one day of the project start; answer "YYYY-MM-DD HH:MM GMT"): working hours
  in a time zone, a meal break, and either a minimum break between any two of their tasks or "up to N consecutive
  hours, then rest at least M hours";
* long problems (days, finish within 7 days; answer "YYYY-MM-DD"): weekdays only or every day, an optional
  unavailable day ("next Wednesday"), and either a minimum break between tasks or a consecutive-day limit. The
  project start is relative to the conversation date ("next Monday", "this Saturday", "the day after tomorrow").

Each task is done by one participant, without interruption (a meal break or an unavailable day cannot fall inside
it; but see the "pause" reading below); a participant does one task at a time. `solve` searches exhaustively (every
assignment of tasks to participants, every start unit) for the earliest completion.

Readings the paper leaves implicit (see `READINGS`), fixed here so the paper's worked answers come out:

* shift rule "paper": a working shift counts only if it begins at or after the project start. Fig. 11/Table 10
  (AEST 8:00-16:00, project from 00:00 GMT: earliest completion 14:00 GMT, not 08:00) and Fig. 19 (JST, 08:00 GMT)
  only reproduce this way; "periodic" would also use the tail of a shift that began before the start.
* "next <weekday>" = that weekday in the following Monday-to-Sunday week (Fig. 8: on Tuesday 2010-09-07, "next
  Monday" is Sept 13); "sunday_week" = in the following Sunday-to-Saturday week (they differ when today or the
  weekday is a Sunday: "next Saturday" said on a Sunday); "first_after" = the first such weekday after today. The
  generator only says "next <weekday>" where all three agree.
* a multi-day task ("whole", the default) takes consecutive days its assignee works; "pause" lets it stop over the
  assignee's days off (weekends, an unavailable day) and go on after them. The prompt never says which.
* "up to N consecutive units, then rest at least M": "fatigue" counts worked units since the last rest of at least
  M units (shorter gaps do not reset the count); "contiguous" limits each unbroken run of work to N units and
  requires M units of rest after a run of exactly N.
* start times of short problems ("start_grid"): "hour" = tasks start on the hour, like every hour the prompt
  states; "half_hour" = also at half past. Under "contiguous" a half-hour gap ends a run of work, so a task started
  at half past can finish earlier (2 of 450 short items changed before the generator rejected them).

By default (`robust=True`) the generator keeps only problems whose answer is the same under every combination of
these readings, so no item hinges on a convention. Scoring: exact match of the parsed answer; the random baseline
is the paper's (one of 24 hours for short, one of 7 days for long: 4.17% / 14.29%, Table 3).

Modules: `problem` (the prototype, its participants and day expressions), `solve` (the exhaustive search),
`render` (the Fig. 3 dialogue and the prompt), `generate`, `score`, `suite` (the evaluation suite and its options).

    python data_prep/reasoning.py suite=tcp n=60 kind=mixed seed=0 out=tcp.jsonl
"""

from timealign.suites.tcp.generate import generate, make_item, sample_long, sample_short
from timealign.suites.tcp.problem import (
    AGENT_NAMES,
    ANSWER_FORMAT,
    DEPENDENCY_TYPES,
    KINDS,
    LONG_HORIZON_DAYS,
    READINGS,
    SHORT_HORIZON_HOURS,
    TASKS,
    TIMEZONES,
    VARIANTS,
    WEEKDAYS,
    LongAgent,
    Problem,
    ShortAgent,
    answer_candidates,
    next_is_unambiguous,
    parse_dt,
    problem_from_dict,
    problem_to_dict,
    project_start,
    resolve_day,
)
from timealign.suites.tcp.render import build_prompt, constraint_sentence, render_dialogue, render_question
from timealign.suites.tcp.score import markdown_summary, parse_answer, random_baseline, score, simulate_random_baseline
from timealign.suites.tcp.solve import (
    Solution,
    UnitProblem,
    answers_by_reading,
    contiguous_ok,
    fatigue_ok,
    solve,
    solve_units,
    task_end,
    to_units,
)
from timealign.suites.tcp.suite import (
    DEFAULT_MAX_NEW_TOKENS,
    TCPOptions,
    TCPSet,
    evaluate_tcp,
    generate_set,
    run_suite,
)
