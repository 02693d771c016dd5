"""The prompts and answer formats of TimelyChat's dialog-level evaluation (`timealign.suites.timelychat.dialog`): the
App. B.2 user-simulator prompt, the App. B.3 dialog-level judge prompt and its metrics, the formats asked of the
partner and the judge, and what differs from the authors' setting (`PROTOCOL_DIFFERENCES`, in every report).
"""

from __future__ import annotations

# App. B.2, in the words of the authors' script (the paper prints "dialog" where the script sends "dialogue").
SIMULATOR_PROMPT = """You are a user simulator (user) engaging in an event-driven dialogue with a dialogue agent \
(agent).
Given the dialogue context, your task is to proceed the conversation by one turn under the following assumptions:
1. agent responds after the elapsed time specified in the parentheses from the previous user utterance. If the \
delay is "0 minutes", agent is assumed to respond immediately.
2. user is assumed to respond to agent without any delay."""

# The authors' `Output` response format ({"answer": str}) as an OpenAI json_schema response format.
PARTNER_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "Output",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
            "additionalProperties": False,
        },
    },
}

# App. B.3, "Dialog-level Prompt".
DIALOG_JUDGE_TEMPLATE = """You will be given a conversation between a dialog agent and a user.

Throughout the conversation, the agent proactively determines the delay of its response to the user's previous \
message, simulating delayed responses due to event experiences that take certain time to process.

At each agent's turn, the delay is provided in the parentheses followed by the message. Your task is to rate the \
dialog agent on one metric. Please make sure you read and understand these instructions carefully.

Evaluation Criteria:
{metric} (1-5): {criteria}

Evaluation Steps:
{steps}"""

# App. B.3, "Evaluation Criteria and Steps": the three dialog-level metrics.
DIALOG_JUDGE_METRICS: dict[str, dict[str, str]] = {
    "coherence": {
        "metric": "Coherence",
        "criteria": "the extent to which the agent maintains a good conversation flow.",
        "steps": (
            "1. Assess the flow and coherence of the agent's responses in the conversation.\n"
            "2. Evaluate the tone and style compatibility throughout the conversation.\n"
            "3. Rate on a scale from 1 to 5, where 1 indicates the agent's responses are incoherent or "
            "inappropriate, and 5 indicates the agent's responses are perfectly coherent and appropriate."
        ),
    },
    "delay_appropriateness": {
        "metric": "Delay-appropriateness",
        "criteria": "the extent to which the agent poses delays with appropriate frequency and amount.",
        "steps": (
            "1. Assess whether the agent poses unnecessary or excessively frequent delays that could harm the "
            "conversation flow.\n"
            "2. Evaluate whether the amounts of delays (if not 0 minutes) reflect the typical duration of events "
            "implied in the corresponding message.\n"
            "3. Rate on a scale from 1 to 5, where 1 indicates the agent overuses and misuses delays, and 5 "
            "indicates the agent uses delays appropriately in terms of frequency and amount."
        ),
    },
    "time_specificity": {
        "metric": "Time-specificity",
        "criteria": (
            "the extent to which the agent's responses ONLY make sense when the specified time has passed, "
            "contrary to a time-agnostic responses that make sense regardless of time."
        ),
        "steps": (
            "1. Read the provided conversation and take note of the elapsed times since the previous messages.\n"
            "2. Consider the context of the conversation, focusing on how the passage of time might affect the "
            "relevance or appropriateness of the agent's responses.\n"
            "3. Evaluate whether the agent's responses are time-specific. That is, determine if the responses "
            "directly relate to or are clearly influenced by the elapsed times.\n"
            "4. Rate on a scale from 1 to 5, where 1 indicates the agent's responses are completely time-agnostic "
            "and unaffected by the passage of time, and 5 indicates the agent's responses are entirely "
            "time-specific; they only make sense because of the amount of time that has passed since the previous "
            "message."
        ),
    },
}

# Ours (the paper does not print it): the dialog and the answer format, laid out like the turn-level judge's input.
DIALOG_JUDGE_INPUT = """### Conversation ###
{transcript}

Rate the dialog agent on {metric} (1-5). Answer with a JSON object only: \
{{"score": <an integer from 1 to 5>, "explanation": "<one or two sentences>"}}"""

# `judge_structured`: the same answer, enforced by the server (a weak local judge otherwise rarely answers in form).
JUDGE_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "Judgement",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}, "explanation": {"type": "string"}},
            "required": ["score", "explanation"],
            "additionalProperties": False,
        },
    },
}

PROTOCOL_DIFFERENCES = (
    "agent decoding: the backend's sampling settings (the recipe's eval section; greedy by default). The authors "
    "ran TIMER with beam search (3 beams) plus top-p 0.95 sampling at temperature 1.0 and no_repeat_ngram_size=2, "
    "which the backends here do not offer",
    "agent prompt: the checkpoint's own TIMER format (<SPK>/<TIME>/<UTT> markers and canonical intervals), not the "
    "authors' T5 text '<spk> A: <time> 0 minutes later <utt> ...'; the same information in each turn",
    "agent token budgets: interval_max_new_tokens / response_max_new_tokens (12 / 64 by default); the authors "
    "gave each step 100 new tokens",
    "agent reply clean-up: only with postprocess=true; the authors' dialog script always applies it",
    "judge input: the paper does not print how the dialog reaches its judge or how the judge answers; here it is "
    "a '### Conversation ###' transcript and a JSON {score, explanation} answer (the paper's judge: Claude Sonnet "
    "4.5; the released code has no judge)",
    "partner sampling: partner_temperature (default 1.0, the API default the authors' GPT-4o simulator ran with) "
    "with a seed per dialog and turn (reproducible; the authors set none); structured output is requested as an "
    "OpenAI json_schema response format (the authors used the openai client's parse with a pydantic model)",
)
