"""OpenAIEngine: retries and parsing over httpx.MockTransport, then the real SmolLM2 behind agentrl's server."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest

from agentrl_core.config import SamplingConfig
from agentrl_core.envs import make
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import EpisodeSpec, HFEngine, LoopLimits, run_episodes
from agentrl_core.rollout.openai_engine import (
    OpenAIEngine,
    OpenAIRequestError,
    OpenAIResponseError,
    OpenAIServerUnavailable,
)
from agentrl_core.serving import launch_openai_server

MODEL = "smollm2-135m-instruct"
GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=4)


def _ok(prompts: list[list[int]], with_ids: bool = True) -> dict:
    """A completion body: prompt i gets reply [i + 10, i + 11] with log-probs [-0.5, -0.25]."""
    choices = [{"index": i, "text": "", "finish_reason": "length", "logprobs": {"token_logprobs": [-0.5, -0.25]},
                **({"token_ids": [i + 10, i + 11]} if with_ids else {})} for i in range(len(prompts))]
    return {"choices": choices[::-1]}  # out of order on purpose: the engine sorts by index


class Script:
    """A MockTransport handler that answers from a list of responses (or raises), recording requests."""

    def __init__(self, *answers):
        self.answers, self.requests = list(answers), []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if answer == "ok":
            return httpx.Response(200, json=_ok(self.requests[-1]["prompt"]))
        return answer


def _engine(script: Script, **kw) -> tuple[OpenAIEngine, list[float]]:
    sleeps: list[float] = []
    eng = OpenAIEngine("http://test", "m", transport=httpx.MockTransport(script), sleep=sleeps.append, **kw)
    return eng, sleeps


def test_payload_chunks_and_seeds():
    script = Script("ok", "ok")
    eng, sleeps = _engine(script, max_batch=2)
    gens = eng.generate([[1, 2], [3], [4, 5, 6]], SamplingConfig(temperature=0.7, top_k=5, max_new_tokens=9), seed=7)
    assert [g.token_ids for g in gens] == [[10, 11], [11, 12], [10, 11]] and sleeps == []
    assert gens[0].logprobs == [-0.5, -0.25] and gens[0].finish_reason == "length"
    first, second = script.requests
    assert first["prompt"] == [[1, 2], [3]] and second["prompt"] == [[4, 5, 6]]
    assert (first["seed"], second["seed"]) == (7, 8)
    assert first["return_token_ids"] is True and first["logprobs"] == 1 and first["top_k"] == 5
    assert first["max_tokens"] == 9 and first["temperature"] == 0.7 and first["model"] == "m"


def test_transient_errors_are_retried_with_exponential_backoff():
    script = Script(httpx.Response(503), httpx.ConnectError("refused"), httpx.Response(500), "ok")
    eng, sleeps = _engine(script, max_retries=3, backoff_s=0.5)
    assert eng.generate([[1]], GREEDY, 0)[0].token_ids == [10, 11]
    assert sleeps == [0.5, 1.0, 2.0]


def test_retry_after_is_honoured_and_capped():
    script = Script(httpx.Response(429, headers={"Retry-After": "0.2"}), httpx.Response(429, headers={"Retry-After": "99"}), "ok")
    eng, sleeps = _engine(script, backoff_s=1.0, max_backoff_s=3.0)
    eng.generate([[1]], GREEDY, 0)
    assert sleeps == [0.2, 2.0]  # min(1*2**0, 3, 0.2); min(1*2**1, 3, 99)


def test_retries_are_bounded():
    script = Script(*[httpx.ReadTimeout("slow")] * 3)
    eng, sleeps = _engine(script, max_retries=2, backoff_s=1.0, max_backoff_s=1.5)
    with pytest.raises(OpenAIServerUnavailable, match="after 3 attempts"):
        eng.generate([[1]], GREEDY, 0)
    assert sleeps == [1.0, 1.5] and len(script.requests) == 3


def test_client_errors_are_typed_and_not_retried():
    err = {"error": {"message": "max_tokens too big", "type": "invalid_request_error", "code": "context_length_exceeded"}}
    script = Script(httpx.Response(400, json=err))
    eng, sleeps = _engine(script)
    with pytest.raises(OpenAIRequestError, match="max_tokens too big") as info:
        eng.generate([[1]], GREEDY, 0)
    assert info.value.status == 400 and info.value.code == "context_length_exceeded" and sleeps == []
    assert isinstance(info.value, RuntimeError)  # the agent loop turns it into trajectory errors


def test_malformed_answers_are_typed():
    eng, _ = _engine(Script(httpx.Response(200, json={"choices": []})))
    with pytest.raises(OpenAIResponseError, match="expected 1 choices"):
        eng.generate([[1]], GREEDY, 0)
    eng, _ = _engine(Script(httpx.Response(200, json=_ok([[1]], with_ids=False))))
    with pytest.raises(OpenAIResponseError, match="pass tokenizer="):
        eng.generate([[1]], GREEDY, 0)


@pytest.fixture(scope="module")
def tokenizer(embedded_model_path: Path):
    return load_tokenizer(embedded_model_path)


def test_fallback_tokenizes_text_and_warns_once(tokenizer, caplog):
    ids = tokenizer(" Paris.", add_special_tokens=False)["input_ids"]
    body = {"choices": [{"index": 0, "text": " Paris.", "finish_reason": "stop",
                         "logprobs": {"token_logprobs": [-0.1] * len(ids)}}]}
    script = Script(httpx.Response(200, json=body), httpx.Response(200, json=body))
    eng, _ = _engine(script, tokenizer=tokenizer, return_token_ids=False)
    with caplog.at_level(logging.WARNING, logger="agentrl_core.rollout.openai_engine"):
        a = eng.generate([[1]], GREEDY, 0)[0]
        eng.generate([[1]], GREEDY, 0)
    assert a.token_ids == ids and a.logprobs == [-0.1] * len(ids) and a.finish_reason == "stop_text"
    assert "return_token_ids" not in script.requests[0]
    assert sum("lossy" in r.getMessage() for r in caplog.records) == 1


# -- against agentrl's own server with the real model ---------------------------------------------
@pytest.fixture(scope="module")
def server_url():
    with launch_openai_server(MODEL, api_key="k3y", max_batch=8, threads=1) as srv:
        yield srv.url


@pytest.mark.slow
def test_greedy_equals_hf_engine(server_url, tokenizer, embedded_model_path: Path):
    prompts = [tokenizer("The capital of France is", add_special_tokens=False)["input_ids"],
               tokenizer("1, 2, 3, 4,", add_special_tokens=False)["input_ids"]]
    hf = HFEngine(load_model(embedded_model_path), tokenizer, max_batch=8).generate(prompts, GREEDY, seed=0)
    with OpenAIEngine(server_url + "/v1", MODEL, api_key="k3y", max_batch=8) as eng:
        remote = eng.generate(prompts, GREEDY, seed=0)
    for h, r in zip(hf, remote):
        assert r.token_ids == h.token_ids and r.finish_reason == h.finish_reason
        assert r.logprobs == pytest.approx(h.logprobs, abs=1e-3)
    assert len(remote[0].token_ids) == 4


def test_wrong_key_is_a_typed_401(server_url):
    with OpenAIEngine(server_url, MODEL, api_key="nope") as eng, pytest.raises(OpenAIRequestError) as info:
        eng.generate([[1, 2]], GREEDY, 0)
    assert info.value.status == 401 and info.value.code == "invalid_api_key"


def test_agent_loop_runs_countdown_episodes_through_the_server(server_url, tokenizer):
    chat = ChatFormat(tokenizer)
    specs = [EpisodeSpec(task_id=0, sample=0), EpisodeSpec(task_id=1, sample=1)]
    with OpenAIEngine(server_url, MODEL, api_key="k3y") as eng:
        trajs = run_episodes(eng, chat, lambda: make("countdown"), specs,
                             SamplingConfig(temperature=1.0, max_new_tokens=6), LoopLimits(2, 2048), seed=1)
    for t in trajs:
        assert t.error is None and t.env == "countdown" and t.num_turns >= 1
        assert len(t.token_ids) == len(t.loss_mask) == len(t.logprobs)
        trained = [lp for lp, m in zip(t.logprobs, t.loss_mask) if m]
        assert 1 <= len(trained) <= 6 * t.num_turns and all(lp <= 0.0 for lp in trained)
        assert t.messages[2]["role"] == "assistant"
