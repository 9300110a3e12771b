"""Secret settings: redacted wherever shown or serialised, revealed only where used."""

from __future__ import annotations

import json
import pickle

import pytest

from agentrl_core.config import RecipeConfig, dump
from agentrl_core.recipes import load_recipe, resolve_recipe
from agentrl_core.secrets import Secret, SecretUnavailableError, move_inline_secrets, worker_environment

CANARY = "canary-Zq8pX3"
PG = f"postgresql+psycopg://alice:{CANARY}@127.0.0.1:1/db"


def test_a_literal_is_redacted_in_every_serialisation_but_revealed_where_used():
    cfg = load_recipe(None, [f"store.registry_url={PG}", f"rollout.engine.url=http://k:{CANARY}@h:1/v1",
                             f"experience.db_url=sqlite:///x.db?token={CANARY}"])
    for text in (json.dumps(dump(cfg)), str(cfg), repr(cfg), cfg.model_dump_json()):
        assert CANARY not in text
    assert "alice:***@127.0.0.1" in json.dumps(dump(cfg))  # the host stays visible
    assert cfg.store.registry_url.reveal() == PG
    assert pickle.loads(pickle.dumps(cfg)).store.registry_url.reveal() == PG  # Ray actors get the value


def test_references_are_shown_as_written_and_read_from_the_environment(monkeypatch):
    cfg = load_recipe(None, ["store.registry_url=env:MY_REGISTRY"])
    assert dump(cfg)["store"]["registry_url"] == "env:MY_REGISTRY"
    with pytest.raises(SecretUnavailableError, match="MY_REGISTRY is not set"):
        cfg.store.registry_url.reveal("store.registry_url")
    monkeypatch.setenv("MY_REGISTRY", PG)
    assert cfg.store.registry_url.reveal() == PG
    assert worker_environment(cfg)["MY_REGISTRY"] == PG


def test_a_redacted_copy_refuses_to_be_used_and_says_how():
    stored = dump(load_recipe(None, [f"store.registry_url={PG}"]))
    again = RecipeConfig.model_validate(stored)
    with pytest.raises(SecretUnavailableError, match="env:VARIABLE"):
        again.store.registry_url.reveal("store.registry_url")


def test_overrides_on_an_in_process_recipe_keep_the_value():
    cfg = load_recipe(None, [f"store.registry_url={PG}"])
    assert resolve_recipe(cfg, None, ["trainer.steps=2"]).store.registry_url.reveal() == PG


def test_inline_credentials_move_into_the_environment(monkeypatch):
    monkeypatch.delenv("AGENTRL_SECRET_STORE_REGISTRY_URL", raising=False)  # removed again after the test
    cfg = load_recipe(None, [f"store.registry_url={PG}", "env.url=http://127.0.0.1:9"])
    moved = move_inline_secrets(cfg)
    assert moved == {"store.registry_url": "AGENTRL_SECRET_STORE_REGISTRY_URL"}
    assert dump(cfg)["store"]["registry_url"] == "env:AGENTRL_SECRET_STORE_REGISTRY_URL"
    assert cfg.store.registry_url.reveal() == PG
    assert dump(cfg)["env"]["url"] == "http://127.0.0.1:9"  # no credential: left as is


def test_bad_reference_is_rejected():
    with pytest.raises(ValueError):
        Secret("env:not a name")
