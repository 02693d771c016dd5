"""`timealign serve`: an OpenAI-compatible gateway that gives a deployed model the timestamps it was trained with.

options.py (the command line), clock.py (message times in SQLite), upstream.py (bounded requests to the upstream),
replies.py (a completion as an OpenAI message with tool_calls), app.py (the ASGI app), __main__.py (startup).
Docs: docs/serving.md.
"""
