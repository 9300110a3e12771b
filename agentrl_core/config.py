"""The typed recipe tree (pydantic): one docstring per field, validated at construction."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from agentrl_core.system.safe_names import SafeName, check_path_text, check_storage_location, path_under
from agentrl_core.secrets import Secret, SecretUrl


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
    compute_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Matmul precision (autocast over the `dtype` weights). auto: decided once per machine by what the
    hardware supports and a short measurement of this model, then cached (agentrl_core.models.compute_settings);
    bfloat16 is faster on CPUs with AVX512-BF16/AMX (bench/bench_compute_dtype.py measures by how much)
    and several times slower on AVX2-only CPUs."""
    cpu_threads: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """torch intra-op threads on the CPU. auto: the CPUs this process may use (its affinity mask and a
    cgroup quota), not torch's default of every physical core of the host."""
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
    url: SecretUrl | None = None
    """Use an already running server at this URL instead of starting one (a secret setting: a password in
    it is never stored or shown; env:VAR or prefect-secret:BLOCK name where the URL is kept)."""
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
    train_ids: str | None = None
    """Train task ids as inclusive ranges, e.g. "0-2419" or "0-99,200,300-310"; None = the first
    `train_tasks` ids of the server's train split."""
    test_ids: str | None = None
    """Test task ids as inclusive ranges, e.g. "2420-2619"; None = the first `test_tasks` ids of
    the server's test split."""
    task_file: Path | None = None
    """A verl-style parquet whose rows name the task ids (extra_info.task_id / interaction_kwargs /
    extra_info.index) per split (extra_info.split; rows without one are train tasks)."""

    @model_validator(mode="after")
    def _check_task_selection(self) -> "EnvConfig":
        from agentrl_core.tasksets.ranges import parse_ranges

        for field in ("train_ids", "test_ids"):
            text = getattr(self, field)
            if text is not None:
                try:
                    parse_ranges(text)
                except ValueError as exc:
                    raise ValueError(f"env.{field}: {exc}") from None
        if self.task_file is not None and self.train_ids is not None:
            raise ValueError("env.task_file and env.train_ids both choose the train tasks: set only one")
        return self


class EngineConfig(Section):
    kind: SafeName = "auto"
    """Rollout engine: native (agentrl's own: each episode keeps its KV cache across turns, continuous
    batching, packed forwards; Llama-family models), hf (transformers `generate`, whole history every
    turn), vllm (GPU extra), openai (any OpenAI-compatible server at `url`, token-in/token-out), or one a
    plugin package registers (agentrl_core/plugins.py; checked when the recipe is built).
    auto = native where it supports the model (and the trainer is not DeepSpeed), else hf."""
    kv_cache_mb: int | None = Field(None, ge=1)
    """native: memory for kept KV caches; when full, idle episodes' caches are evicted (and prefilled
    again if they come back), and new episodes wait. None = 2048 MiB, or a quarter of the available
    memory if that is less."""
    max_step_tokens: int = Field(2048, ge=16)
    """native: most tokens in one forward pass (one per decoding episode plus prefill chunks); a longer
    prompt is prefilled over several steps."""
    url: SecretUrl | None = None
    """Base URL of the OpenAI-compatible server (kind=openai), e.g. http://127.0.0.1:8001/v1 (a secret
    setting: credentials in it are never stored or shown; env:VAR or prefect-secret:BLOCK also work)."""
    gpu_memory_utilization: float = Field(0.5, gt=0.0, le=1.0)
    """vllm: fraction of the GPU's memory vLLM may take (weights + KV cache); leave room for training
    when colocated."""
    tensor_parallel_size: int = Field(1, ge=1)
    """vllm: GPUs one model copy is split across."""
    sleep_when_training: bool = True
    """Free the engine's memory while the trainer updates the policy. vllm: sleep mode (frees its KV
    cache, and its weights at level 2; CUDA only), woken for the next rollout; native: drops its KV
    caches and weight snapshot (stale after the update anyway), rebuilt at the next rollout."""
    sleep_level: Literal[1, 2] = 1
    """vllm: 1 offloads the weights to CPU and drops the KV cache; 2 drops both (weights are synced
    from the trainer anyway after each update)."""
    max_model_len: int | None = None
    """vllm: longest prompt + reply in tokens; None = the model's own limit."""
    enforce_eager: bool = False
    """vllm: skip CUDA-graph capture (starts faster, decodes slower)."""
    max_batch: int | None = Field(None, ge=1)
    """hf/openai: prompts per generate call (chunk c of a call uses seed + c); native: most sequences
    generating at once; None = the engine's default (hf and openai 32, native as many as the KV cache
    holds, vllm all at once: it schedules its own batches)."""


