"""The HTTP layer under every agentrl server (env server, experience pool, OpenAI-compatible server).

None of the servers owns it: `app_runner.py` (bind, announce, serve with uvicorn; the arguments every server
process takes; exiting with its launcher), `server_process.py` (start a server as a subprocess and wait until
it answers), `ports.py` (a free port), `body_limit.py` (the request-size cap), `auth.py` (bearer tokens and
the middleware that checks them), `error_bodies.py` (JSON error bodies and the handlers that produce them).
"""
