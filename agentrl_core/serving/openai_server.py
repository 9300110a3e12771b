"""An OpenAI-compatible HTTP server over HFEngine: /v1/models, /v1/completions, /v1/chat/completions.

It lets any OpenAI client (and agentrl's own `OpenAIEngine`) sample from a local model. Beyond
OpenAI's schema it accepts what vLLM accepts for RL rollouts: token-id prompts (`prompt` as a list
of ids, or a list of such lists), `top_k`, and `return_token_ids: true`, which adds the completion's
`token_ids` (and the `prompt_token_ids`) to each choice, so a client never has to re-tokenize.

Log-probs are the chosen tokens' log softmax(z / T) as HFEngine computes them (T = 1 when greedy);
`top_logprobs` is not available (null / empty). Stop strings are applied after generation: the
reply is cut at the first match (the text excludes it; `token_ids` keep the token that completed
it). Generation runs on ONE worker thread, so the model never runs two requests at once and the
event loop keeps answering. Errors are real status codes with OpenAI's body
`{"error": {"message", "type", "param", "code"}}`.

Access (web/auth.py): with an API key (the AGENTRL_OPENAI_API_KEY environment variable, or
`--api-key`) or a server token (AGENTRL_SERVER_TOKEN, as a run starts it), every route but /health
requires `Authorization: Bearer <key or token>`, either one accepted; with neither it is open on
loopback. Request bodies are capped (web/body_limit.py) at what PROMPTS_PER_REQUEST prompts filling
the model's context take, 413 beyond.

Run: `python -m agentrl_core.serving.openai_server --model smollm2-135m-instruct --port 8000`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from agentrl_core.config import SamplingConfig
from agentrl_core.errors import AgentRLError
from agentrl_core.rollout.generation import Engine, Generation
from agentrl_core.web.auth import RUN_TOKEN, protect
from agentrl_core.web.body_limit import MIB, BodyLimit, BodySizeLimit
from agentrl_core.web.error_bodies import ErrorKinds, install_error_handlers, validation_message

if TYPE_CHECKING:
    from agentrl_core.web.server_process import ServerProcess

log = logging.getLogger(__name__)

__all__ = ["API_KEY_ENV", "OpenAIAPIError", "OpenAIServerStartError", "create_app", "launch_openai_server", "main",
           "serve_openai"]

API_KEY_ENV = "AGENTRL_OPENAI_API_KEY"
"""Environment variable holding the API key (preferred over --api-key: argv is visible in `ps`)."""
MAX_N = 16
"""Most samples per prompt (`n`)."""
PROMPTS_PER_REQUEST = 64
"""Full-context prompts the body limit leaves room for in one request: twice OpenAIEngine's default batch (32)."""
BYTES_PER_TOKEN = 16
"""JSON bytes a prompt token may take: a token id is at most 7 ("151643,"), a token of text rarely 16 even escaped."""
MAX_BODY_ENV = "AGENTRL_OPENAI_MAX_BODY_MB"
"""Raises the body limit (MiB) where no --max-body-mb is given (e.g. for a server an evaluation starts)."""


def default_body_bytes(max_context: int) -> int:
    """The largest legitimate request: PROMPTS_PER_REQUEST prompts filling the context, plus 1 MiB of options."""
    return max_context * BYTES_PER_TOKEN * PROMPTS_PER_REQUEST + MIB