RESOURCE_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
"""A custom Ray resource name as agentrl accepts it (letters, digits, underscores)."""


class DistributedConfig(Section):
    backend: Literal["local", "ray"] = "local"
    """local: rollout and training in this process; ray: rollout workers and a trainer worker as Ray actors."""
    ray_address: str | None = None
    """Address of an existing Ray cluster (e.g. "127.0.0.1:6379" or "auto"); None = start a local Ray on
    127.0.0.1 for the run and stop it at the end."""
    rollout_workers: int = Field(1, ge=1)
    """Rollout worker actors; each step's episodes are split evenly across them."""
    cpus_per_rollout_worker: float = Field(1.0, gt=0)
    """CPUs reserved for each rollout worker (the trainer worker reserves 1)."""
    gpus_per_node: int = Field(0, ge=0)
    """GPUs of one node: no single worker (trainer or rollout) may ask for more than this."""
    rollout_gpus: float = Field(0.0, ge=0)
    """GPUs for all rollout workers together, shared evenly (rollout_gpus / rollout_workers each)."""
    train_gpus: int = Field(0, ge=0)
    """GPUs of each trainer worker (one node's worth at most; 0 = train on CPU)."""
    trainer_workers: int = Field(1, ge=1)
    """Trainer worker actors training data-parallel in one torch process group (gloo on CPU, NCCL on GPU): each
    rank trains on its share of every batch's micro-batches and the gradients are summed over the ranks. More
    than one needs trainer.backend=deepspeed, whose ZeRO shards the optimizer state and gradients (stage 2) and
    the parameters too (stage 3) over them; a run resumes only with the N it was started with."""
    max_policy_lag: int | None = Field(None, ge=0)
    """How many versions a rollout may run ahead of the trainer (agentrl_core/grpo/loop.py, one loop for both).
    None or 0: synchronous — roll out step t with the weights of t updates, update, publish, repeat (every
    executor). k >= 1: asynchronous (the Ray executor: its rollout workers hold their own weights) — the rollout
    of step t+1 runs while the trainer updates on step t, each new version reaches the workers in flight
    (between decode steps), and a batch trained at step t was begun by weights at most k updates old; the gap is
    corrected by truncated importance sampling against the engine's log-probs (algorithm.tis_cap > 0 is
    required)."""
    max_step_retries: int = Field(2, ge=0)
    """How often one step's rollout is retried after a rollout worker died (the worker is recreated first)."""
    object_store_mb: int | None = Field(None, ge=75)
    """Object store size of a local Ray in MiB (holds one copy of the weights per step); None = Ray's default."""
    trainer_resource: str | None = Field(None, pattern=RESOURCE_NAME)
    """A custom Ray resource the trainer worker asks one unit of (e.g. "agentrl_trainer", given to one node with
    `ray start --resources`), which places it on that node; None = wherever its CPUs and GPUs fit."""
    rollout_resource: str | None = Field(None, pattern=RESOURCE_NAME)
    """A custom Ray resource each rollout worker asks one unit of (e.g. "agentrl_rollout": a node given N units
    takes N workers); None = wherever their CPUs and GPUs fit."""
    ray_token_file: str | None = None
    """With ray_address: the file holding the cluster's token (Ray's token authentication, e.g. the one
    `deployments/ray_cluster.sh start` writes); None = Ray's own lookup (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH,
    ~/.ray/auth_token, with RAY_AUTH_MODE=token). The token itself is never a setting."""


