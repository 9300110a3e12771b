"""The OpenAI-compatible server: the real SmolLM2 in a subprocess started as a run (an evaluation) starts it,
answering only the run's token and capping request bodies; errors and the API key in-process on a tiny model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.rollout import HFEngine
from agentrl_core.serving import create_app, launch_openai_server
from agentrl_core.serving.openai_server import MAX_BODY_ENV, default_body_bytes
from agentrl_core.web.auth import TOKEN_ENV, run_token

MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class RunServer:
    url: str
    token: str
    """The run's token, which the server requires."""

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture(scope="module")
def server():
    """Started inside `run_token()`, as an evaluation starts it; the token is in this process's environment
    only while starting it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(TOKEN_ENV, raising=False)
        mp.delenv(MAX_BODY_ENV, raising=False)
        with run_token() as token:
            srv = launch_openai_server(MODEL, startup_timeout=120, threads=1)
    with srv:
        yield RunServer(srv.url, token)


@pytest.fixture(scope="module")
def tokenizer(embedded_model_path: Path):
    return load_tokenizer(embedded_model_path)


def _post(server: RunServer, route: str, **body) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/{route}", json={"model": MODEL, **body}, timeout=60, headers=server.auth)


@pytest.mark.slow
def test_models_lists_the_served_model(server):
    body = httpx.get(f"{server.url}/v1/models", headers=server.auth).json()
    assert body["object"] == "list" and [m["id"] for m in body["data"]] == [MODEL]


@pytest.mark.parametrize("stranger", [{}, {"Authorization": "Bearer not-the-run-token"}])
def test_a_stranger_cannot_query_the_runs_model(server, stranger):
    for route in ("models", "completions", "chat/completions"):
        method = "GET" if route == "models" else "POST"
        r = httpx.request(method, f"{server.url}/v1/{route}", json={"model": MODEL, "prompt": [1]}, headers=stranger,
                          timeout=30)
        assert r.status_code == 401, (route, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_api_key" and TOKEN_ENV in err["message"] and server.token not in r.text
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200


def test_token_id_prompt_returns_token_ids_and_logprobs(server, tokenizer):
    prompt = tokenizer("The capital of France is", add_special_tokens=False)["input_ids"]
    r = _post(server, "completions", prompt=prompt, max_tokens=4, temperature=0, logprobs=1, return_token_ids=True)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-") and body["model"] == MODEL
    (choice,) = body["choices"]
    ids, lps = choice["token_ids"], choice["logprobs"]["token_logprobs"]
    assert choice["index"] == 0 and choice["prompt_token_ids"] == prompt
    assert len(ids) == len(lps) == 4 and choice["finish_reason"] == "length"
    assert all(lp <= 0.0 for lp in lps)
    assert choice["text"] == tokenizer.decode(ids, skip_special_tokens=True)
    assert choice["logprobs"]["tokens"] == [tokenizer.decode([t]) for t in ids]
    assert body["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 4, "total_tokens": len(prompt) + 4}


def test_text_and_token_prompts_agree_and_stop_strings_cut(server, tokenizer):
    text = "The capital of France is"
    full = _post(server, "completions", prompt=text, max_tokens=4, temperature=0, return_token_ids=True).json()
    ids = full["choices"][0]["token_ids"]
    assert full["choices"][0]["prompt_token_ids"] == tokenizer(text, add_special_tokens=False)["input_ids"]
    first = tokenizer.decode(ids[:1])  # cut right after the first generated token
    stop = _post(server, "completions", prompt=text, max_tokens=4, temperature=0, return_token_ids=True,
                 stop=[tokenizer.decode(ids[1:2])]).json()["choices"][0]
    assert stop["finish_reason"] == "stop" and stop["text"] == first and stop["token_ids"] == ids[:2]


def test_batched_prompts_with_n_samples_keep_openai_choice_order(server):
    prompts = [[504, 3575, 282], [19556]]
    body = _post(server, "completions", prompt=prompts, n=2, max_tokens=2, temperature=1.0, seed=3,
                 return_token_ids=True).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert [c["prompt_token_ids"] for c in body["choices"]] == [prompts[0], prompts[0], prompts[1], prompts[1]]
    assert body["usage"]["prompt_tokens"] == 4 and body["usage"]["completion_tokens"] == 8


def test_chat_completion_applies_the_chat_template(server, tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
    r = _post(server, "chat/completions", messages=messages, max_tokens=3, temperature=0, logprobs=True,
              return_token_ids=True)
    assert r.status_code == 200
    body = r.json()
    (choice,) = body["choices"]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n")
    assert choice["prompt_token_ids"] == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert body["object"] == "chat.completion" and choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == tokenizer.decode(choice["token_ids"], skip_special_tokens=True)
    assert [c["token"] for c in choice["logprobs"]["content"]] == [tokenizer.decode([t]) for t in choice["token_ids"]]


# -- request bodies: capped at what 64 full-context prompts take, as they arrive -----------------------
def _completion_body(size: int) -> bytes:
    """A valid one-token completion request of exactly `size` bytes (its `user` field padded)."""
    body = {"model": MODEL, "prompt": [1], "max_tokens": 1, "temperature": 0, "user": ""}
    empty = len(json.dumps(body).encode())
    return json.dumps({**body, "user": " " * (size - empty)}).encode()


def test_a_body_at_the_limit_is_served_one_byte_more_is_a_413(server, embedded_model_path: Path):
    context = json.loads((embedded_model_path / "config.json").read_text())["max_position_embeddings"]
    limit = default_body_bytes(context)
    headers = {**server.auth, "content-type": "application/json"}
    with httpx.Client(base_url=f"{server.url}/v1", headers=headers, timeout=60) as http:
        at_limit = http.post("/completions", content=_completion_body(limit))
        assert at_limit.status_code == 200 and len(at_limit.json()["choices"]) == 1, at_limit.text[:300]
        over = _completion_body(limit + 1)
        declared = http.post("/completions", content=over)
        chunked = http.post("/completions", content=iter([over[i:i + 65536] for i in range(0, len(over), 65536)]))
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    for response in (declared, chunked):
        err = _error_of(response, 413)
        assert err["code"] == "request_too_large" and f"({limit} bytes)" in err["message"]
        assert "--max-body-mb" in err["message"] and MAX_BODY_ENV in err["message"]


# -- errors and the API key, in-process on a tiny random model -----------------------------------
@pytest.fixture(scope="module")
def tiny_app(tiny_model_path: Path):
    tok = load_tokenizer(tiny_model_path)
    engine = HFEngine(load_model(tiny_model_path), tok)
    with TestClient(create_app(engine, tok, "tiny", max_context=64, api_key="s3cret")) as client:
        yield client


AUTH = {"Authorization": "Bearer s3cret"}


def _error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}])
def test_api_key_is_enforced(tiny_app, headers):
    err = _error_of(tiny_app.get("/v1/models", headers=headers), 401)
    assert err["code"] == "invalid_api_key" and "s3cret" not in err["message"]


def test_right_key_passes_and_health_is_open(tiny_app):
    assert tiny_app.get("/v1/models", headers=AUTH).json()["data"][0]["id"] == "tiny"
    assert tiny_app.get("/health").status_code == 200
    r = tiny_app.post("/v1/completions", headers=AUTH, json={"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 2,
                                                             "temperature": 0, "return_token_ids": True})
    assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) <= 2


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": [1], "max_tokens": 0}, "max_tokens"),
    ({"prompt": [1], "temperature": -1}, "temperature"),
    ({"prompt": [1], "frequency_penalty": 0.5}, "frequency_penalty"),
    ({"prompt": [1], "stream": True}, "stream"),
    ({"prompt": [1], "logprobs": 5}, "logprobs"),
    ({"max_tokens": 2}, "prompt"),
])
def test_bad_input_is_a_400_with_openai_shape(tiny_app, body, param):
    err = _error_of(tiny_app.post("/v1/completions", headers=AUTH, json={"model": "tiny", **body}), 400)
    assert err["type"] == "invalid_request_error" and err["param"] == param


def test_semantic_errors(tiny_app):
    post = lambda **b: tiny_app.post("/v1/completions", headers=AUTH, json={"max_tokens": 4, **b})
    assert _error_of(post(model="gpt-4", prompt=[1]), 404)["code"] == "model_not_found"
    assert _error_of(post(model="tiny", prompt=[10**9]), 400)["param"] == "prompt"
    assert _error_of(post(model="tiny", prompt=[]), 400)["param"] == "prompt"
    assert _error_of(post(model="tiny", prompt=[1] * 61), 400)["code"] == "context_length_exceeded"  # 61 + 4 > 64
    assert _error_of(tiny_app.get("/v1/nope", headers=AUTH), 404)["code"] == "not_found"
