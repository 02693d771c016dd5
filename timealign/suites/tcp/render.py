"""TCP rendering: the prototype dialogue in the paper's Fig. 3 wording, the question and the prompt."""

from __future__ import annotations

from timealign.suites.tcp.problem import AGENT_NAMES, ANSWER_FORMAT, TASKS, VARIANTS, Problem


def _hm(h: int) -> str:
    return f"{h}:00"


def _offset(o: int) -> str:
    return f"GMT{o:+d}" if o else "GMT+0"


def constraint_sentence(agent, kind: str) -> str:
    unit = "hour" if kind == "short" else "day"
    parts = []
    if kind == "short":
        parts.append(
            f"My working hours are {_hm(agent.work[0])}-{_hm(agent.work[1])} in {agent.tz} ({_offset(agent.offset)})."
        )
        parts.append(f"I take a meal break from {_hm(agent.meal[0])} to {_hm(agent.meal[1])}.")
    else:
        parts.append("I can work only on weekdays." if agent.weekdays_only else "I work every day.")
    if agent.break_between:
        parts.append(f"I need a break of at least {agent.break_between} {unit}(s) between any two tasks I perform.")
    if agent.max_consecutive:
        parts.append(
            f"I can work up to {agent.max_consecutive} consecutive {unit}s, then must rest at least "
            f"{agent.min_rest} {unit}(s) before working again."
        )
    return " ".join(parts)


def _start_phrase(p: Problem) -> str:
    if p.kind == "short":
        return f"at {p.start} GMT"
    return f"on {p.start}" if p.start.startswith("next ") else p.start


def render_dialogue(p: Problem) -> str:
    """The prototype dialogue in the paper's Fig. 3 wording."""
    lead, other = AGENT_NAMES[p.lead], AGENT_NAMES[1 - p.lead]
    unit = "hour" if p.kind == "short" else "day"
    lines = [
        f"{lead}: The project will start {_start_phrase(p)}.",
        f"{other}: How is the project decomposed? I remember we discussed this before.",
        f"{lead}: As discussed before, the whole project consists of several tasks: Task A, Task B, Task C.",
        f"{other}: What are the durations of Task A, Task B, Task C?",
        f"{lead}: Task durations are: "
        + ", ".join(f"Task {t} takes {d} {unit}(s)" for t, d in zip(TASKS, p.durations))
        + ".",
    ]
    dep_text = [f"Task {b} must begin only after Task {a} is completed." for a, b in p.deps]
    if len(p.dep_speakers) == 1:
        lines.append(f"{AGENT_NAMES[p.dep_speakers[0]]}: " + " ".join(dep_text))
    else:
        lines += [f"{AGENT_NAMES[g]}: {text}" for g, text in zip(p.dep_speakers, dep_text)]
    lines += [f"{AGENT_NAMES[i]}: {constraint_sentence(a, p.kind)}" for i, a in enumerate(p.agents)]
    if p.kind == "long":
        for i, a in enumerate(p.agents):
            lines += [
                f"{AGENT_NAMES[i]}: To supplement, I remember I am also unavailable on {x}." for x in a.unavailable
            ]
    return "\n".join(lines)


def render_question(p: Problem) -> str:
    if p.kind == "short":
        return (
            f"Question: Assume this conversation happens at {p.conversation} GMT, what is the earliest time that "
            f"they can complete the project (in GMT)?"
        )
    return (
        f"Question: Assume this conversation happens on {p.conversation}, what is the earliest date that they "
        f"can complete the project?"
    )


def build_prompt(p: Problem, variant: str = "direct") -> str:
    fmt = ANSWER_FORMAT[p.kind]
    if variant == "direct":
        instruction = f"Reply with only the final answer, in the form 'Answer: {fmt}'."
    elif variant == "cot":
        instruction = (
            f"Let's think step by step. End with the final answer on its own line, in the form 'Answer: {fmt}'."
        )
    else:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    return f"{render_dialogue(p)}\n{render_question(p)}\n{instruction}"