class DeepSpeedConfig(Section):
    zero_stage: Literal[2, 3] = 2
    """ZeRO stage: 2 shards optimizer state and gradients, 3 also the parameters."""
    offload_optimizer: bool = False
    """Keep the optimizer states (fp32 masters and Adam moments) in CPU memory and step there
    (ZeRO-Offload; DeepSpeed's CPU Adam, which it compiles on first use)."""
    offload_params: bool = False
    """Keep the parameters in CPU memory between uses (ZeRO-3 only; ZeRO-Infinity's param offload)."""
    pin_memory: bool = True
    """Page-lock the CPU buffers of the offloads (faster copies, more locked host memory)."""
    bf16: bool = True
    """Train in bfloat16 with fp32 master weights in the optimizer (DeepSpeed's bf16 mode)."""
    allgather_bucket_size: int = Field(200_000_000, ge=1)
    """Elements per all-gather bucket (ZeRO-2): larger is faster, uses more memory."""
    reduce_bucket_size: int = Field(200_000_000, ge=1)
    """Elements per gradient reduce bucket: larger is faster, uses more memory."""
    overlap_comm: bool = True
    """Overlap gradient reduction with the backward pass."""
    stage3_max_live_parameters: int = Field(1_000_000_000, ge=1)
    """ZeRO-3: most parameter elements gathered at once before older ones are released."""
    stage3_prefetch_bucket_size: int = Field(50_000_000, ge=1)
    """ZeRO-3: parameter elements fetched ahead of their use."""
    allow_cpu: bool = False
    """Run DeepSpeed without CUDA on its CPU accelerator (gloo; one rank, or `distributed.trainer_workers`
    ranks on Ray): for tests and smoke runs only, it is slow. Its shared-memory all-reduce for CPU inference
    is never compiled (ZeRO training reduces through gloo). Without CUDA and with this off,
    backend=deepspeed is refused."""

    @model_validator(mode="after")
    def _param_offload_needs_zero3(self) -> DeepSpeedConfig:
        if self.offload_params and self.zero_stage != 3:
            raise ValueError("trainer.deepspeed.offload_params needs zero_stage=3 (ZeRO-2 keeps whole "
                             "parameters on the GPU); set zero_stage=3 or offload_params=false")
        return self


class ExperienceConfig(Section):
    enabled: bool = False
    """Retrieve experiences from the experience pool into the rollout context (the role ReMe plays in AgentEvolver)."""
    url: SecretUrl | None = None
    """Base URL of a running experience pool (http://127.0.0.1:8001); None = the flow starts one
    (agentrl_core.experience.launch_experience_pool) and sets this for the stage. A secret setting
    (env:VAR and prefect-secret:BLOCK work; credentials in it are never stored or shown)."""
    mode: Literal["mixed", "all"] = "mixed"
    """"mixed": `rollout_ratio` of each group's samples get experience, the rest none (AgentEvolver's
    train_rollout_mode); "all": every sample gets experience."""
    rollout_ratio: float = Field(0.5, ge=0.0, le=1.0)
    """In "mixed" mode, the share of each group's samples that get experience: floor(ratio * n + 0.5) of n."""
    top_k: int = Field(3, ge=1, le=100)
    """Experiences retrieved per task (most similar first)."""
    keep_in_context: bool = True
    """True: train on the trajectory with the experience block in its first message, as generated;
    False: strip the block from the stored prompt (model tokens unchanged; off-policy, see mixing.py)."""
    summariser: Literal["rule", "model"] = "rule"
    """"rule": the pool turns successful trajectories into action-sequence lessons; "model": the
    rollout engine writes each lesson (JSON when_to_use/experience), malformed replies are dropped and counted."""
    min_score: float = 0.0
    """Only trajectories with reward >= min_score are summarised, and only experiences scored >= it are retrieved."""
    summarise_failures: bool = False
    """Also store a "what not to do" lesson from failed trajectories (rule summariser)."""
    db_url: SecretUrl | None = None
    """SQLAlchemy URL of the pool's store when the flow starts it; None = SQLite at
    <run_dir>/experience.db. PostgreSQL: postgresql+psycopg://user@host:port/db. A secret setting: give
    the password through PGPASSWORD/~/.pgpass, or the whole URL as env:VAR or prefect-secret:BLOCK."""
    request_timeout_s: float = Field(60.0, gt=0.0)
    """Timeout of one request to the pool (the first one also loads the embedding model)."""


