"""VLLMEngine against a recording fake of the `vllm` package (the real one needs a GPU; see the gpu test)."""

from __future__ import annotations

import importlib.machinery
import math
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from agentrl_core.config import EngineConfig, SamplingConfig
from agentrl_core.errors import ConfigError
from agentrl_core.rollout import HFEngine, OpenAIEngine
from agentrl_core.rollout import vllm_engine as ve
from agentrl_core.rollout.engine_factory import make_engine

EOS, EOT = 2, 7


@dataclass
class Logprob:
    logprob: float
    rank: int = 1


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str


@dataclass
class RequestOutput:
    outputs: list[Completion]


@dataclass
class FakeModel:
    loaded: dict[str, torch.Tensor] = field(default_factory=dict)

    def load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> set[str]:
        self.loaded.update({n: t.clone() for n, t in weights})
        return {n for n, _ in weights}


class FakeLLM:
    """Records every call in `log`; `generate` answers from `script` (a function of the prompt ids)."""

    instances: ClassVar[list[FakeLLM]] = []
    script: ClassVar[Any] = None

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs, self.log = kwargs, []
        self.worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(model=FakeModel()))
        FakeLLM.instances.append(self)

    def generate(self, prompts: list[dict], params: list[Any], use_tqdm: bool = True) -> list[RequestOutput]:
        self.log.append(("generate", prompts, params))
        return [RequestOutput([FakeLLM.script(p["prompt_token_ids"])]) for p in prompts]

    def sleep(self, level: int = 1) -> None:
        self.log.append(("sleep", level))

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.log.append(("wake_up", tags))

    def collective_rpc(self, method: Any, args: tuple = (), kwargs: dict | None = None) -> list[Any]:
        self.log.append(("collective_rpc", [n for n, _ in args[0]]))
        return [method(self.worker, *args, **(kwargs or {}))]

    def reset_prefix_cache(self) -> bool:
        self.log.append(("reset_prefix_cache",))
        return True


class SamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    mod = types.ModuleType("vllm")
    mod.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    mod.LLM, mod.SamplingParams = FakeLLM, SamplingParams
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}  # a TypedDict in vLLM
    mod.inputs = inputs
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    FakeLLM.instances = []
    FakeLLM.script = lambda ids: Completion([ids[-1] + 1, EOS], [{ids[-1] + 1: Logprob(-0.5)}, {EOS: Logprob(-0.25)}],
                                            "stop")
    return mod


class Tok:
    pad_token_id, eos_token_id = 0, EOS


def engine(**cfg: Any) -> ve.VLLMEngine:
    return ve.VLLMEngine("/models/x", Tok(), EngineConfig(kind="vllm", **cfg), seed=3, stop_token_ids=[EOT])


