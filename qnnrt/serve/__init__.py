"""`qnnrt serve`: an OpenAI-compatible HTTP server in front of the LLM runner (qnnrt/llm/).

engine.py (the job FIFO and the one thread that runs the model) and openai_api.py (request fields
and response shapes) need nothing beyond qnnrt; app.py and server.py need the ASGI stack
(the `serve` extra: qnnrt.install.extra_hint) and are imported only by the command that serves.
"""