class StoreConfig(Section):
    model_config = ConfigDict(**Section.model_config, hide_input_in_errors=True)  # URLs may hold passwords

    registry_url: SecretUrl | None = None
    """SQLAlchemy URL of the run registry; None = SQLite at <run.root>/registry.db. PostgreSQL:
    postgresql+psycopg://user@host:port/db. A secret setting: give the password through PGPASSWORD or
    ~/.pgpass, or the whole URL as env:VAR or prefect-secret:BLOCK; a password typed inline is masked
    (***) wherever the recipe is stored or shown, and `agentrl run` moves it into the run's environment."""

    @field_validator("registry_url")
    @classmethod
    def _check_registry_url(cls, url: Secret | None) -> Secret | None:
        if url is None or url.is_reference or url.is_redacted:
            return url
        text = url.reveal()
        backend = text.split("://", 1)[0].split("+", 1)[0] if "://" in text else None
        if backend not in ("sqlite", "postgresql"):
            raise ValueError("registry_url must be a SQLAlchemy URL of SQLite or PostgreSQL, e.g. "
                             "sqlite:////abs/path/registry.db or postgresql+psycopg://user@host:5432/db")
        return url
    storage: Annotated[str | None, AfterValidator(check_storage_location)] = None
    """Where checkpoints, datasets and reports are copied: None = the local run folder only; an
    s3://bucket/prefix URI uploads them through boto3 (the usual AWS settings or a Prefect block)."""
    s3_endpoint_url: SecretUrl | None = None
    """S3-compatible endpoint (MinIO, moto: http://127.0.0.1:9000); None = boto3's own lookup
    (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL / ~/.aws/config, else AWS). Credentials come from the
    environment, ~/.aws or a Prefect AwsCredentials block; a secret setting all the same (env:VAR works)."""
    s3_region: str | None = None
    """AWS region of the bucket; None = boto3's own lookup (AWS_DEFAULT_REGION, ~/.aws/config)."""
    aws_credentials_block: str | None = None
    """Name of a Prefect `AwsCredentials` block (prefect-aws) holding the S3 credentials; None = the
    usual AWS settings (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws)."""


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
    """An episode whose context would exceed this is truncated; an opening prompt this long or longer is refused
    (PromptTooLongError). `python -m agentrl_core.rollout.prompt_fit --recipe R` measures a recipe's prompts."""
    engine: EngineConfig = EngineConfig()
    """Which engine generates the rollouts."""


