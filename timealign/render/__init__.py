"""Rendering below data prep, training and evaluation: chat prompts with timestamps (`chat`), TIMER sequences
(`timer`), time text (`timefmt`, `intervals`), and the TIMER settings a trained checkpoint carries (`checkpoint`)."""
