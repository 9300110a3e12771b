"""AgentGym's two HTTP conventions, served over the same sessions as the native API.

A (ALFWorld, BabyAI, SciWorld, TextCraft, …): `POST /create` -> `{"id"}`; `POST /reset {"id",
"data_idx"|"game"}`; `POST /step {"id", "action"}` -> `{observation, reward, done, ...}`;
`GET /observation|/available_actions|/detail?id=`; `POST /close {"id"}`.

B (WebShop, SQLGym, SearchQA): `POST /create` -> bare int `env_idx`; `POST /reset {"env_idx",
"session_id"|"item_id"|"id"}` -> `[observation, null]`; `POST /step {"env_idx", "action"}` ->
`{state, reward, done, info}`; `GET /observation|/available_actions|/instruction_text?env_idx=`;
`POST /close {"env_idx"}` -> `{"closed"}`.

Unlike AgentGym's own servers, errors are real HTTP statuses and ids are never recycled.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from agentrl_core.env_service.env_api import (
    AgentGymBCloseRequest,
    AgentGymBCloseResponse,
    AgentGymBResetRequest,
    AgentGymBStepRequest,
    AgentGymBStepResponse,
    AgentGymCloseRequest,
    AgentGymCloseResponse,
    AgentGymCreateResponse,
    AgentGymResetRequest,
    AgentGymResetResponse,
    AgentGymStepRequest,
    AgentGymStepResponse,
)
from agentrl_core.env_service.sessions import Session, SessionStore


def routes(store: SessionStore, env_name: str, convention: str) -> APIRouter:
    """The router of `convention` ("A" or "B") for one env."""
    if convention == "B":
        return _convention_b(store, env_name)
    return _convention_a(store, env_name)


def _detail(s: Session) -> dict[str, Any]:
    return {
        "id": s.id, "env": s.env_name, "task_id": s.task_id, "observation": s.observation,
        "available_actions": s.available_actions, "reward": s.reward, "done": s.done, "steps": s.steps,
        "info": s.info,
    }


def _convention_a(store: SessionStore, env_name: str) -> APIRouter:
    router = APIRouter(tags=[f"agentgym/{env_name}"])

    @router.post("/create")
    async def create() -> AgentGymCreateResponse:
        return AgentGymCreateResponse(id=(await store.create(env_name)).id)

    @router.post("/reset")
    async def reset(body: AgentGymResetRequest) -> AgentGymResetResponse:
        session = await store.lookup(body.id, env_name)
        obs, _ = await store.reset(session, body.task_id)
        return AgentGymResetResponse(id=body.id, observation=obs, available_actions=session.available_actions)

    @router.post("/step")
    async def step(body: AgentGymStepRequest) -> AgentGymStepResponse:
        session = await store.lookup(body.id, env_name)
        r = await store.step(session, body.action)
        return AgentGymStepResponse(
            observation=r.observation, reward=r.reward, done=r.terminated or r.truncated,
            available_actions=session.available_actions, info=r.info,
        )

    @router.get("/observation")
    async def observation(id: int) -> str:  # noqa: A002 - AgentGym's parameter name
        return (await store.lookup(id, env_name)).observation

    @router.get("/available_actions")
    async def available_actions(id: int) -> list[str]:  # noqa: A002
        return (await store.lookup(id, env_name)).available_actions

    @router.get("/detail")
    async def detail(id: int) -> dict[str, Any]:  # noqa: A002
        return _detail(await store.lookup(id, env_name))

    @router.post("/close")
    async def close(body: AgentGymCloseRequest) -> AgentGymCloseResponse:
        await store.remove(body.id, env_name)
        return AgentGymCloseResponse(id=body.id)

    return router


def _convention_b(store: SessionStore, env_name: str) -> APIRouter:
    router = APIRouter(tags=[f"agentgym/{env_name}"])

    @router.post("/create")
    async def create() -> int:
        return (await store.create(env_name)).id

    @router.post("/reset")
    async def reset(body: AgentGymBResetRequest) -> tuple[str, None]:
        session = await store.lookup(body.env_idx, env_name)
        obs, _ = await store.reset(session, body.task_id)
        return obs, None

    @router.post("/step")
    async def step(body: AgentGymBStepRequest) -> AgentGymBStepResponse:
        session = await store.lookup(body.env_idx, env_name)
        r = await store.step(session, body.action)
        done = r.terminated or r.truncated
        return AgentGymBStepResponse(state=r.observation, observation=r.observation, reward=r.reward, done=done, info=r.info)

    @router.get("/observation")
    async def observation(env_idx: int) -> str:
        return (await store.lookup(env_idx, env_name)).observation

    @router.get("/available_actions")
    async def available_actions(env_idx: int) -> Any:
        session = await store.lookup(env_idx, env_name)
        raw = session.info.get("available_actions")
        return raw if isinstance(raw, dict) else session.available_actions  # WebShop: {has_search_bar, clickables}

    @router.get("/instruction_text")
    async def instruction_text(env_idx: int) -> str:
        session = await store.lookup(env_idx, env_name)
        return str(session.info.get("instruction", session.observation))

    @router.get("/detail")
    async def detail(env_idx: int) -> dict[str, Any]:
        return _detail(await store.lookup(env_idx, env_name))

    @router.post("/close")
    async def close(body: AgentGymBCloseRequest) -> AgentGymBCloseResponse:
        await store.remove(body.env_idx, env_name)
        return AgentGymBCloseResponse(closed=True)

    return router