class AlgorithmConfig(Section):
    advantage: str = "grpo"
    """Advantage estimator, by name (see agentrl_core.algorithms.ADVANTAGE_ESTIMATORS, and
    STEP_ADVANTAGE_ESTIMATORS for those that read each turn, e.g. gigpo)."""
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
    kl_rows: Literal["all", "signal"] = "all"
    """Which samples carry the KL term: every sample, or only those with a policy-gradient signal (a
    non-zero advantage). With "signal", a group whose rewards are all equal is neither forwarded nor
    back-propagated even with kl_coef > 0 (as with kl_coef = 0), which on a multi-turn env where most
    groups carry no signal saves most of the update; the KL term then regularises the samples that move
    the policy, normalised by the whole batch as before."""
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
    rollout_filter_ratio: float = Field(1.0, gt=0.0, le=1.0)
    """RAGEN's variance filter (StarPO-S): train on the max(1, floor(ratio * G + 0.5)) of a step's G groups
    whose rewards have the largest std (algorithms.variance_filter); 1 = every group (off), 0.25 = RAGEN's."""
    r3l_retry: bool = False
    """R3L rollout: each failed attempt reflects (JSON), then retries from the step it names with its
    guidance in context; the retry joins its attempt's group (pair with advantage r3l, policy_loss opmd)."""
    r3l_max_reflection_tokens: int = Field(256, ge=16)
    """R3L: the most tokens one reflection may generate."""
    r3l_max_retries_per_group: int = Field(0, ge=0)
    """R3L: at most this many failed attempts of a group reflect and retry (lowest sample first); 0 = all."""
    gigpo_gamma: float = Field(0.95, ge=0.0, le=1.0)
    """GiGPO: discount per turn of the step return G_t = sum_k gamma^k r_{t+k} within an episode."""
    gigpo_step_weight: float = Field(1.0, ge=0.0)
    """GiGPO: omega in A = A^E + omega * A^S (episode-level plus step-level advantage); 0 = GRPO's advantage."""

    @model_validator(mode="after")
    def _check_r3l(self) -> "AlgorithmConfig":
        if self.r3l_retry and self.dynamic_sampling:
            raise ValueError("algorithm.r3l_retry cannot be combined with dynamic_sampling (a retry joins its "
                             "attempt's group, so refill rounds would mix); set one of them to false")
        if self.r3l_retry and self.tis_cap > 0:
            raise ValueError("algorithm.r3l_retry cannot be combined with tis_cap > 0: a retry's engine log-probs "
                             "were computed with the guidance in context; set tis_cap: 0")
        return self


