"""The typed recipe tree (pydantic): one docstring per field, validated at construction."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Section(BaseModel):
    """Base of every config section: unknown keys are rejected, fields are validated on set."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


LLAMA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear layers of a Llama-style decoder block (attention and MLP projections)."""


class LoraConfig(Section):
    enabled: bool = False
    """Train LoRA adapters (peft) instead of all weights; exports merge them into the base model."""
    r: int = Field(16, ge=1, le=4096)
    """Rank of each adapter: A is [r, d_in], B is [d_out, r]."""
    alpha: int = Field(32, ge=1)
    """Scale numerator: the update is (alpha / r) * B A."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the adapters' input while training."""
    target_modules: list[str] = Field(default_factory=lambda: list(LLAMA_PROJECTIONS), min_length=1)
    """Names of the linear layers that get adapters (default: every Llama attention and MLP projection)."""

    @field_validator("target_modules")
    @classmethod
    def _check_targets(cls, names: list[str]) -> list[str]:
        if any(not name.strip() for name in names) or len(set(names)) != len(names):
            raise ValueError(f"target_modules must be distinct, non-empty module names, got {names}")
        return names


class ModelConfig(Section):
    name: str = "smollm2-135m-instruct"
    """Model to start from: an alias (`smollm2-135m-instruct`), a local Hugging Face folder, or a hub id."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype for training and rollout (the CPU wants float32)."""
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    """Matmul precision (autocast): bfloat16 over float32 weights is about 2x faster on CPUs with AVX512-BF16."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    lora: LoraConfig = LoraConfig()
    """LoRA adapters instead of full fine-tuning (off by default)."""


class EnvConfig(Section):
    name: str = "household"
    """Registered environment name (see `agentrl envs`)."""
    host: str = "127.0.0.1"
    """Address the environment server binds to."""
    port: int | None = None
    """Port of the environment server; None picks a free one."""
    url: str | None = None
    """Use an already running server at this URL instead of starting one."""
    max_turns: int = Field(8, ge=1, le=100)
    """Most model turns per episode (the episode is truncated after)."""
    train_tasks: int = Field(64, ge=1)
    """How many tasks of the train split to train on."""
    test_tasks: int = Field(24, ge=1)
    """How many tasks of the test split to evaluate on."""
    kwargs: dict[str, Any] = {}
    """Constructor arguments of the environment (difficulty, limits), e.g. {max_objects: 3}."""
    request_timeout_s: float = Field(30.0, gt=0)
    """HTTP timeout of one environment request."""


class SamplingConfig(Section):
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature (0 = greedy)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    top_k: int = Field(0, ge=0)
    """Keep only the k most likely tokens (0 = off)."""
    max_new_tokens: int = Field(48, ge=1)
    """Most tokens the model may write in one turn."""


class RolloutConfig(Section):
    sampling: SamplingConfig = SamplingConfig()
    """How the engine samples during training rollouts."""
    group_size: int = Field(4, ge=1)
    """Samples per task (the GRPO group)."""
    tasks_per_step: int = Field(4, ge=1)
    """Tasks per training step; the batch is tasks_per_step x group_size trajectories."""
    max_context_tokens: int = Field(1024, ge=64)
    """An episode whose context would exceed this is truncated."""


class AlgorithmConfig(Section):
    advantage: str = "grpo"
    """Advantage estimator, by name (see agentrl_core.algorithms.ADVANTAGE_ESTIMATORS)."""
    norm_adv_by_std: bool = True
    """GRPO: divide by the group's standard deviation (False gives Dr.GRPO's estimator)."""
    policy_loss: str = "ppo_clip"
    """Policy loss, by name (see agentrl_core.algorithms.POLICY_LOSSES)."""
    clip_ratio_low: float = Field(0.2, ge=0.0)
    """PPO: lower clip epsilon."""
    clip_ratio_high: float = Field(0.2, ge=0.0)
    """PPO: upper clip epsilon (DAPO's clip-higher uses 0.28)."""
    clip_ratio_c: float = Field(3.0, gt=1.0)
    """Dual-clip PPO: cap of the loss for negative advantages."""
    loss_agg_mode: str = "token-mean"
    """Loss aggregation, by name (see agentrl_core.algorithms.AGGREGATIONS)."""
    loss_scale_tokens: int = Field(256, ge=1)
    """Constant divisor of seq-mean-token-sum-norm aggregation."""
    kl_estimator: str = "k3"
    """KL estimator in the loss, by name (k1, k2, k3)."""
    kl_coef: float = Field(0.0, ge=0.0)
    """Weight of the KL term in the loss (0 = no reference model)."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus (subtracted from the loss)."""
    epsilon: float = Field(1e-6, gt=0.0)
    """Added to the group std before dividing."""
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    """REINFORCE++: discount per response token of the outcome reward (1 = every token's return is the reward)."""
    opmd_baseline: Literal["mean", "logavgexp"] = "mean"
    """OPMD/R3L group baseline: the mean, or tau*log(mean exp(r/tau))."""
    opmd_tau: float = Field(1.0, gt=0.0)
    """OPMD temperature: the logavgexp baseline and the loss's 1/(1+tau)."""
    success_threshold: float = 1.0
    """RAFT/R3L: a sample whose reward is >= this counts as a success."""
    r3l_amplify: float = Field(3.0, ge=0.0)
    """R3L: factor on the non-negative advantages of unsuccessful samples."""
    sample_filter: Literal["none", "success"] = "none"
    """Which trajectories train: all, or only successful ones (RAFT: reward >= success_threshold)."""
    tis_cap: float = Field(0.0, ge=0.0)
    """Truncated importance sampling: weight tokens by min(exp(old_logp - engine_logp), cap); 0 = off (2-3 typical)."""
    overlong_buffer_len: int = Field(0, ge=0)
    """DAPO overlong shaping: tokens of buffer before the maximum response length; 0 = off."""
    overlong_penalty_factor: float = Field(1.0, ge=0.0)
    """DAPO overlong shaping: the penalty at the maximum length."""
    kl_reward_coef: float = Field(0.0, ge=0.0)
    """KL in the reward: r - beta * sum_t kl_t (estimator kl_estimator); 0 = off. Use this or kl_coef."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal and roll out more groups to refill the batch."""
    dynamic_sampling_max_rounds: int = Field(3, ge=1)
    """DAPO: the most generation rounds one step may use to refill (then it trains on what it has)."""


class OptimConfig(Section):
    lr: float = Field(1e-5, gt=0.0)
    """Peak learning rate of AdamW."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    warmup_steps: int = Field(0, ge=0)
    """Linear warm-up steps."""
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    """Learning-rate shape after warm-up."""
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0)
    """Floor of cosine/linear decay, as a fraction of lr."""
    grad_clip: float = Field(1.0, gt=0.0)
    """Clip the global gradient norm to this."""


class TrainerConfig(Section):
    steps: int = Field(4, ge=0)
    """Optimizer steps of GRPO."""
    optim: OptimConfig = OptimConfig(lr=2e-6)
    """Optimizer of the GRPO stage."""
    ppo_epochs: int = Field(1, ge=1)
    """Optimizer steps per rollout batch (PPO epochs); above 1 the old log-probs are recomputed and clipping acts."""
    micro_batch_tokens: int = Field(4096, ge=64)
    """Token budget of one micro-batch (padding included); gradients accumulate across them."""
    save_every: int = Field(2, ge=1)
    """Save a checkpoint every N steps (and at the end)."""
    keep_last: int = Field(2, ge=1)
    """Keep only the last N complete checkpoints."""
    resume: Literal["auto", "never"] = "auto"
    """auto: continue from the last complete checkpoint of this run folder; never: refuse a non-empty one."""
    seed: int = 0
    """Seed of sampling and shuffling."""


class SFTConfig(Section):
    enabled: bool = True
    """Warm-start with supervised fine-tuning on expert demonstrations before GRPO."""
    demos: int = Field(48, ge=1)
    """Expert episodes to generate from the train split."""
    epochs: int = Field(2, ge=1)
    """Passes over the demonstrations."""
    batch_size: int = Field(8, ge=1)
    """Demonstrations per optimizer step."""
    optim: OptimConfig = OptimConfig(lr=1e-4, warmup_steps=2, schedule="cosine", min_lr_ratio=0.1)
    """Optimizer of the SFT stage."""
    save_every: int = Field(10, ge=1)
    """Save a checkpoint every N steps (and at the end)."""
    dataset: Path | None = None
    """Train on these conversations instead of expert demos: .jsonl of {"messages", "meta"} records
    (see agentrl_core.sft_data), or an AgentGym trajectory .json. All of them are used (sft.demos is ignored)."""
    packing: bool = False
    """Pack several conversations into one sequence (block-diagonal attention, positions restarting
    per sample) up to trainer.micro_batch_tokens, instead of padding each to the longest."""


class EvalConfig(Section):
    enabled: bool = True
    """Evaluate base, SFT and GRPO models at the end."""
    k: int = Field(1, ge=1)
    """Samples per task (pass@k uses all of them)."""
    seed: int = 1234
    """Seed of the first sample; sample j uses seed + j."""
    sampling: SamplingConfig = SamplingConfig(temperature=0.0)
    """Sampling for evaluation (temperature 0 = greedy)."""
    batch_size: int = Field(32, ge=1)
    """Episodes played in parallel."""


class RunConfig(Section):
    name: str = "demo"
    """Run name: the run folder is <root>/<name>."""
    root: Path = Path("runs")
    """Folder holding run folders."""


class RecipeConfig(Section):
    """The whole job: one typed tree, read from a YAML recipe plus dotted overrides."""

    run: RunConfig = RunConfig()
    """Where outputs go."""
    model: ModelConfig = ModelConfig()
    """Which model to train."""
    env: EnvConfig = EnvConfig()
    """Which environment, and how many tasks."""
    rollout: RolloutConfig = RolloutConfig()
    """How trajectories are collected."""
    algorithm: AlgorithmConfig = AlgorithmConfig()
    """Advantage, loss, KL and entropy."""
    trainer: TrainerConfig = TrainerConfig()
    """The GRPO stage."""
    sft: SFTConfig = SFTConfig()
    """The SFT warm-start stage."""
    eval: EvalConfig = EvalConfig()
    """The evaluation stage."""

    @property
    def run_dir(self) -> Path:
        """The run folder."""
        return Path(self.run.root) / self.run.name

    @model_validator(mode="after")
    def _check_names(self) -> "RecipeConfig":
        from agentrl_core.config_checks import check_registered_names

        check_registered_names(self)
        return self


def dump(cfg: BaseModel) -> dict[str, Any]:
    """A JSON-safe dict of a config."""
    return cfg.model_dump(mode="json")
