"""The experience pool: summarise trajectories into lessons, store them in SQL, retrieve them by embedding.

The pool runs as its own process with an HTTP API (`service.py`, started by `launcher.py`, used
through `client.py`); `mixing.py` puts retrieved experience into some rollouts (the `mixed` mode)
and `rollout_hooks.py` wires both into the GRPO step. Import the modules directly: this package
imports nothing, so the heavy parts (SQLAlchemy, FastAPI, the embedding model) load only where used.
"""
