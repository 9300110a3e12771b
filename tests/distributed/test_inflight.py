"""In-flight weight updates: weights offered while the engine generates are taken between decode steps,
every reply says which versions made it, and the lag bound of the asynchronous schedule."""

from __future__ import annotations

import threading

import pytest
import torch

from agentrl_core.config import SamplingConfig
from agentrl_core.grpo.step_metrics import lag_metrics, sample_lags
from agentrl_core.distributed.inflight import InflightEngine
from agentrl_core.distributed.weight_sync import StaleWeightsError
from agentrl_core.models import load_model, load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import Generation, Trajectory
from agentrl_core.rollout.episode import WEIGHT_VERSIONS
from agentrl_core.rollout.native import NativeEngine

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=12)


@pytest.fixture()
def tiny(tiny_model_path):
    model, tok = load_model(tiny_model_path), load_tokenizer(tiny_model_path)
    prompt = ChatFormat(tok).prompt_ids([{"role": "user", "content": "Put a clean apple in the fridge."}])
    return model, tok, prompt


def moved(model, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """The model's weights plus noise: another version, which samples differently."""
    gen = torch.Generator().manual_seed(1)
    return {k: v + scale * torch.randn(v.shape, generator=gen) for k, v in model.state_dict().items()}


def play(engine, prompt, switch_after: int | None = None, weights=None):
    """One continuous request stepped to its end; `weights` offered (as version 1) after `switch_after` steps."""
    rid = engine.submit(prompt, GREEDY)
    steps, done = 0, []
    while not done:
        if steps == switch_after:
            engine.offer(1, weights)
        done = [f for f in engine.step() if f.rid == rid]
        steps += 1
    return done[0].generation


def test_weights_offered_mid_reply_take_effect_at_the_next_decode_step_and_are_stamped(tiny):
    model, tok, prompt = tiny
    new = moved(model)
    reference = play(InflightEngine(NativeEngine(model, tok), model, version=0), prompt)
    assert reference.weight_versions == (0, 0) and len(reference.token_ids) >= 5
    switched = play(InflightEngine(NativeEngine(model, tok), model, version=0), prompt, switch_after=3, weights=new)
    assert switched.weight_versions == (0, 1)
    # the first three tokens came from version 0, exactly as without the switch; the rest from version 1
    assert switched.token_ids[:3] == reference.token_ids[:3]
    assert switched.logprobs[:3] == pytest.approx(reference.logprobs[:3], abs=1e-6)
    assert switched.logprobs[3:] != pytest.approx(reference.logprobs[3:len(switched.logprobs)], abs=1e-3)
    key = "model.layers.0.self_attn.q_proj.weight"  # (not the tied embedding, which two keys share)
    assert torch.equal(model.state_dict()[key], new[key])


def test_a_lock_step_engine_takes_offered_weights_between_turns(tiny):
    model, tok, prompt = tiny
    engine = InflightEngine(NativeEngine(model, tok), model, version=0)
    engine.offer(1, moved(model))
    assert engine.version == 0 and engine.offered_version() == 1  # parked until the engine runs
    (gen,) = engine.generate([prompt], GREEDY, seed=0)
    assert gen.weight_versions == (1, 1) and engine.version == 1


def test_versions_only_increase_and_a_newer_offer_replaces_a_parked_one(tiny):
    model, tok, _ = tiny
    engine = InflightEngine(NativeEngine(model, tok), model, version=3)
    with pytest.raises(StaleWeightsError, match="already holds version 3"):
        engine.offer(3, model.state_dict())
    engine.offer(4, moved(model, 0.1))
    engine.offer(5, moved(model, 0.2))
    with pytest.raises(StaleWeightsError):
        engine.offer(4, model.state_dict())
    assert engine.apply_pending() and engine.version == 5 and not engine.apply_pending()


def test_offers_from_another_thread_while_the_engine_steps(tiny):
    """The Ray case: offer_weights arrives on another thread while `run` decodes; nothing tears."""
    model, tok, prompt = tiny
    engine = InflightEngine(NativeEngine(model, tok), model, version=0)
    versions = [moved(model, 0.01 * v) for v in range(1, 6)]
    offering = threading.Thread(target=lambda: [engine.offer(v, w) for v, w in enumerate(versions, 1)])
    rids = [engine.submit(prompt, GREEDY) for _ in range(4)]
    offering.start()
    finished = []
    while engine.has_work():
        finished += engine.step()
    offering.join()
    engine.apply_pending()
    assert sorted(f.rid for f in finished) == rids and engine.version == 5
    assert all(0 <= f.generation.weight_versions[0] <= f.generation.weight_versions[1] <= 5 for f in finished)


def test_sample_lags_and_the_step_metrics():
    assert sample_lags([[2, 3], [3, 4]], trained_version=4) == (2, 0)
    assert sample_lags([], 4) is None
    trajs = [Trajectory(0, "e", 0, i, extra={WEIGHT_VERSIONS: v}) for i, v in enumerate([[[3, 3]], [[2, 3]], []])]
    assert lag_metrics(trajs, 3, 2) == {"lag/max": 1.0, "lag/mean": 0.5, "lag/last_mean": 0.0}
    # no stamps (an engine that takes no weights in flight): every token has the rollout's first version
    assert lag_metrics(trajs[2:], 3, 2) == {"lag/max": 1.0, "lag/mean": 1.0, "lag/last_mean": 1.0}
    assert lag_metrics([], 3, 2) == {}


class _OwnWeightsEngine:
    """An engine that keeps its own copy of the weights, as vLLM does (`update_weights(named tensors)`)."""

    def __init__(self) -> None:
        self.loaded: list[list[str]] = []
        self.calls = 0

    def update_weights(self, named) -> int:
        names = [n for n, _ in named]
        self.loaded.append(names)
        return len(names)

    def generate(self, prompts, sampling, seed):
        self.calls += 1
        return [Generation([7, 8], [-0.1, -0.2], "length") for _ in prompts]


def test_an_engine_with_its_own_weights_gets_them_through_update_weights_between_turns():
    engine = _OwnWeightsEngine()
    inflight = InflightEngine(engine, model=None)
    weights = {"a.weight": torch.zeros(2), "b.bias": torch.ones(1)}
    inflight.load_now(0, weights)  # the synchronous sync: at once
    assert engine.loaded == [["a.weight", "b.bias"]] and inflight.version == 0
    inflight.offer(1, weights)  # in flight: parked until the next turn's generate
    assert len(engine.loaded) == 1
    (gen,) = inflight.generate([[1, 2]], SamplingConfig(), 0)
    assert len(engine.loaded) == 2 and inflight.version == 1 and gen.weight_versions == (1, 1)


def test_the_rollout_worker_builds_vllm_through_the_factory(monkeypatch, tmp_path):
    from agentrl_core.distributed import rollout_worker
    from agentrl_core.recipes import load_recipe

    made = {}
    monkeypatch.setattr(rollout_worker, "make_engine", lambda cfg, model, tok, **kw: made.update(kind=cfg.kind,
                                                                                               model=model, **kw))
    cfg = load_recipe("countdown_grpo", ["rollout.engine.kind=vllm", "distributed.backend=ray"])
    engine, model = rollout_worker.worker_engine(cfg, str(tmp_path), tokenizer=None, device="cpu")
    assert model is None and made["kind"] == "vllm" and made["model"] is None  # vLLM loads its own copy
    assert made["model_path"] == str(tmp_path) and made["dtype"] == cfg.model.dtype