class OpenAIAPIError(AgentRLError):
    """A request the server refuses: becomes `{"error": {...}}` with `status`."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type, code, param


class OpenAIServerStartError(AgentRLError, RuntimeError):
    """The OpenAI server subprocess exited or did not answer /health in time (the message has its log)."""


# -- wire types ----------------------------------------------------------------------------------
class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an unknown parameter is a 400, as at OpenAI

    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    n: int = Field(1, ge=1, le=MAX_N)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: Literal[False] = False
    user: str | None = None
    return_token_ids: bool = False


class CompletionRequest(_Request):
    """POST /v1/completions. `prompt`: text, texts, token ids, or lists of token ids."""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=1)
    """0 or 1: return the chosen tokens' log-probs (top alternatives are not available)."""
    echo: Literal[False] = False


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class ChatCompletionRequest(_Request):
    """POST /v1/chat/completions: messages rendered with the tokenizer's chat template."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: Literal[0] | None = None


# -- the generation backend ----------------------------------------------------------------------
@dataclass
class Backend:
    """The engine, its tokenizer and the served name; `run` generates on the single worker thread."""

    engine: Engine
    tokenizer: Any
    model_name: str
    max_context: int
    executor: ThreadPoolExecutor | None = None

    async def run(self, prompts: list[list[int]], sampling: SamplingConfig, seed: int) -> list[Generation]:
        if self.executor is None:
            raise RuntimeError("the server's worker thread is not running; use the app through its lifespan")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, self.engine.generate, prompts, sampling, seed)


def _default_max_tokens(req: _Request, default: int = 16) -> int:
    chat_max = getattr(req, "max_completion_tokens", None)
    return req.max_tokens or chat_max or default


def _sampling(req: _Request, max_tokens: int) -> SamplingConfig:
    return SamplingConfig(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k, max_new_tokens=max_tokens)


def _prompt_ids(backend: Backend, prompt: str | list[str] | list[int] | list[list[int]]) -> list[list[int]]:
    """The completion prompt(s) as token id lists (text is tokenized without special tokens added)."""
    items: list[str | list[int]]
    if isinstance(prompt, str):
        items = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        items = [list(prompt)]  # type: ignore[arg-type]
    else:
        items = list(prompt)  # type: ignore[arg-type]
    if not items:
        raise OpenAIAPIError(400, "prompt is empty", param="prompt")
    ids = [p if isinstance(p, list) else _encode(backend.tokenizer, p) for p in items]
    vocab = len(backend.tokenizer)
    for p in ids:
        if not p:
            raise OpenAIAPIError(400, "a prompt has no tokens; send at least one token", param="prompt")
        bad = [t for t in p if not 0 <= t < vocab]
        if bad:
            raise OpenAIAPIError(400, f"token ids {bad[:5]} are outside the vocabulary [0, {vocab})", param="prompt")
    return ids


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _check_context(backend: Backend, prompts: list[list[int]], max_tokens: int) -> None:
    longest = max(len(p) for p in prompts)
    if longest + max_tokens > backend.max_context:
        raise OpenAIAPIError(
            400, f"this model's context is {backend.max_context} tokens, but the prompt has {longest} and "
            f"max_tokens is {max_tokens}; shorten the prompt or lower max_tokens",
            param="max_tokens", code="context_length_exceeded",
        )


def _check_model(backend: Backend, name: str) -> None:
    if name != backend.model_name:
        raise OpenAIAPIError(404, f"the model {name!r} does not exist; this server serves {backend.model_name!r}",
                             param="model", code="model_not_found")


async def _generate(backend: Backend, req: _Request, prompts: list[list[int]]) -> list[Generation]:
    """n samples per prompt, in the order prompt 0 sample 0..n-1, prompt 1 ... (OpenAI's choice order)."""
    _check_model(backend, req.model)
    max_tokens = _default_max_tokens(req)
    _check_context(backend, prompts, max_tokens)
    seed = req.seed if req.seed is not None else secrets.randbelow(2**31)
    batch = [p for p in prompts for _ in range(req.n)]
    return await backend.run(batch, _sampling(req, max_tokens), seed)


# -- turning generations into choices ------------------------------------------------------------
@dataclass
class _Reply:
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str


def _apply_stop(tokenizer: Any, gen: Generation, stop: str | list[str] | None) -> _Reply:
    """Decode the reply; cut it at the earliest stop string (text without it, ids through the token
    that completed it)."""
    text = tokenizer.decode(gen.token_ids, skip_special_tokens=True)
    stops = [stop] if isinstance(stop, str) else [s for s in (stop or []) if s]
    hits = [(text.find(s), s) for s in stops if s in text]
    if not hits:
        return _Reply(gen.token_ids, gen.logprobs, text, gen.finish_reason)
    at, _ = min(hits)
    for k in range(1, len(gen.token_ids) + 1):  # the shortest prefix whose text reaches the stop
        if any(s in tokenizer.decode(gen.token_ids[:k], skip_special_tokens=True) for _, s in hits):
            break
    return _Reply(gen.token_ids[:k], gen.logprobs[:k], text[:at], "stop")


def _token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    return [tokenizer.decode([t]) for t in ids]


def _completion_logprobs(tokenizer: Any, reply: _Reply) -> dict[str, Any]:
    """OpenAI's legacy shape; text_offset sums the per-token texts (approximate for split characters)."""
    tokens = _token_texts(tokenizer, reply.token_ids)
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    return {"tokens": tokens, "token_logprobs": reply.logprobs, "top_logprobs": None, "text_offset": offsets}


def _chat_logprobs(tokenizer: Any, reply: _Reply) -> dict[str, Any]:
    tokens = _token_texts(tokenizer, reply.token_ids)
    return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                        for t, lp in zip(tokens, reply.logprobs)]}