def test_llm_is_built_from_config(fake_vllm: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    engine(gpu_memory_utilization=0.3, tensor_parallel_size=1, max_model_len=2048, enforce_eager=True)
    kw = FakeLLM.instances[-1].kwargs
    assert kw["model"] == "/models/x" and kw["gpu_memory_utilization"] == 0.3 and kw["tensor_parallel_size"] == 1
    assert kw["enable_sleep_mode"] is True and kw["logprobs_mode"] == "processed_logprobs"
    assert kw["max_model_len"] == 2048 and kw["enforce_eager"] is True and kw["seed"] == 3
    assert ve.os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # in-process core: weights by reference
    engine(sleep_when_training=False)
    assert FakeLLM.instances[-1].kwargs["enable_sleep_mode"] is False and "max_model_len" not in FakeLLM.instances[-1].kwargs


def test_prompt_and_sampling_translation(fake_vllm: types.ModuleType) -> None:
    eng = engine()
    sampling = SamplingConfig(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=5)
    eng.generate([[5, 6], [5, 6], [9]], sampling, seed=5)
    (_, prompts, params), = FakeLLM.instances[-1].log
    assert prompts == [{"prompt_token_ids": [5, 6]}, {"prompt_token_ids": [5, 6]}, {"prompt_token_ids": [9]}]
    p = params[1].__dict__
    assert (p["temperature"], p["top_p"], p["top_k"], p["max_tokens"], p["n"]) == (0.7, 0.9, 20, 5, 1)
    assert p["logprobs"] == 0 and p["stop_token_ids"] == [EOS, EOT] and p["detokenize"] is False
    # distinct per-request seeds, so a GRPO group's identical prompts do not sample identical replies
    assert [q.seed for q in params] == [5 * 1_000_003, 5 * 1_000_003 + 7_919, 5 * 1_000_003 + 2 * 7_919]
    eng.generate([[1]], SamplingConfig(temperature=0.0, top_k=0), seed=0)
    greedy = FakeLLM.instances[-1].log[-1][2][0].__dict__
    assert greedy["temperature"] == 0.0 and greedy["top_k"] == 0 and greedy["seed"] == 0


def test_chunks_use_seed_plus_chunk_index(fake_vllm: types.ModuleType) -> None:
    eng = engine(max_batch=2)
    out = eng.generate([[1], [2], [3]], SamplingConfig(), seed=10)
    calls = [c for c in FakeLLM.instances[-1].log if c[0] == "generate"]
    assert [len(c[1]) for c in calls] == [2, 1]
    assert calls[1][2][0].seed == ve.request_seed(11, 0) == 11 * 1_000_003
    assert [g.token_ids for g in out] == [[2, EOS], [3, EOS], [4, EOS]]


def test_logprobs_of_the_sampled_tokens(fake_vllm: types.ModuleType) -> None:
    FakeLLM.script = lambda ids: Completion(
        [11, 12, EOT], [{11: Logprob(-1.5), 3: Logprob(-0.1, rank=1)}, {12: Logprob(-2.0)}, {EOT: Logprob(-0.0625)}],
        "stop")
    (gen,) = engine().generate([[4]], SamplingConfig(), seed=0)
    assert gen.token_ids == [11, 12, EOT] and gen.logprobs == [-1.5, -2.0, -0.0625] and gen.finish_reason == "stop"


def test_length_and_bad_finishes(fake_vllm: types.ModuleType) -> None:
    FakeLLM.script = lambda ids: Completion([8, 9], [{8: Logprob(-1.0)}, {9: Logprob(-math.log(2))}], "length")
    (gen,) = engine().generate([[4]], SamplingConfig(max_new_tokens=2), seed=0)
    assert gen.finish_reason == "length" and gen.logprobs[1] == pytest.approx(-0.6931471805599453)
    FakeLLM.script = lambda ids: Completion([8], [{8: Logprob(-1.0)}], "stop")  # a stop string: not ours
    with pytest.raises(ve.VLLMEngineError, match="expected 'length' or a stop token"):
        engine().generate([[4]], SamplingConfig(), seed=0)
    FakeLLM.script = lambda ids: Completion([8], [{5: Logprob(-1.0)}], "length")
    with pytest.raises(ve.VLLMEngineError, match="do not include the sampled token 8"):
        engine().generate([[4]], SamplingConfig(), seed=0)
    FakeLLM.script = lambda ids: Completion([8], None, "length")
    with pytest.raises(ve.VLLMEngineError, match="1 tokens but no log-prob entries"):
        engine().generate([[4]], SamplingConfig(), seed=0)


def test_sleep_then_update_weights_wakes_in_order(fake_vllm: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    eng = engine(sleep_level=2)
    eng.sleep()
    with pytest.raises(ve.VLLMEngineError, match="sleeps"):
        eng.generate([[1]], SamplingConfig(), seed=0)
    monkeypatch.setattr(ve, "SYNC_CHUNK_BYTES", 40)  # 3 x 16-byte fp32 tensors -> chunks of 2 and 1
    weights = [(f"w{i}", torch.full((4,), float(i))) for i in range(3)]
    assert eng.update_weights(iter(weights)) == 3
    llm = FakeLLM.instances[-1]
    assert llm.log == [("sleep", 2), ("wake_up", ["weights"]), ("collective_rpc", ["w0", "w1"]),
                       ("collective_rpc", ["w2"]), ("reset_prefix_cache",), ("wake_up", ["kv_cache"])]
    for name, t in weights:
        assert torch.equal(llm.worker.model_runner.model.loaded[name], t)
    assert eng.sleeping is None
    eng.generate([[1]], SamplingConfig(), seed=0)  # awake again


def test_update_weights_awake_only_resets_prefix_cache(fake_vllm: types.ModuleType) -> None:
    eng = engine(sleep_when_training=False)
    eng.update_weights([("a", torch.zeros(2))])
    assert [c[0] for c in FakeLLM.instances[-1].log] == ["collective_rpc", "reset_prefix_cache"]
    with pytest.raises(ve.VLLMEngineError, match="without sleep mode"):
        eng.sleep()
    with pytest.raises(ve.VLLMEngineError, match="no tensors"):
        eng.update_weights([])


def test_missing_vllm_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # find_spec then reports it absent
    with pytest.raises(ve.VLLMUnavailableError, match=r"pip install 'agentrl\[vllm\]'"):
        engine()


# -- make_engine ---------------------------------------------------------------------------------
def test_make_engine_picks_by_kind(fake_vllm: types.ModuleType, tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    hf = make_engine(EngineConfig(kind="hf", max_batch=4), model, Tok(), stop_token_ids=[EOT])
    assert isinstance(hf, HFEngine) and hf.max_batch == 4 and hf.stop_ids == [EOS, EOT]
    assert make_engine(EngineConfig(kind="hf"), model, Tok()).max_batch == 32  # HFEngine's own default
    vl = make_engine(EngineConfig(kind="vllm"), None, Tok(), model_path=tmp_path / "m", dtype="float16")
    assert isinstance(vl, ve.VLLMEngine) and FakeLLM.instances[-1].kwargs["dtype"] == "float16"
    with make_engine(EngineConfig(kind="openai", url="http://127.0.0.1:9/v1"), None, Tok(),
                     model_path=tmp_path / "policy") as oa:
        assert isinstance(oa, OpenAIEngine) and oa.model == "policy"
        assert oa.url == "http://127.0.0.1:9/v1/completions"
    with pytest.raises(ConfigError, match="pass model_path"):
        make_engine(EngineConfig(kind="vllm"), None, Tok())
    with pytest.raises(ConfigError, match="needs rollout.engine.url"):
        make_engine(EngineConfig(kind="openai"), None, Tok(), served_model="p")


# -- the real vLLM (GPU machines only) -------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None,
                    reason="needs CUDA and vLLM")
def test_real_vllm_logprobs_match_hf_and_weight_sync(tmp_path: Path) -> None:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from agentrl_core.models import resolve_model
    from agentrl_core.training.logprobs import token_logprobs

    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    eng = ve.VLLMEngine(str(tmp_path), tok, EngineConfig(kind="vllm", gpu_memory_utilization=0.3, enforce_eager=True),
                        dtype="bfloat16")
    prompt = tok("hello there", add_special_tokens=False)["input_ids"]
    (gen,) = eng.generate([prompt], SamplingConfig(temperature=0.8, max_new_tokens=8), seed=1)
    ids = torch.tensor([prompt + gen.token_ids]).cuda()
    mask = torch.zeros_like(ids)[:, 1:]
    mask[:, len(prompt) - 1:] = 1
    ref = token_logprobs(model.cuda(), ids, torch.ones_like(ids), mask, temperature=0.8).logprobs[0, len(prompt) - 1:]
    assert torch.allclose(torch.tensor(gen.logprobs), ref.float().cpu(), atol=0.1)
    eng.sleep()
    eng.update_weights((n, torch.zeros_like(p)) for n, p in model.named_parameters())
    assert eng.generate([prompt], SamplingConfig(temperature=0.0, max_new_tokens=2), seed=0)[0].token_ids
