"""The OpenAI-compatible HTTP rollout engine: token ids in, token ids and log-probs out, over /v1/completions.

`OpenAIEngine` implements the `Engine` protocol against any server that speaks OpenAI's
completions API: agentrl's own (`agentrl_core.serving.openai_server`), vLLM, SGLang. Prompts go out
as token ids (the agent loop never re-tokenizes), with `logprobs` and vLLM's `return_token_ids`,
so the reply's ids come back exactly as sampled.

A server that does not return token ids (a generic OpenAI endpoint) forces a LOSSY fallback: the
reply's text is tokenized again with the `tokenizer` you pass. Those ids can differ from the ones
the model sampled (a word split differently, a stop token that is not in the text), so the
trajectory no longer holds the model's own tokens; the engine warns once. A stop-token ending
comes back as finish_reason "stop_text" (the stop token is not in `token_ids`), so the agent loop
closes the turn with an untrained eos.

Transient failures (connection errors, timeouts, 429 and 5xx) are retried `max_retries` times
with exponential backoff, base * 2**attempt capped at `max_backoff_s` (a Retry-After header wins
when present and smaller than the cap); then OpenAIServerUnavailable. Other HTTP errors raise
OpenAIRequestError at once with the server's message. All of them are RuntimeErrors, which the
agent loop records on the batch's trajectories instead of crashing the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Self

import httpx

from agentrl_core.config import SamplingConfig
from agentrl_core.errors import AgentRLError
from agentrl_core.rollout.generation import Generation

log = logging.getLogger(__name__)

__all__ = ["OpenAIEngine", "OpenAIEngineError", "OpenAIRequestError", "OpenAIResponseError", "OpenAIServerUnavailable"]

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses worth retrying: timeouts, conflicts, rate limits and server-side failures."""


class OpenAIEngineError(AgentRLError, RuntimeError):
    """Base class of the OpenAI engine's errors."""


class OpenAIServerUnavailable(OpenAIEngineError, ConnectionError):
    """The server could not be reached, or kept failing transiently after every retry."""


class OpenAIRequestError(OpenAIEngineError):
    """The server refused the request (4xx other than 408/409/429): retrying would not help."""

    def __init__(self, status: int, message: str, error_type: str | None = None, code: str | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}" + (f" (code {code})" if code else ""))
        self.status, self.error_type, self.code = status, error_type, code


class OpenAIResponseError(OpenAIEngineError, ValueError):
    """The server answered 200 with a body that is not a usable completion."""