class OptimConfig(Section):
    lr: float = Field(1e-5, gt=0.0)
    """Peak learning rate of AdamW."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas, each in [0, 1)."""

    @field_validator("betas")
    @classmethod
    def _check_betas(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must both be in [0, 1) (AdamW's moment decay rates), got {list(betas)}; "
                             "the usual value is [0.9, 0.999]")
        return betas
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
    """Passes over each rollout batch (PPO epochs); above 1 the old log-probs are recomputed and clipping acts."""
    ppo_mini_batches: int = Field(1, ge=1)
    """Optimizer steps per pass: the batch is cut into this many mini-batches of whole groups (at most one per
    task), each its own step (verl's ppo_mini_batch_size = batch / this); above 1 the old log-probs come from
    the policy before the first step (recomputed, or the engine's) and clipping acts. A step of the stage then
    takes ppo_epochs x ppo_mini_batches optimizer steps; the lr schedule and warm-up count optimizer steps."""
    old_logprobs: Literal["recompute", "engine"] = "recompute"
    """Where the PPO ratio's old log-probs come from. recompute: the policy before the update (with one
    epoch the current log-probs detached, ratio 1, no extra pass; with more, one no-grad forward over the
    batch). engine: the rollout engine's own log-probs of the sampled tokens, which cost nothing and are
    exact for on-policy samples up to numerics (the gap is `rollout_logp_diff`): saves that forward with
    ppo_epochs > 1, and with one epoch makes the ratio correct for any engine/trainer mismatch."""
    micro_batch_tokens: int = Field(4096, ge=64)
    """Token budget of one micro-batch (padding included); gradients accumulate across them. The memory
    budget (`memory_gb`) may lower it."""
    memory_gb: float | None = Field(None, gt=0)
    """The memory (GiB) the GRPO training process may use on CPU: the KV cache, micro-batch tokens and
    gradient checkpointing are sized to fit it, the plan is printed at the start and each step logs its
    peak (training.memory_plan). None: 80% of what is available when the stage starts (set it for
    runs that repeat bit for bit)."""
    shared_prefix: bool = True
    """Run what the samples of a GRPO group share once in the training forward instead of once per sample:
    the prompt, and the turns a near-deterministic policy repeats (sub-groups of samples with a long common
    prefix attend to one copy of its keys and values); the same loss and gradients up to rounding. Off with
    gradient checkpointing or DeepSpeed, which run every row whole."""
    save_every: int = Field(2, ge=1)
    """Save a checkpoint every N steps (and at the end)."""
    keep_last: int = Field(2, ge=1)
    """Keep only the last N complete checkpoints."""
    max_minutes: float | None = Field(None, gt=0)
    """Stop the GRPO stage after the step that crosses this much wall time (counted from the stage's start
    in this process), saving a checkpoint there; None = run all `steps`. For equal-time comparisons."""
    val_every: int = Field(0, ge=0)
    """Validate every N steps (verl's test_freq): greedy success on `val_tasks` held-out tasks, logged as
    val/* beside the training metrics (and once before the first step); 0 = off."""
    val_tasks: int = Field(64, ge=1)
    """Validation tasks: the last `val_tasks` ids of the train split the run does not train on, so settings
    and the best checkpoint are chosen on the training range and the test split is scored only once."""
    export_best: bool = False
    """Keep the checkpoint with the best validation success (grpo/best/) and export and evaluate it as
    "grpo-best" beside the last one (needs val_every > 0)."""
    resume: Literal["auto", "never"] = "auto"
    """auto: continue from the last complete checkpoint of this run folder; never: refuse a non-empty one."""
    seed: int = Field(0, ge=0, lt=2**32)
    """Seed of sampling and shuffling (0 to 2**32 - 1: derived per-step seeds must fit torch's 64 bits)."""
    backend: Literal["torch", "deepspeed"] = "torch"
    """torch: plain PyTorch on this process; deepspeed: DeepSpeed ZeRO (GPU extra), see `deepspeed`."""
    deepspeed: DeepSpeedConfig = DeepSpeedConfig()
    """DeepSpeed options (backend=deepspeed)."""


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
    k: int = Field(1, ge=1, le=10_000)
    """Samples per task (pass@k uses all of them); at most 10,000 (sample j is seeded seed + j, which must
    stay a 64-bit seed)."""
    seed: int = Field(1234, ge=0, lt=2**32)
    """Seed of the first sample; sample j uses seed + j (0 to 2**32 - 1)."""
    sampling: SamplingConfig = SamplingConfig(temperature=0.0)
    """Sampling for evaluation (temperature 0 = greedy)."""
    batch_size: int = Field(32, ge=1)
    """Episodes played in parallel."""
    reuse: bool = False
    """Reuse an earlier evaluation under run.root that played exactly these episodes (the same model weights,
    code, env settings, tasks, limits, eval settings, dtypes, engine and machine arithmetic;
    evaluation.reuse) instead of playing them again."""


class RunConfig(Section):
    name: SafeName = "demo"
    """Run name: the run folder is <root>/<name>, so one folder name (letters, digits, '.', '_', '-')."""
    root: Annotated[Path, AfterValidator(check_path_text)] = Path("runs")
    """Folder holding run folders."""

    @model_validator(mode="after")
    def _run_dir_stays_under_root(self) -> "RunConfig":
        path_under(self.root, self.name)
        return self


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
    distributed: DistributedConfig = DistributedConfig()
    """Where rollout and training run (this process, or Ray actors)."""
    experience: ExperienceConfig = ExperienceConfig()
    """The experience pool."""
    store: StoreConfig = StoreConfig()
    """The run registry and object storage."""

    @property
    def run_dir(self) -> Path:
        """The run folder."""
        return Path(self.run.root) / self.run.name

    @property
    def grpo_optimizer_steps(self) -> int:
        """Optimizer steps of the whole GRPO stage: steps x ppo_epochs x mini-batches (at most one per task)."""
        per_pass = min(self.trainer.ppo_mini_batches, self.rollout.tasks_per_step)
        return self.trainer.steps * self.trainer.ppo_epochs * per_pass

    @model_validator(mode="after")
    def _check_names(self) -> "RecipeConfig":
        from agentrl_core.config_checks import check_combinations, check_learnable, check_registered_names

        check_registered_names(self)
        check_combinations(self)
        check_learnable(self)
        return self


def dump(cfg: BaseModel) -> dict[str, Any]:
    """A JSON-safe dict of a config."""
    return cfg.model_dump(mode="json")