def _usage(prompts: list[list[int]], replies: list[_Reply]) -> dict[str, int]:
    p, c = sum(len(x) for x in prompts), sum(len(r.token_ids) for r in replies)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _envelope(kind: str, backend: Backend, choices: list[dict[str, Any]], usage: dict[str, int]) -> dict[str, Any]:
    prefix = "cmpl" if kind == "text_completion" else "chatcmpl"
    return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()),
            "model": backend.model_name, "choices": choices, "usage": usage}


def _ids_extra(req: _Request, prompt: list[int], reply: _Reply) -> dict[str, Any]:
    return {"prompt_token_ids": prompt, "token_ids": reply.token_ids} if req.return_token_ids else {}


# -- routes --------------------------------------------------------------------------------------
def _routes(backend: Backend) -> APIRouter:
    router = APIRouter(prefix="/v1")

    @router.get("/models")
    async def models() -> dict[str, Any]:
        card = {"id": backend.model_name, "object": "model", "created": 0, "owned_by": "agentrl"}
        return {"object": "list", "data": [card]}

    @router.post("/completions")
    async def completions(req: CompletionRequest) -> dict[str, Any]:
        prompts = _prompt_ids(backend, req.prompt)
        gens = await _generate(backend, req, prompts)
        replies = [_apply_stop(backend.tokenizer, g, req.stop) for g in gens]
        choices = []
        for i, reply in enumerate(replies):
            lp = _completion_logprobs(backend.tokenizer, reply) if req.logprobs is not None else None
            choices.append({"index": i, "text": reply.text, "logprobs": lp, "finish_reason": reply.finish_reason,
                            **_ids_extra(req, prompts[i // req.n], reply)})
        return _envelope("text_completion", backend, choices, _usage(prompts, replies))

    @router.post("/chat/completions")
    async def chat_completions(req: ChatCompletionRequest) -> dict[str, Any]:
        messages = [m.model_dump() for m in req.messages]
        text = backend.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt = _encode(backend.tokenizer, text)
        gens = await _generate(backend, req, [prompt])
        replies = [_apply_stop(backend.tokenizer, g, req.stop) for g in gens]
        choices = [{"index": i, "message": {"role": "assistant", "content": r.text},
                    "logprobs": _chat_logprobs(backend.tokenizer, r) if req.logprobs else None,
                    "finish_reason": r.finish_reason, **_ids_extra(req, prompt, r)} for i, r in enumerate(replies)]
        return _envelope("chat.completion", backend, choices, _usage([prompt], replies))

    return router


# -- errors --------------------------------------------------------------------------------------
def _error(status: int, message: str, type: str, code: str | None = None, param: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return JSONResponse(body, status_code=status)


def _respond(status: int, kind: str, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """web.error_bodies' generic kinds in OpenAI's shape: the kind is the code, "server_error" the type of a 500."""
    if kind == "server_error":
        return _error(status, message, "server_error")
    return _error(status, message, "invalid_request_error", kind or None)


def _install_error_handlers(app: FastAPI) -> None:
    """Every failure is a real status code with OpenAI's error body; bad input is a 400 naming the parameter."""

    async def api_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, OpenAIAPIError)
        return _error(exc.status, exc.message, exc.type, exc.code, exc.param)

    async def invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errs = exc.errors()
        param = ".".join(str(p) for p in errs[0].get("loc", ()) if p != "body") if errs else None
        return _error(400, validation_message(exc, skip=("body",)), "invalid_request_error", "invalid_value", param)

    kinds = ErrorKinds(invalid="invalid_value", unexpected="server_error",
                       http={404: "not_found", 413: "request_too_large"}, http_other="", invalid_status=400)
    install_error_handlers(app, _respond, kinds, log=log, own=[(OpenAIAPIError, api_error),
                                                               (RequestValidationError, invalid)])


def create_app(engine: Engine, tokenizer: Any, model_name: str, *, max_context: int = 8192,
               api_key: str | None = None, body_limit: BodyLimit | None = None) -> FastAPI:
    """The app serving `engine` as `model_name`. Use it through uvicorn or `with TestClient(app)`
    (its lifespan starts the generation thread). An `api_key` is then required on every route but
    /health (`serve_openai` leaves it to `run_app`, which also accepts the run's token). `body_limit`
    defaults to `default_body_bytes(max_context)` (or $AGENTRL_OPENAI_MAX_BODY_MB)."""
    backend = Backend(engine, tokenizer, model_name, max_context)

    @asynccontextmanager
    async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
        backend.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentrl-generate")
        try:
            yield
        finally:
            backend.executor.shutdown(wait=True, cancel_futures=True)
            backend.executor = None

    app = FastAPI(title="agentrl OpenAI-compatible server", lifespan=lifespan)
    limit = body_limit or BodyLimit.resolve(default_body_bytes(max_context), MAX_BODY_ENV)
    app.add_middleware(BodySizeLimit, limit=limit, error_body=_too_large_body)  # never read a 300 MB prompt whole
    if api_key:  # the one bearer check every agentrl server uses (web.auth)
        protect(app, "127.0.0.1", tokens=(api_key,), error_body=_unauthorized_body, what="OpenAI server",
                accepted=_accepted(True, False))
    _install_error_handlers(app)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok", "model": model_name}

    app.include_router(_routes(backend))
    return app


def _accepted(api_key: bool, token: bool) -> str:
    """Which bearer values the server takes, as its 401 says it."""
    key = f"its API key (the {API_KEY_ENV} it was started with)"
    return f"{key} or {RUN_TOKEN}" if api_key and token else key if api_key else RUN_TOKEN


# -- the entry point -----------------------------------------------------------------------------
def serve_openai(
    model_path: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    served_model_name: str | None = None,
    api_key: str | None = None,
    dtype: str = "float32",
    max_batch: int = 32,
    threads: int | None = None,
    log_level: str = "warning",
    port_file: str | None = None,
    allow_unauthenticated: bool = False,
    max_body_mb: float | None = None,
) -> None:
    """Load the model (an alias, folder or hub id) and serve it in the foreground until SIGINT/SIGTERM.

    Binds 127.0.0.1 by default; port 0 picks a free one (announced on stderr, and written to
    `port_file` if given). The served name defaults to `model_path` as given. `threads` caps
    torch's intra-op threads (1 is much faster on a CPU shared with other busy processes).
    With `api_key` or AGENTRL_SERVER_TOKEN set, every route but /health requires one of them (either);
    with neither it is open on loopback, and refused beyond unless `allow_unauthenticated`. Bodies
    over `max_body_mb` (default: `default_body_bytes` of the model's context) get 413.
    """
    from agentrl_core.web.auth import check_bind, server_token, server_tokens

    tokens = server_tokens(api_key)
    check_bind(host, tokens[0] if tokens else None, allow_unauthenticated=allow_unauthenticated, what="OpenAI server")
    import torch

    from agentrl_core.models import load_model, load_tokenizer, resolve_model
    from agentrl_core.rollout.hf_engine import HFEngine
    from agentrl_core.web.app_runner import run_app

    if threads:
        torch.set_num_threads(threads)
    folder = resolve_model(model_path)
    tokenizer = load_tokenizer(folder)
    model = load_model(folder, dtype=dtype)
    max_context = int(getattr(model.config, "max_position_embeddings", 8192) or 8192)
    engine = HFEngine(model, tokenizer, max_batch=max_batch)
    limit = BodyLimit.resolve(default_body_bytes(max_context), MAX_BODY_ENV, max_body_mb)
    app = create_app(engine, tokenizer, served_model_name or os.fspath(model_path), max_context=max_context,
                     body_limit=limit)
    run_app(app, host, port, log_level=log_level, port_file=port_file, tokens=tokens,
            allow_unauthenticated=allow_unauthenticated, error_body=_unauthorized_body,
            accepted=_accepted(bool(api_key), bool(server_token())), banner="agentrl OpenAI server on http://{}/v1")


def _unauthorized_body(message: str) -> dict[str, Any]:
    """OpenAI's error shape for the bearer-token check of web.auth.BearerAuth."""
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}


def _too_large_body(message: str) -> dict[str, Any]:
    """OpenAI's error shape for a body refused by web.body_limit.BodySizeLimit before it is read."""
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": "request_too_large"}}


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from agentrl_core.web.app_runner import add_server_args

    p = add_server_args(argparse.ArgumentParser(prog="python -m agentrl_core.serving.openai_server",
                                                description="Serve a model over an OpenAI-compatible HTTP API."))
    p.add_argument("--model", default="smollm2-135m-instruct", help="model alias, local folder or hub id")
    p.add_argument("--served-model-name", default=None, help="name clients pass as `model` (default: --model)")
    p.add_argument("--api-key", default=None, help=f"require this bearer key (prefer the {API_KEY_ENV} env var)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--max-batch", type=int, default=32, help="most sequences per forward batch")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; a model that cannot be found or a taken port exits with code 2."""
    from agentrl_core.web.app_runner import init_server_process

    args = _parse_args(argv)
    init_server_process(args)
    try:
        serve_openai(args.model, args.host, args.port, served_model_name=args.served_model_name,
                     api_key=args.api_key or os.environ.get(API_KEY_ENV) or None, dtype=args.dtype,
                     max_batch=args.max_batch, threads=args.threads, log_level=args.log_level, port_file=args.port_file,
                     allow_unauthenticated=args.allow_unauthenticated, max_body_mb=args.max_body_mb)
    except (AgentRLError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


# -- launching it as a subprocess ------------------------------------------------------------------
def launch_openai_server(
    model: str | os.PathLike[str] = "smollm2-135m-instruct",
    host: str = "127.0.0.1",
    port: int | None = None,
    startup_timeout: float = 120.0,
    *,
    served_model_name: str | None = None,
    api_key: str | None = None,
    dtype: str = "float32",
    max_batch: int = 32,
    threads: int | None = None,
    log_level: str = "warning",
) -> ServerProcess:
    """Start `python -m agentrl_core.serving.openai_server` and wait until /health answers.

    Returns a `web.server_process.ServerProcess` handle (`.url` without /v1, `.stop()`, a context
    manager; stopped too if dropped or when this interpreter exits). The API key travels in the
    child's environment, never on its command line; so does this process's AGENTRL_SERVER_TOKEN,
    which the server then requires too (inside `run_token()`, as a run starts it: send it as the
    engine's API key, `web.auth.server_token()`).
    """
    from agentrl_core.web.server_process import spawn_server

    name = served_model_name or os.fspath(model)
    args = ["--model", os.fspath(model), "--served-model-name", name, "--dtype", dtype, "--max-batch", str(max_batch),
            "--log-level", log_level]
    if threads:
        args += ["--threads", str(threads)]
    return spawn_server("agentrl_core.serving.openai_server", args, what="the OpenAI server", host=host, port=port,
                        startup_timeout=startup_timeout, error=OpenAIServerStartError, env={API_KEY_ENV: api_key})

if __name__ == "__main__":
    sys.exit(main())