class OpenAIEngine:
    """Samples through an OpenAI-compatible /v1/completions endpoint, `max_batch` prompts per request.

    Chunk c of a call with seed s is sent with seed s + c, like HFEngine, so against agentrl's
    server (same model, same batch size) it returns what HFEngine would.
    """

    def __init__(
        self, base_url: str, model: str, api_key: str | None = None, *, tokenizer: Any = None,
        return_token_ids: bool = True, max_batch: int = 32, timeout_s: float = 300.0, max_retries: int = 3,
        backoff_s: float = 0.5, max_backoff_s: float = 8.0, transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_batch < 1 or max_retries < 0:
            raise ValueError(f"max_batch must be >= 1 and max_retries >= 0 (got {max_batch}, {max_retries})")
        if not return_token_ids and tokenizer is None:
            raise ValueError("return_token_ids=False needs a tokenizer to turn reply text back into token ids")
        self.url = _v1(base_url) + "/completions"
        self.model, self.tokenizer, self.return_token_ids = model, tokenizer, return_token_ids
        self.max_batch, self.max_retries = max_batch, max_retries
        self.backoff_s, self.max_backoff_s, self._sleep = backoff_s, max_backoff_s, sleep
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(headers=headers, timeout=timeout_s, transport=transport)
        self._warned = False

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:  # never shows the API key
        return f"OpenAIEngine(url={self.url!r}, model={self.model!r})"

    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig, seed: int) -> list[Generation]:
        """One reply per prompt, in order; chunk c of `max_batch` prompts uses seed + c."""
        out: list[Generation] = []
        for c, start in enumerate(range(0, len(prompts), self.max_batch)):
            chunk = [list(map(int, p)) for p in prompts[start:start + self.max_batch]]
            body = self._post(self._payload(chunk, sampling, seed + c))
            out.extend(self._parse(body, len(chunk)))
        return out

    def _payload(self, prompts: list[list[int]], sampling: SamplingConfig, seed: int) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model, "prompt": prompts, "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature, "top_p": sampling.top_p, "n": 1, "seed": seed, "logprobs": 1,
        }
        if sampling.top_k:
            payload["top_k"] = sampling.top_k  # vLLM's extension; OpenAI itself has no top_k
        if self.return_token_ids:
            payload["return_token_ids"] = True
        return payload

    # -- HTTP with bounded retries ---------------------------------------------------------------
    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                resp = self._client.post(self.url, json=payload)
            except httpx.TransportError as exc:  # connect/read errors and timeouts
                if last:
                    raise OpenAIServerUnavailable(
                        f"{self.url} unreachable after {attempt + 1} attempts: {type(exc).__name__}: {exc}"
                    ) from exc
                self._sleep(self._delay(attempt, None))
                continue
            if resp.status_code == 200:
                return _json(resp)
            if resp.status_code not in RETRY_STATUS:
                raise _request_error(resp)
            if last:
                raise OpenAIServerUnavailable(
                    f"{self.url} kept failing after {attempt + 1} attempts; last: {_request_error(resp)}"
                )
            self._sleep(self._delay(attempt, resp.headers.get("retry-after")))
        raise AssertionError("unreachable")  # the loop always returns or raises

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        """backoff_s * 2**attempt, at most max_backoff_s; a shorter Retry-After (seconds) wins."""
        delay = min(self.backoff_s * 2**attempt, self.max_backoff_s)
        try:
            return min(delay, max(0.0, float(retry_after))) if retry_after is not None else delay
        except ValueError:  # an HTTP-date Retry-After: keep our own backoff
            return delay

    # -- parsing ---------------------------------------------------------------------------------
    def _parse(self, body: dict[str, Any], count: int) -> list[Generation]:
        choices = body.get("choices")
        if not isinstance(choices, list) or len(choices) != count:
            got = len(choices) if isinstance(choices, list) else type(choices).__name__
            raise OpenAIResponseError(f"expected {count} choices (one per prompt), got {got}")
        ordered = sorted(choices, key=lambda ch: ch.get("index", 0))
        return [self._generation(ch) for ch in ordered]

    def _generation(self, choice: dict[str, Any]) -> Generation:
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        finish = choice.get("finish_reason") or "length"
        if choice.get("token_ids") is not None:
            ids = [int(t) for t in choice["token_ids"]]
        else:
            ids, finish = self._retokenize(choice.get("text", ""), finish)
        if logprobs is None or len(logprobs) != len(ids):
            n = "none" if logprobs is None else len(logprobs)
            raise OpenAIResponseError(
                f"the server returned {len(ids)} tokens but {n} log-probs; the engine needs one log-prob per "
                "token (a server that honours `logprobs` and `return_token_ids`, e.g. vLLM or agentrl's own)"
            )
        return Generation(ids, [float(x) for x in logprobs], finish)

    def _retokenize(self, text: str, finish: str) -> tuple[list[int], str]:
        """The lossy fallback: reply text -> ids with our tokenizer (see the module docstring)."""
        if self.tokenizer is None:
            raise OpenAIResponseError(
                "the server returned no token_ids (it ignores `return_token_ids`); pass tokenizer= to "
                "OpenAIEngine to tokenize the reply text instead (lossy), or use a server that returns them"
            )
        if not self._warned:
            log.warning("%s returns no token ids: tokenizing reply text again, which may not give the ids the "
                        "model sampled (lossy); prefer a server that supports return_token_ids", self.url)
            self._warned = True
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if finish == "stop" and not (ids and ids[-1] == eos):
            finish = "stop_text"  # the stop token is not in the ids: the loop closes the turn itself
        return ids, finish


def _v1(base_url: str) -> str:
    """`http://host:port`, `.../v1` or `.../v1/` all give `http://host:port/v1`."""
    url = base_url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def _json(resp: httpx.Response) -> dict[str, Any]:
    try:
        body = resp.json()
    except ValueError as exc:
        raise OpenAIResponseError(f"the server answered 200 with a body that is not JSON: {resp.text[:200]!r}") from exc
    if not isinstance(body, dict):
        raise OpenAIResponseError(f"expected a JSON object, got {type(body).__name__}")
    return body


def _request_error(resp: httpx.Response) -> OpenAIRequestError:
    """An OpenAI-shaped error body `{"error": {"message", "type", "code"}}` or, failing that, the raw text."""
    try:
        err = resp.json().get("error") or {}
    except (ValueError, AttributeError):
        err = {}
    if not isinstance(err, dict):
        err = {"message": str(err)}
    message = err.get("message") or resp.text[:300] or resp.reason_phrase
    return OpenAIRequestError(resp.status_code, str(message), err.get("type"), err.get("code"))
