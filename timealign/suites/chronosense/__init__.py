"""ChronoSense (Islakoglu & Kalo, 2025): Allen relations between two year intervals and temporal arithmetic.

Every item is a (Context, Hypothesis, Correctness) triple asked as a True/False question (paper Sec. 3):

* 13 Allen tasks: two events with their start and end years; the hypothesis verbalises one Allen relation.
  Positive: the pair's true relation. Negative (App. A.1.1): the *same context* with another relation, drawn from
  the relations that stay definitely false at year granularity (the paper's exclusion list `NEGATIVE_EXCLUSIONS`;
  e.g. for a true "Equals" the hypothesis "Contains" is never used because the events could start and end on
  different days of the same years). Events are abstract ("Event A"/"Event B", the paper's abstract setting) or
  named, from a list of (name, start, end) events (`BUILTIN_EVENTS`, or your own).
* 3 arithmetic tasks, always abstract ("Event A"): End Timepoint (start + duration), Next Occurrence (first
  occurrence + frequency), Intermediate Timepoint (was the event happening in a given year). Negative: the same
  context with a wrong year (the paper changes 1921 to 1950 in its Next Occurrence example).

Each positive has its negative, so True is exactly half of an even-sized set, per task too. Prompt settings are
the paper's 0-shot, 1-shot, 3-shot and CoT ("Let's think step by step." appended, Sec. 4); few-shot examples are
of the same task, never on the test's years (or context, whatever the events are called) and never repeated
(`generate.context_key`; the paper does not say how it drew them); no item of a set repeats another
(`generate.item_key`), and which of a positive and its negative comes first is drawn with the seed; three wordings
(`template` 0-2) stand for its three prompt variants (App. A.3). The paper's Tables 3 and 10 are images that
are not in the text we have; only the context sentence and the "Before" hypothesis are quoted in Sec. 3, so
the other verbalisations here are ours, written in the same style. Answers are parsed to True / False / unclear
(unclear counts as wrong, as in the paper's tables, and is reported separately).

Modules: `allen` (the 13 relations, negatives, pairs), `arithmetic` (the 3 arithmetic tasks), `prompts` (wordings
and settings), `generate`, `score`, `suite` (the evaluation suite and its options).

    python data_prep/reasoning.py suite=chronosense n=160 seed=0 out=chronosense.jsonl
"""

from timealign.suites.chronosense.allen import (
    ALLEN_RELATIONS,
    BUILTIN_EVENTS,
    INVERSE,
    NEGATIVE_EXCLUSIONS,
    allen_relation,
    negative_candidates,
    pairs_by_relation,
    sample_pair,
)
from timealign.suites.chronosense.arithmetic import (
    ARITHMETIC_TASKS,
    arithmetic_truth,
    end_timepoint,
    is_intermediate,
    next_occurrence,
    occurs_in,
    sample_arithmetic,
)
from timealign.suites.chronosense.generate import TASKS, composition, context_key, generate, select_tasks
from timealign.suites.chronosense.prompts import SETTINGS, TEMPLATES, build_prompt, normalize_setting, render_question
from timealign.suites.chronosense.score import markdown_summary, parse_true_false, score
from timealign.suites.chronosense.suite import (
    DEFAULT_MAX_NEW_TOKENS,
    ChronoSenseOptions,
    ChronoSenseSet,
    evaluate_chronosense,
    generate_set,
    run_suite,
)
