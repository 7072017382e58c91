"""`qnnrt serve`: an OpenAI-compatible HTTP server in front of the LLM runner (qnnrt/llm/).

engine.py (the job FIFO and the one thread that runs the model) and openai_api.py (the error and
response shapes) need nothing beyond qnnrt; schema.py (the request and response types), requests.py
(bodies decoded into them) and openapi.py (the published document) need msgspec; app.py, server.py and
connections.py (the deadlines and connection limit in front of the app) need the ASGI stack
(the `serve` extra: qnnrt.install.extra_hint) and are imported only by the command that serves.
"""
