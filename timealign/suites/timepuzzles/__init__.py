"""Time Puzzles: constraint-based date inference puzzles, generated on the fly (paper: "Measuring Iterative Temporal
Reasoning with Time Puzzles"; section and algorithm numbers below refer to it).

A puzzle is a set of natural-language facts F; its answer set is A = intersection of C(t) over t in F (Eq. 1), where
C(t) is the set of calendar dates for which fact t holds. Every fact here is a predicate over dates (vectorised over a
day-by-day calendar, plus an independent scalar `holds(date)`) with two renderings: `implicit` (the default dataset:
events, people, zodiac...) and `explicit` (the paired dataset: the relevant dates spelled out), Sec. 2.2.

Generation follows Algorithms 1-3 (Sec. 2.2, App. A.2): pick a knowledge-base anchor t_kb and a seed date inside
C(t_kb); add 3-5 facts instantiated from the seed, from unused categories at balanced levels (YEAR, MONTH, DAY in
turn); solve by intersecting in descending information gain (Eq. 2); keep the puzzle when |A| equals the target M.
Every fact is true of the seed date, so |A| >= 1.

Modules: `calendar` (the date set D), `fact` (the fact interface), `year_facts` and `month_day_facts` (Table 2's
16 categories), `categories`, `kb` (the knowledge base), `solver` (Algorithm 3), `generate` (Algorithms 1-2, the
prompt), `score` (App. B), `suite` (the evaluation suite and its options). Data sets: `python data_prep/reasoning.py
suite=timepuzzles n=200 seed=0 out=FILE`.

Choices where the paper is silent (see also the module constants):
- The universal date set D: the paper says "all possible Gregorian dates"; we enumerate 1850-01-01..2025-12-31.
  Every anchor period lies inside D (the knowledge base ends in 2022) except the one term with no end (Donald
  Trump's second); puzzles that a date past D's end (up to `RANGE_END_HORIZON`, with the sports tables counted as
  unknown there) might satisfy are rejected, so the answer set never depends on D's ends.
- Chinese calendar (zodiac years start at Chinese New Year; lunar months, leap months named as such) comes from
  `lunar-python` (astronomical computation; matches the Hong Kong Observatory tables, e.g. the 1933 leap 5th month,
  where the table-based `lunardate` 0.3.0 is off by one day).
- Ambiguity guard: a puzzle is rejected when its answer could change under a reasonable alternative reading: a
  presidential transition day (both presidents are "in office"), the disputed ends of some periods, and the
  Summer-Olympics status of 1906 (Intercalated Games), 2020 and 2021 (the Games named Tokyo 2020 were held in 2021).
- Explicit variant: facts needing world knowledge (people, presidents, events, Olympic/World Cup years, zodiac,
  lunar months) get their dates spelled out; for zodiac and lunar months the listed periods are those the
  year-level facts (and the anchor) leave possible, and puzzles needing more than 12 periods are rejected for both
  variants, so the implicit and explicit datasets of one seed hold the same puzzles and the same answers.
"""

from timealign.suites.timepuzzles.calendar import (
    DATE_MAX,
    DATE_MIN,
    Calendar,
    chinese_new_year,
    get_calendar,
    lunar_months,
    lunar_of,
    zodiac_of_lunar_year,
)
from timealign.suites.timepuzzles.categories import CATEGORIES_BY_LEVEL, FACT_TYPES, fact_from_dict
from timealign.suites.timepuzzles.fact import DAY, LEVELS, MONTH, VARIOUS, YEAR, Fact
from timealign.suites.timepuzzles.generate import (
    ANCHOR_WEIGHTS,
    MAX_SOLUTIONS,
    RANGE_END_HORIZON,
    VARIANTS,
    Puzzle,
    depends_on_range_end,
    generate,
    generate_puzzle,
    is_ambiguous,
    puzzle_record,
    render_prompt,
)
from timealign.suites.timepuzzles.month_day_facts import (
    DayOfMonthFact,
    DayOfMonthRangeFact,
    LunarMonthFact,
    MonthFact,
    MultiWeekdayFact,
    SeasonFact,
    WeekdayFact,
    WeekdayInMonthFact,
)
from timealign.suites.timepuzzles.score import ParsedAnswer, markdown_summary, parse_answer, score_outputs, set_metrics
from timealign.suites.timepuzzles.solver import solve, solve_indices
from timealign.suites.timepuzzles.suite import (
    TimePuzzlesOptions,
    TimePuzzlesSet,
    evaluate_timepuzzles,
    generate_set,
    run_suite,
)
from timealign.suites.timepuzzles.year_facts import (
    ChineseZodiacFact,
    DecadeFact,
    EventFact,
    ExplicitYearFact,
    KnowledgeBaseEventFact,
    LeapYearFact,
    PersonAliveFact,
    USPresidentFact,
)
