"""agentrl's RL math against verl 0.9.1, comparison by comparison: the cases behind test_verl_reference.py.

Each `compare_*` function runs one comparison on seeded random batches and returns a `Row`: how many
tensors it compared, the largest absolute and relative difference between agentrl and verl, and its
failures (none when every case is equal within tolerance, or shows exactly its documented difference).
The differences, their reasons and the tolerances are listed in test_verl_reference.py's docstring;
`bench/verl_reference.py` prints the same table. verl is a test-only dependency (scripts/setup.sh);
nothing of it is copied here: it is imported and called.
"""

from __future__ import annotations

import logging
import math
import os
import random
import statistics
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Callable, Sequence

import numpy as np
import torch

from agentrl_core.algorithms import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    LossNorm,
    StepBatch,
    StepTurn,
    apply_tis,
    drgrpo_advantage,
    entropy_from_logits,
    gigpo_advantage,
    grpo_advantage,
    gspo_loss,
    masked_whiten,
    opmd_advantage,
    ppo_clip_loss,
    reinforce_pp_advantage,
    reinforce_pp_baseline_advantage,
    rloo_advantage,
    tis_weights,
    vanilla_pg_loss,
)
from agentrl_core.config import AlgorithmConfig

VERL_VERSION = "0.9.1"
SETUP_STEP = (
    "scripts/setup.sh's test-only verl step (pip install --no-deps verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 "
    "omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 codetiming==1.4.0)"
)
SEEDS = (0, 1, 2, 3)
DTYPES = (torch.float64, torch.float32)
AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
EPS = 1e-6  # agentrl's default algorithm.epsilon and verl's GRPO epsilon


@dataclass(frozen=True)
class Tol:
    """|ours - verl| <= atol + rtol * |verl|, elementwise."""

    rtol: float
    atol: float


# float64: the two sides only round differently (~1e-15 relative), except verl's 1e-8 guards (masked_mean's
# N + 1e-8, seq-mean-token-mean's L + 1e-8), up to 1e-8 relative: rtol 1e-7 covers them tenfold (tighter than
# a generic 1e-6/1e-9, so a real difference of 1e-7 would show). float32: one ulp is 6e-8 relative; means,
# stds and sums of up to ~100 terms round to a few ulps, and (r - mean) / std cancels up to |r| / std ~ 30x
# on these batches: rtol 1e-5 with atol 1e-6 (losses and gradients are O(1e-2..1)); measured <= 3e-6
# relative, or <= 2e-6 absolute on values near 0 (small entropies). Whitening adds `whiten_tolerance`.
TOL = {torch.float64: Tol(rtol=1e-7, atol=1e-12), torch.float32: Tol(rtol=1e-5, atol=1e-6)}


@contextmanager
def _no_side_effects():
    """`import verl` sets RAY_ENABLE_UV_RUN_RUNTIME_ENV in os.environ and calls logging.basicConfig on the root
    logger: both are put back, so the rest of the suite (Ray tests, log capture) runs as without verl."""
    env, root = dict(os.environ), logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        for key in set(os.environ) - set(env):
            del os.environ[key]
        os.environ.update({k: v for k, v in env.items() if os.environ.get(k) != v})
        root.setLevel(level)
        root.handlers[:] = handlers


def load_verl() -> SimpleNamespace:
    """verl's modules the comparisons call; ImportError naming the setup step when verl is not installed."""
    try:
        with _no_side_effects():
            import verl
            import verl.trainer.ppo.core_algos as core
            import verl.trainer.ppo.rollout_corr_helper as rollout_corr
            import verl.utils.torch_functional as verl_F
            from verl.trainer.config import AlgoConfig
            from verl.workers.config import ActorConfig
    except ImportError as e:
        raise ImportError(f"verl {VERL_VERSION} is not importable ({e}); it is installed by {SETUP_STEP}") from e
    return SimpleNamespace(version=verl.__version__, core=core, F=verl_F, rollout_corr=rollout_corr,
                           AlgoConfig=AlgoConfig, ActorConfig=ActorConfig)


@dataclass
class Row:
    """One comparison: its cases, the largest differences agentrl - verl seen per dtype, and its failures."""

    name: str
    documented: str = ""
    """Empty: agentrl equals verl within tolerance. Otherwise the documented difference that is asserted."""
    cases: int = 0
    max_abs: dict[str, float] = field(default_factory=lambda: {"float64": 0.0, "float32": 0.0})
    max_rel: dict[str, float] = field(default_factory=lambda: {"float64": 0.0, "float32": 0.0})
    failures: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.failures:
            return f"FAIL ({len(self.failures)} of {self.cases})"
        return "documented difference" if self.documented else "equal"

    def measure(self, ours: torch.Tensor, ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Record |ours - ref| under ours' dtype (no verdict); returns it elementwise, and |ref|. Equal infinities
        differ by 0; a NaN on either side is left out here (`close` fails a NaN mismatch)."""
        ours, ref = torch.as_tensor(ours).detach(), torch.as_tensor(ref).detach()
        a, b = ours.double(), ref.double()
        diff = torch.where(a == b, torch.zeros_like(a), (a - b).abs())
        seen = ~diff.isnan()
        key = "float32" if ours.dtype == torch.float32 else "float64"
        if seen.any():
            self.max_abs[key] = max(self.max_abs[key], float(diff[seen].max()))
            nonzero = seen & (b != 0)
            if nonzero.any():
                self.max_rel[key] = max(self.max_rel[key], float((diff[nonzero] / b.abs()[nonzero]).max()))
        return diff, b.abs()

    def close(self, label: str, ours: torch.Tensor, ref: torch.Tensor, tol: Tol,
              atol_extra: float = 0.0, rtol_extra: float = 0.0) -> None:
        """One case: ours == ref elementwise within tol (+ extra), NaN where NaN."""
        self.cases += 1
        ours, ref = torch.as_tensor(ours), torch.as_tensor(ref)
        if ours.shape != ref.shape:
            self.failures.append(f"{label}: shapes {tuple(ours.shape)} vs verl {tuple(ref.shape)}")
            return
        diff, mag = self.measure(ours, ref)
        bad = (diff > tol.atol + atol_extra + (tol.rtol + rtol_extra) * mag) | (ours.isnan() != ref.isnan())
        if bad.any():
            worst = torch.where(bad, diff.nan_to_num(math.inf), torch.full_like(diff, -1.0))
            at = tuple(int(i) for i in (worst == worst.max()).nonzero()[0])
            self.failures.append(
                f"{label}: {int(bad.sum())} of {bad.numel()} differ, max |diff| {float(diff.max()):.3g}; "
                f"at {at}: agentrl {float(ours.detach()[at]):.10g}, verl {float(ref.detach()[at]):.10g}")

    def check(self, label: str, ok: bool, detail: str = "") -> None:
        """One case of a documented difference: `ok` is the documented relation."""
        self.cases += 1
        if not ok:
            self.failures.append(f"{label}: {detail}")


# ----------------------------------------------------------------------------------------- batches

REWARD_SET = (0.0, 1.0, 0.3, -0.1, 3.7, 0.5)
FLAT_VALUES = (0.3, -0.1, 3.7, 0.7, 1.1)


@dataclass
class RewardBatch:
    """Outcome rewards [B] (float64), group ids [B] (shuffled, not contiguous), mask [B,T], and per sample
    the kind of its group: "spread", "single" (a group of one) or "flat" (all rewards exactly equal)."""

    rewards: torch.Tensor
    groups: torch.Tensor
    mask: torch.Tensor
    kinds: list[str]

    def where(self, *kinds: str) -> torch.Tensor:
        return torch.tensor([k in kinds for k in self.kinds])


def random_mask(rng: random.Random, rows: int, width: int) -> torch.Tensor:
    """[rows, width] of 0/1: full rows, right-padded rows, rows with environment gaps (0-runs between
    1-runs), and one empty row; at least 2 ones in all (verl's masked_var needs 2)."""
    mask = torch.zeros(rows, width)
    empty = rng.randrange(rows) if rows > 2 else -1
    for i in range(rows):
        if i == empty:
            continue
        kind = rng.choice(("full", "padded", "gaps", "gaps"))
        if kind == "full":
            mask[i] = 1
        elif kind == "padded":
            mask[i, : rng.randint(1, width)] = 1
        else:
            t, on = rng.randint(0, 2), True
            while t < width:
                run = rng.randint(1, 3)
                mask[i, t:t + run] = 1.0 if on else 0.0
                t, on = t + run, not on
    if mask.sum() < 2:
        mask[0] = 1
    return mask


def reward_batch(seed: int, *, singletons: bool = True, groups: int = 8) -> RewardBatch:
    """Groups of sizes 1..8 with ties (rewards from a small set), one group of one and one all-equal
    group of a fractional reward at least (no group of one when not `singletons`), shuffled, over a random
    mask of width 12."""
    rng = random.Random(seed)
    rewards: list[float] = []
    ids: list[int] = []
    kinds: list[str] = []
    for k in range(groups):
        size = 1 if (k == 0 and singletons) else rng.randint(2 if (k == 1 or not singletons) else 1, 8)
        is_flat = size > 1 and (k == 1 or rng.random() < 0.2)
        if is_flat:
            values = [rng.choice(FLAT_VALUES)] * size
        else:
            while True:
                source = rng.choice(("binary", "set", "normal"))
                values = [float(rng.randint(0, 1)) if source == "binary" else rng.choice(REWARD_SET)
                          if source == "set" else rng.gauss(0.5, 1.0) for _ in range(size)]
                if size == 1 or max(values) > min(values):
                    break
        rewards += values
        ids += [1000 + 37 * k] * size
        kinds += ["single" if size == 1 else "flat" if is_flat else "spread"] * size
    order = list(range(len(rewards)))
    rng.shuffle(order)
    return RewardBatch(torch.tensor([rewards[i] for i in order], dtype=torch.float64),
                       torch.tensor([ids[i] for i in order]), random_mask(rng, len(order), 12),
                       [kinds[i] for i in order])


def token_level_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's input: each reward on its row's last response token (column 0 of an empty row, where only its
    sum, which GRPO/RLOO read, matters)."""
    out = torch.zeros(mask.shape, dtype=rewards.dtype)
    cols = torch.arange(mask.shape[1])
    last = torch.where(mask != 0, cols, torch.full_like(cols, -1)).amax(dim=1).clamp(min=0)
    out[torch.arange(len(rewards)), last] = rewards
    return out


def index(groups: torch.Tensor) -> np.ndarray:
    return np.array(groups.tolist())


def cfg(**kw) -> AlgorithmConfig:
    return AlgorithmConfig(**kw)


def whiten_tolerance(values: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(atol_extra, rtol_extra) covering the eps placement of whitening: agentrl (x - m) / (s + eps) against
    verl (x - m') * rsqrt(v' + 1e-8), m' = sum / (N + 1e-8), v' ~ s^2 (1 - 1e-8/N). Their ratio is
    1 + eps/s - 0.5e-8/s^2 to first order, and m - m' = m 1e-8 / N shifts every value by m 1e-8 / (N s):
    rtol += 1.5 (eps/s + 0.5e-8/s^2), atol += 1.5 |m| 1e-8 / (N s) (1.5: second-order terms)."""
    x = values[mask != 0].double()
    s, m, n = float(x.std()), float(x.mean()), x.numel()
    return 1.5 * abs(m) * 1e-8 / (n * s), 1.5 * (EPS / s + 0.5e-8 / s**2)


# ----------------------------------------------------------------------------------------- advantages

def _verl_adv(fn: Callable, b: RewardBatch, dtype: torch.dtype, **kw) -> torch.Tensor:
    r = b.rewards.to(dtype)
    mask = b.mask.to(dtype)
    return fn(token_level_rewards(r, mask), mask, index=index(b.groups), **kw)[0]


def _spread_only(b: RewardBatch) -> tuple[RewardBatch, torch.Tensor]:
    """The sub-batch of the samples whose group has spread (and which rows of `b` they are)."""
    keep = b.where("spread")
    rows = keep.nonzero().flatten()
    return RewardBatch(b.rewards[rows], b.groups[rows], b.mask[rows], [b.kinds[i] for i in rows.tolist()]), keep


def rfpp_baseline_vs_verl(v: SimpleNamespace, row: Row, b: RewardBatch, dtype: torch.dtype, label: str) -> None:
    """Documented: agentrl's RF++-baseline is verl's on the groups with spread alone (whitened among
    themselves) and exactly 0 on the others; verl whitens every group together, giving a group without
    signal -mean/std (and a lone sample its r before whitening)."""
    rw, m = b.rewards.to(dtype), b.mask.to(dtype)
    ours = reinforce_pp_baseline_advantage(rw, b.groups, m, cfg())
    sub, keep = _spread_only(b)
    theirs = _verl_adv(v.core.compute_reinforce_plus_plus_baseline_outcome_advantage, sub, dtype)
    sub_r = sub.rewards.to(dtype)
    centred = (sub_r - torch.tensor([sub_r[sub.groups == g].mean() for g in sub.groups], dtype=dtype))[:, None]
    row.close(f"{label} (groups with spread)", ours[keep], theirs, TOL[dtype],
              *whiten_tolerance(centred * sub.mask.to(dtype), sub.mask.to(dtype)))
    row.check(f"{label} (groups without spread are 0)", ours[~keep].abs().max().item() == 0.0 if (~keep).any()
              else True, f"max |A| {ours[~keep].abs().max().item() if (~keep).any() else 0:.3g}")


def compare_group_advantages(v: SimpleNamespace) -> list[Row]:
    """GRPO (std and not), Dr.GRPO, RLOO against verl's loop and vectorized versions, on groups with spread."""
    core = v.core
    r = [Row(name) for name in (
        "grpo vs compute_grpo_outcome_advantage", "grpo vs compute_grpo_vectorized_outcome_advantage",
        "grpo norm_adv_by_std=False vs verl grpo (Dr.GRPO)", "drgrpo vs verl grpo norm_adv_by_std_in_grpo=False",
        "rloo vs compute_rloo_outcome_advantage", "rloo vs compute_rloo_vectorized_outcome_advantage")]
    for seed in SEEDS:
        b = reward_batch(seed)
        keep = b.where("spread")
        for dtype in DTYPES:
            tol, rw, m = TOL[dtype], b.rewards.to(dtype), b.mask.to(dtype)
            label = f"seed {seed} {dtype}"
            r[0].close(label, grpo_advantage(rw, b.groups, m, cfg())[keep], _verl_adv(
                core.compute_grpo_outcome_advantage, b, dtype, epsilon=EPS)[keep], tol)
            # verl's group_mean_std accumulates in float32 whatever the input: float32's tolerance for both
            r[1].close(label, grpo_advantage(rw, b.groups, m, cfg())[keep], _verl_adv(
                core.compute_grpo_vectorized_outcome_advantage, b, dtype, epsilon=EPS)[keep], TOL[torch.float32])
            no_std = _verl_adv(core.compute_grpo_outcome_advantage, b, dtype, norm_adv_by_std_in_grpo=False)[keep]
            r[2].close(label, grpo_advantage(rw, b.groups, m, cfg(norm_adv_by_std=False))[keep], no_std, tol)
            r[3].close(label, drgrpo_advantage(rw, b.groups, m, cfg())[keep], no_std, tol)
            ours = rloo_advantage(rw, b.groups, m, cfg())[keep]
            r[4].close(label, ours, _verl_adv(core.compute_rloo_outcome_advantage, b, dtype)[keep], tol)
            r[5].close(label, ours, _verl_adv(core.compute_rloo_vectorized_outcome_advantage, b, dtype)[keep], tol)
    return r


def compare_reinforce_pp(v: SimpleNamespace) -> list[Row]:
    """REINFORCE++ (gamma 1 and 0.9, returns carried through mask gaps) and REINFORCE++-baseline (no
    singleton groups: see compare_singletons), within the whitening tolerance."""
    rows = [Row("reinforce_pp gamma=1 vs compute_reinforce_plus_plus_outcome_advantage"),
            Row("reinforce_pp gamma=0.9 (mask gaps) vs verl reinforce_plus_plus"),
            Row("reinforce_pp_baseline vs verl RF++-baseline (groups with spread; others 0)")]
    for seed in SEEDS:
        b = reward_batch(seed, singletons=False)
        for dtype in DTYPES:
            tol, rw, m = TOL[dtype], b.rewards.to(dtype), b.mask.to(dtype)
            for row, gamma in zip(rows, (1.0, 0.9)):
                ours = reinforce_pp_advantage(rw, b.groups, m, cfg(gamma=gamma))
                theirs, returns = v.core.compute_reinforce_plus_plus_outcome_advantage(
                    token_level_rewards(rw, m), m, config=v.AlgoConfig(gamma=gamma))
                row.close(f"seed {seed} {dtype}", ours, theirs, tol, *whiten_tolerance(returns, m))
            rfpp_baseline_vs_verl(v, rows[2], b, dtype, f"seed {seed} {dtype}")
    return rows


def compare_singletons(v: SimpleNamespace) -> Row:
    """Documented: a group of one gets A = 0 in agentrl; verl gives GRPO r/(1 + eps) (mean 0, std 1),
    Dr.GRPO and RLOO r, RF++-baseline r before whitening (agentrl: verl's on the groups with spread alone)."""
    row = Row("group of one: agentrl A = 0", documented="verl: GRPO r/(1+eps), RLOO r, RF++-baseline r")
    core = v.core
    for seed in SEEDS:
        b = reward_batch(seed)
        single = b.where("single")
        for dtype in DTYPES:
            rw, m, label = b.rewards.to(dtype), b.mask.to(dtype), f"seed {seed} {dtype}"
            on = single[:, None] & (m != 0)
            r_tok = rw[:, None].expand_as(m)[on]
            for name, ours, theirs, expected in (
                ("grpo", grpo_advantage(rw, b.groups, m, cfg()),
                 _verl_adv(core.compute_grpo_outcome_advantage, b, dtype, epsilon=EPS), r_tok / (1 + EPS)),
                ("drgrpo", drgrpo_advantage(rw, b.groups, m, cfg()),
                 _verl_adv(core.compute_grpo_outcome_advantage, b, dtype, norm_adv_by_std_in_grpo=False), r_tok),
                ("rloo", rloo_advantage(rw, b.groups, m, cfg()),
                 _verl_adv(core.compute_rloo_outcome_advantage, b, dtype), r_tok),
            ):
                row.measure(ours[on], theirs[on])
                row.check(f"{name} {label}", bool((ours[single] == 0).all()), f"agentrl {ours[single].unique()}")
                row.check(f"{name} verl {label}", torch.allclose(theirs[on].double(), expected.double(),
                                                                 rtol=TOL[dtype].rtol, atol=TOL[dtype].atol),
                          "verl's singleton advantage is not r")
            row.measure(reinforce_pp_baseline_advantage(rw, b.groups, m, cfg()),
                        _verl_adv(core.compute_reinforce_plus_plus_baseline_outcome_advantage, b, dtype))
            rfpp_baseline_vs_verl(v, row, b, dtype, f"reinforce_pp_baseline, {label}")
    return row


def compare_flat_groups(v: SimpleNamespace) -> Row:
    """Documented (fix a): a group whose rewards are all exactly equal gets A = 0 exactly in every agentrl
    group estimator, float32 and float64; verl divides the rounding noise of the mean by std + 1e-6."""
    row = Row("all-equal group: agentrl A = 0 exactly", documented="verl: rounding noise / (std + 1e-6) != 0")
    core = v.core
    verl_nonzero = 0.0
    for seed in SEEDS:
        b = reward_batch(seed)
        flat = b.where("flat")
        for dtype in DTYPES:
            rw, m, label = b.rewards.to(dtype), b.mask.to(dtype), f"seed {seed} {dtype}"
            for name, ours in (
                ("grpo", grpo_advantage(rw, b.groups, m, cfg())),
                ("grpo no std", grpo_advantage(rw, b.groups, m, cfg(norm_adv_by_std=False))),
                ("drgrpo", drgrpo_advantage(rw, b.groups, m, cfg())),
                ("rloo", rloo_advantage(rw, b.groups, m, cfg())),
                ("opmd mean", opmd_advantage(rw, b.groups, m, cfg())),
                ("opmd logavgexp", opmd_advantage(rw, b.groups, m, cfg(opmd_baseline="logavgexp"))),
                ("gigpo episode level", gigpo_advantage(StepBatch(rw, b.groups, m, [[] for _ in b.kinds]), cfg())),
            ):
                row.check(f"{name} {label}", ours[flat].abs().max().item() == 0.0,
                          f"max |A| {ours[flat].abs().max().item():.3g} on an all-equal group")
            theirs = _verl_adv(core.compute_grpo_outcome_advantage, b, dtype, epsilon=EPS)
            row.measure(grpo_advantage(rw, b.groups, m, cfg())[flat], theirs[flat])
            verl_nonzero = max(verl_nonzero, theirs[flat].abs().max().item())
    # a batch of flat groups only: RF++-baseline's centred returns are all 0, so the whitened ones are too
    for value, size in ((0.3, 8), (3.7, 16), (-0.1, 8), (3.7, 3), (-0.1, 7)):  # verl noisy in f32, and f64 too
        for dtype in DTYPES:
            rw = torch.full((2 * size,), value, dtype=dtype)
            groups, m = torch.tensor([0] * size + [1] * size), random_mask(random.Random(size), 2 * size, 7).to(dtype)
            ours = reinforce_pp_baseline_advantage(rw, groups, m, cfg())
            row.check(f"reinforce_pp_baseline flat batch {value} x {size} {dtype}", ours.abs().max().item() == 0.0,
                      f"max |A| {ours.abs().max().item():.3g}")
            rb = RewardBatch(rw.double(), groups, m, ["flat"] * (2 * size))
            for ours_fn, fn in ((grpo_advantage, core.compute_grpo_outcome_advantage),
                                (rloo_advantage, core.compute_rloo_outcome_advantage)):
                ours, theirs = ours_fn(rw, groups, m, cfg()), _verl_adv(fn, rb, dtype)
                row.check(f"{ours_fn.__name__} flat batch {value} x {size} {dtype}", ours.abs().max().item() == 0.0,
                          f"max |A| {ours.abs().max().item():.3g}")
                row.measure(ours, theirs)
                verl_nonzero = max(verl_nonzero, theirs.abs().max().item())
    row.check("verl gives an all-equal group a nonzero advantage somewhere", verl_nonzero > 0,
              "verl was exact on every all-equal group: the documented difference did not show")
    return row


def compare_whiten_constant(v: SimpleNamespace) -> Row:
    """Documented (fix b): whitening values that are all equal gives exactly 0 in agentrl; verl returns
    (x - x * N/(N + 1e-8)) * 1e4, the damped rounding noise of its mean."""
    row = Row("whitening all-equal values: agentrl 0 exactly", documented="verl: (x - mean') * rsqrt(0 + 1e-8)")
    verl_nonzero = 0.0
    for value in (0.1, 0.3, -0.1, 3.7):
        for dtype in DTYPES:
            rng = random.Random(int(value * 10))
            m = random_mask(rng, 5, 9).to(dtype)
            values = torch.where(m != 0, torch.tensor(value, dtype=dtype), torch.tensor(99.0, dtype=dtype))
            ours = masked_whiten(values, m, EPS)
            theirs = v.F.masked_whiten(values, m) * m
            row.measure(ours, theirs)
            verl_nonzero = max(verl_nonzero, theirs.abs().max().item())
            row.check(f"masked_whiten {value} {dtype}", ours.abs().max().item() == 0.0,
                      f"max |x| {ours.abs().max().item():.3g}")
            rewards = torch.full((5,), value, dtype=dtype)  # gamma 1: every token's return is the reward
            ours = reinforce_pp_advantage(rewards, torch.arange(5), m, cfg(gamma=1.0))
            theirs, _ = v.core.compute_reinforce_plus_plus_outcome_advantage(
                token_level_rewards(rewards, m), m, config=v.AlgoConfig(gamma=1.0))
            row.measure(ours, theirs)
            verl_nonzero = max(verl_nonzero, theirs.abs().max().item())
            row.check(f"reinforce_pp {value} {dtype}", ours.abs().max().item() == 0.0,
                      f"max |A| {ours.abs().max().item():.3g}")
    row.check("verl's whitening of equal values is nonzero somewhere", verl_nonzero > 0, "verl was exact")
    return row


# ----------------------------------------------------------------------------------------- losses

@dataclass
class LossBatch:
    logp: torch.Tensor
    old_logp: torch.Tensor
    adv: torch.Tensor
    mask: torch.Tensor
    extreme: bool
    """Some |logp - old_logp| > 20 (beyond every clamp)."""


def loss_batch(seed: int, dtype: torch.dtype, *, extreme: bool, seq_adv: bool) -> LossBatch:
    """Log-probs with ratios inside, at and beyond the clip range (and the dual-clip cap 3); with `extreme`
    a few log-ratios of +-25; advantages per sequence (broadcast) or per token; random gaps and an empty row."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    rows, width = 10, 12
    mask = random_mask(rng, rows, width).to(dtype)
    old = -3.0 * torch.rand(rows, width, generator=gen, dtype=torch.float64)
    delta = 0.3 * torch.randn(rows, width, generator=gen, dtype=torch.float64)
    big = torch.rand(rows, width, generator=gen) < 0.1
    delta = torch.where(big, torch.sign(delta) * (1.2 + torch.rand(rows, width, generator=gen,
                                                                  dtype=torch.float64)), delta)
    if extreme:
        far = torch.rand(rows, width, generator=gen) < 0.05
        delta = torch.where(far, torch.sign(delta) * 25.0, delta)
    adv = torch.randn(rows, 1 if seq_adv else width, generator=gen, dtype=torch.float64).expand(rows, width)
    return LossBatch((old + delta).to(dtype), old.to(dtype), adv.to(dtype).contiguous(), mask, extreme)


def actor_config(v: SimpleNamespace, c: AlgorithmConfig, global_info: dict | None = None):
    """The smallest verl ActorConfig its losses accept: strategy, rollout_n and a micro-batch size are
    required by its __post_init__; the clip ratios mirror agentrl's; global_batch_info goes to agg_loss."""
    return v.ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
                         clip_ratio=c.clip_ratio_low, clip_ratio_low=c.clip_ratio_low,
                         clip_ratio_high=c.clip_ratio_high, clip_ratio_c=c.clip_ratio_c,
                         global_batch_info=dict(global_info or {}))


def _ours_loss(fn: Callable, b: LossBatch, c: AlgorithmConfig, mode: str, norm: LossNorm,
               rows: slice = slice(None), weights: torch.Tensor | None = None):
    logp = b.logp[rows].clone().requires_grad_(True)
    loss, stats = fn(logp, b.old_logp[rows], b.adv[rows], b.mask[rows], c)
    if weights is not None:
        loss = apply_tis(loss, weights[rows])
    value = AGGREGATIONS[mode](loss, b.mask[rows], norm)
    (grad,) = torch.autograd.grad(value, logp)
    return value.detach(), grad, stats


def _verl_loss(fn: Callable, b: LossBatch, mode: str, config, rows: slice = slice(None),
               weights: torch.Tensor | None = None):
    logp = b.logp[rows].clone().requires_grad_(True)
    value, metrics = fn(b.old_logp[rows], logp, b.adv[rows], b.mask[rows], loss_agg_mode=mode, config=config,
                        rollout_is_weights=None if weights is None else weights[rows])
    (grad,) = torch.autograd.grad(value, logp)
    return value.detach(), grad, metrics


def _token_mean(stat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return AGGREGATIONS["token-mean"](stat, mask, LossNorm.for_batch(mask, 1))


def compare_policy_loss(v: SimpleNamespace, name: str, ours_fn: Callable, verl_fn: Callable,
                        configs: Sequence[AlgorithmConfig], stats: dict[str, str], seq_adv: bool) -> Row:
    """Values and d/d logp under every aggregation mode, on the full batch (verl's own denominators) and on
    a micro-batch (both given the full batch's: LossNorm vs global_batch_info); the stats on the full batch.
    `stats` maps agentrl stat -> verl metric; ppo_kl is compared only without |log-ratio| > 20 (documented)."""
    row = Row(name)
    for seed in SEEDS:
        for dtype in DTYPES:
            tol = TOL[dtype]
            for extreme in (False, True):
                b = loss_batch(seed, dtype, extreme=extreme, seq_adv=seq_adv)
                c = configs[seed % len(configs)]
                width = b.mask.shape[1]
                full = LossNorm.for_batch(b.mask, width)
                micro = slice(0, b.mask.shape[0] // 2)
                info = dict(dp_size=1, batch_num_tokens=full.global_tokens, global_batch_size=full.global_seqs,
                            loss_scale_factor=width)
                for mode in AGG_MODES:
                    label = f"seed {seed} {dtype} extreme={extreme} {mode}"
                    o_val, o_grad, o_stats = _ours_loss(ours_fn, b, c, mode, full)
                    t_val, t_grad, metrics = _verl_loss(verl_fn, b, mode, actor_config(v, c))
                    row.close(f"{label} value", o_val, t_val, tol)
                    row.close(f"{label} grad", o_grad, t_grad, tol)
                    o_val, o_grad, _ = _ours_loss(ours_fn, b, c, mode, full, micro)
                    t_val, t_grad, _ = _verl_loss(verl_fn, b, mode, actor_config(v, c, info), micro)
                    row.close(f"{label} micro-batch value", o_val, t_val, tol)
                    row.close(f"{label} micro-batch grad", o_grad, t_grad, tol)
                    if mode != "token-mean":
                        continue
                    for stat, metric in stats.items():
                        if stat == "ppo_kl" and extreme:
                            continue
                        row.close(f"{label} {stat}", _token_mean(o_stats[stat], b.mask),
                                  torch.tensor(metrics[metric], dtype=torch.float64), tol)
    return row


def compare_policy_losses(v: SimpleNamespace) -> list[Row]:
    core = v.core
    ppo = (cfg(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0), cfg(clip_ratio_c=2.0))
    gspo = (cfg(clip_ratio_low=3e-4, clip_ratio_high=4e-4), cfg(clip_ratio_low=0.2, clip_ratio_high=0.28))
    return [
        compare_policy_loss(v, "ppo_clip (dual clip) vs compute_policy_loss_vanilla", ppo_clip_loss,
                            core.compute_policy_loss_vanilla, ppo,
                            {"clipfrac": "actor/pg_clipfrac", "ppo_kl": "actor/ppo_kl",
                             "dual_clipfrac": "actor/pg_clipfrac_lower"}, seq_adv=False),
        compare_policy_loss(v, "gspo vs compute_policy_loss_gspo", gspo_loss, core.compute_policy_loss_gspo,
                            gspo, {"clipfrac": "actor/pg_clipfrac", "ppo_kl": "actor/ppo_kl"}, seq_adv=True),
        compare_policy_loss(v, "vanilla_pg vs compute_policy_loss_reinforce", vanilla_pg_loss,
                            _reinforce(core), ppo, {"ppo_kl": "actor/ppo_kl"}, seq_adv=False),
    ]


def _reinforce(core: ModuleType) -> Callable:
    """verl's REINFORCE loss (reached through loss_mode bypass_mode + loss_type reinforce) in the order of
    its registered losses: its first argument is the rollout's log-probs, used only for its ppo_kl metric."""
    def fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights=None):
        return core.compute_policy_loss_reinforce(old_log_prob, log_prob, advantages, response_mask,
                                                  loss_agg_mode, config, rollout_is_weights)
    return fn


def compare_gspo_extremes(v: SimpleNamespace) -> Row:
    """Fix (c): the sequence log-ratio is the mean of the RAW token log-ratios, and the clamp at 10 binds on
    sg[log s_i] + logp - sg[logp] with its gradient: [-25,0,0,0,0] gives s = e^-5, and [12,12] with A = -1
    gives loss e^10 and gradient 0, as verl."""
    row = Row("gspo extreme sequences vs compute_policy_loss_gspo")
    cases = (([-25.0, 0, 0, 0, 0], -1.0), ([-25.0, 0, 0, 0, 0], 1.0), ([12.0, 12.0, 0, 0, 0], -1.0),
             ([12.0, 12.0, 0, 0, 0], 1.0), ([30.0, -1.0, 0, 0, 0], -1.0), ([9.0, 11.0, 0, 0, 0], -1.0))
    lengths = (5, 5, 2, 2, 2, 2)
    for dtype in DTYPES:
        for c in (cfg(clip_ratio_low=0.2, clip_ratio_high=0.28), cfg(clip_ratio_low=3e-4, clip_ratio_high=4e-4)):
            old = torch.full((len(cases), 5), -2.0, dtype=dtype)
            logp = old + torch.tensor([x for x, _ in cases], dtype=dtype)
            mask = torch.tensor([[1.0] * n + [0.0] * (5 - n) for n in lengths], dtype=dtype)
            adv = torch.tensor([[a] * 5 for _, a in cases], dtype=dtype)
            b = LossBatch(logp, old, adv, mask, True)
            for mode in AGG_MODES:
                full = LossNorm.for_batch(mask, 5)
                o_val, o_grad, _ = _ours_loss(gspo_loss, b, c, mode, full)
                t_val, t_grad, _ = _verl_loss(v.core.compute_policy_loss_gspo, b, mode, actor_config(v, c))
                label = f"{dtype} eps {c.clip_ratio_low} {mode}"
                row.close(f"{label} value", o_val, t_val, TOL[dtype])
                row.close(f"{label} grad", o_grad, t_grad, TOL[dtype])
    return row


def compare_ppo_kl_extremes(v: SimpleNamespace) -> Row:
    """Documented: agentrl's ppo_kl stat clamps each token's log-ratio to +-20 in every loss (as verl's PPO
    loss, compute_policy_loss_vanilla); verl's gspo and reinforce losses report the unclamped mean."""
    row = Row("ppo_kl with |log-ratio| > 20", documented="agentrl clamps to +-20 (as verl vanilla); "
              "verl gspo/reinforce do not")
    for seed in SEEDS:
        for dtype in DTYPES:
            b = loss_batch(seed, dtype, extreme=True, seq_adv=True)
            c = cfg()
            on = b.mask != 0
            clamped = (b.old_logp - b.logp).clamp(-20, 20)[on].double().mean()
            raw = (b.old_logp - b.logp)[on].double().mean()
            for name, ours_fn, verl_fn in (("gspo", gspo_loss, v.core.compute_policy_loss_gspo),
                                           ("vanilla_pg", vanilla_pg_loss, _reinforce(v.core)),
                                           ("ppo_clip", ppo_clip_loss, v.core.compute_policy_loss_vanilla)):
                _, _, stats = _ours_loss(ours_fn, b, c, "token-mean", LossNorm.for_batch(b.mask, 12))
                _, _, metrics = _verl_loss(verl_fn, b, "token-mean", actor_config(v, c))
                ours, theirs = float(_token_mean(stats["ppo_kl"], b.mask)), metrics["actor/ppo_kl"]
                row.measure(torch.tensor(ours, dtype=dtype), torch.tensor(theirs))
                label = f"{name} seed {seed} {dtype}"
                row.check(f"{label} agentrl", math.isclose(ours, clamped, rel_tol=1e-5, abs_tol=1e-6),
                          f"agentrl {ours} != clamped mean {float(clamped)}")
                expected = clamped if name == "ppo_clip" else raw
                row.check(f"{label} verl", math.isclose(theirs, expected, rel_tol=1e-5, abs_tol=1e-6),
                          f"verl {theirs} != {float(expected)}")
    return row


def compare_aggregation(v: SimpleNamespace) -> Row:
    """agentrl's AGGREGATIONS vs verl's agg_loss on random per-token values (gaps, empty rows): values and
    gradients, with verl's default denominators (the full batch) and with explicit global ones."""
    row = Row("aggregation modes vs agg_loss")
    for seed in SEEDS:
        for dtype in DTYPES:
            rng = random.Random(seed)
            mask = random_mask(rng, 9, 11).to(dtype)
            values = torch.randn(9, 11, generator=torch.Generator().manual_seed(seed), dtype=dtype)
            for mode in AGG_MODES:
                for scale in (None, 7):
                    x = values.clone().requires_grad_(True)
                    ours = AGGREGATIONS[mode](x, mask, LossNorm.for_batch(mask, scale or mask.shape[1]))
                    (o_grad,) = torch.autograd.grad(ours, x)
                    y = values.clone().requires_grad_(True)
                    theirs = v.core.agg_loss(y, mask, mode, loss_scale_factor=scale)
                    (t_grad,) = torch.autograd.grad(theirs, y)
                    label = f"seed {seed} {dtype} {mode} scale {scale}"
                    row.close(f"{label} value", ours.detach(), theirs.detach(), TOL[dtype])
                    row.close(f"{label} grad", o_grad, t_grad, TOL[dtype])
    return row


# ----------------------------------------------------------------------------------------- KL, TIS, entropy

def compare_kl(v: SimpleNamespace) -> list[Row]:
    rows = []
    for ours_name, verl_names in (("k1", ("k1", "kl")), ("k2", ("k2", "mse")), ("k3", ("k3", "low_var_kl"))):
        row = Row(f"kl {ours_name} vs kl_penalty {'/'.join(verl_names)}")
        for seed in SEEDS:
            for dtype in DTYPES:
                gen = torch.Generator().manual_seed(seed)
                logp = -3 * torch.rand(8, 10, generator=gen, dtype=dtype)
                ref = logp + torch.cat([0.5 * torch.randn(8, 8, generator=gen, dtype=dtype),
                                        25 * torch.randn(8, 2, generator=gen, dtype=dtype)], dim=1)
                for verl_name in verl_names:
                    x = logp.clone().requires_grad_(True)
                    ours = KL_ESTIMATORS[ours_name](x, ref)
                    (o_grad,) = torch.autograd.grad(ours.sum(), x)
                    y = logp.clone().requires_grad_(True)
                    theirs = v.core.kl_penalty(y, ref, verl_name)
                    (t_grad,) = torch.autograd.grad(theirs.sum(), y)
                    label = f"seed {seed} {dtype} {verl_name}"
                    row.close(f"{label} value", ours.detach(), theirs.detach(), TOL[dtype])
                    row.close(f"{label} grad", o_grad, t_grad, TOL[dtype])
        rows.append(row)
    return rows


def compare_tis(v: SimpleNamespace) -> list[Row]:
    """tis_weights vs verl's token-level truncated IS weights (rollout_is="token", threshold = cap), and
    the weighted losses: apply_tis(ppo_clip) vs vanilla(rollout_is_weights), apply_tis(vanilla_pg) vs reinforce."""
    weights_row = Row("tis_weights vs compute_rollout_correction_weights (token, TIS)")
    loss_row = Row("apply_tis(ppo_clip / vanilla_pg) vs verl losses with rollout_is_weights")
    for seed in SEEDS:
        for dtype in DTYPES:
            b = loss_batch(seed, dtype, extreme=True, seq_adv=False)
            engine = b.old_logp + 0.2 * torch.randn(b.old_logp.shape, generator=torch.Generator().manual_seed(seed),
                                                    dtype=dtype)
            engine[0, :3] = b.old_logp[0, :3] + torch.tensor([-25.0, 25.0, 0.0], dtype=dtype)
            for cap in (1.5, 2.0, 5.0):
                ours = tis_weights(b.old_logp, engine, b.mask, cap)
                theirs, _ = v.rollout_corr.compute_rollout_correction_weights(
                    b.old_logp - engine, b.mask, rollout_is="token", rollout_is_threshold=cap)
                weights_row.close(f"seed {seed} {dtype} cap {cap}", ours, theirs, TOL[dtype])
            w = tis_weights(b.old_logp, engine, b.mask, 2.0)
            c = cfg(clip_ratio_high=0.28)
            for mode in AGG_MODES:
                norm = LossNorm.for_batch(b.mask, b.mask.shape[1])
                for name, ours_fn, verl_fn in (("ppo_clip", ppo_clip_loss, v.core.compute_policy_loss_vanilla),
                                               ("vanilla_pg", vanilla_pg_loss, _reinforce(v.core))):
                    o_val, o_grad, _ = _ours_loss(ours_fn, b, c, mode, norm, weights=w)
                    t_val, t_grad, _ = _verl_loss(verl_fn, b, mode, actor_config(v, c), weights=w)
                    label = f"{name} seed {seed} {dtype} {mode}"
                    loss_row.close(f"{label} value", o_val, t_val, TOL[dtype])
                    loss_row.close(f"{label} grad", o_grad, t_grad, TOL[dtype])
    return [weights_row, loss_row]


def compare_entropy(v: SimpleNamespace) -> list[Row]:
    """entropy_from_logits vs verl_F.entropy_from_logits: values and gradients (float64 also with logits
    around 1000, where verl's unshifted sum(p * z) cancels); and the documented -inf case."""
    equal = Row("entropy_from_logits vs verl_F.entropy_from_logits")
    masked = Row("entropy with -inf logits (top-k/top-p)", documented="agentrl finite (entropy of the finite "
                 "logits), verl NaN")
    for seed in SEEDS:
        for dtype in DTYPES:
            gen = torch.Generator().manual_seed(seed)
            logits = 3 * torch.randn(4, 6, 33, generator=gen, dtype=dtype)
            offsets = (0.0, 1000.0) if dtype == torch.float64 else (0.0,)
            for offset in offsets:
                x = (logits + offset).requires_grad_(True)
                ours = entropy_from_logits(x)
                (o_grad,) = torch.autograd.grad(ours.sum(), x)
                y = (logits + offset).requires_grad_(True)
                theirs = v.F.entropy_from_logits(y)
                (t_grad,) = torch.autograd.grad(theirs.sum(), y)
                label = f"seed {seed} {dtype} offset {offset}"
                # H = logsumexp(z) - sum(p z) is a difference of two terms of the logits' size, each rounded to an
                # ulp of max|z|: both sides are exact only to a few of those (float32, |z| ~ 8: ~4e-6, whatever H
                # is; an AVX2 CPU measured 2e-6 on H = 0.07), plus verl's cancellation at offset 1000 (~1e-13)
                extra = 4 * torch.finfo(dtype).eps * float(logits.abs().max()) + 1e-12 * offset
                equal.close(f"{label} value", ours.detach(), theirs.detach(), TOL[dtype], atol_extra=extra)
                equal.close(f"{label} grad", o_grad, t_grad, TOL[dtype], atol_extra=extra)
            removed = torch.rand(4, 6, 33, generator=gen) < 0.4
            removed[..., 0] = False  # at least one finite logit per row
            cut = logits.masked_fill(removed, -math.inf)
            x = cut.clone().requires_grad_(True)
            ours = entropy_from_logits(x)
            (o_grad,) = torch.autograd.grad(ours.sum(), x)
            theirs = v.F.entropy_from_logits(cut)
            restated = torch.stack([torch.distributions.Categorical(logits=z[z.isfinite()]).entropy()
                                    for z in cut.reshape(-1, cut.shape[-1])]).reshape(ours.shape)
            masked.measure(ours.detach(), theirs)
            label = f"seed {seed} {dtype}"
            masked.close(f"{label} agentrl = entropy of the finite logits", ours.detach(), restated, TOL[dtype])
            masked.check(f"{label} agentrl gradient finite, 0 at -inf", bool(o_grad.isfinite().all())
                         and bool((o_grad[removed] == 0).all()), "NaN or nonzero gradient at removed logits")
            masked.check(f"{label} verl NaN", bool(theirs.isnan().any()), "verl gave no NaN")
    return [equal, masked]


# ----------------------------------------------------------------------------------------- GiGPO

def gigpo_reference(rewards: list[float], groups: list[int], mask: torch.Tensor, turns: list[list[StepTurn]],
                    eps: float, by_std: bool, gamma: float, omega: float) -> torch.Tensor:
    """GiGPO (arXiv 2505.10978) restated from its equations, in plain Python floats:
    A^E_i = (R_i - mean_g R) / (std_g R + eps) (GRPO; 0 for a group of one or of equal returns);
    G_i,t = sum_k gamma^k r_i,t+k within episode i (the last turn's reward also takes R_i - sum_t r_i,t);
    A^S_i,t = (G_i,t - mean_S G) / (std_S G + eps) over S = the steps of group g in the same state (0 for a
    set of one or of equal returns); A = A^E_i + omega A^S_i,t on turn t's tokens, 0 where mask == 0."""
    def normalised(xs: list[float]) -> list[float]:
        if len(xs) < 2 or max(xs) == min(xs):
            return [0.0] * len(xs)
        mean, std = statistics.mean(xs), statistics.stdev(xs)
        return [(x - mean) / (std + eps) if by_std else x - mean for x in xs]

    episode = [0.0] * len(rewards)
    for g in set(groups):
        members = [i for i in range(len(rewards)) if groups[i] == g]
        for i, a in zip(members, normalised([rewards[i] for i in members])):
            episode[i] = a
    returns: dict[tuple[int, int], float] = {}
    sets: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for i, episode_turns in enumerate(turns):
        step_r = [t.reward for t in episode_turns]
        if step_r:
            step_r[-1] += rewards[i] - sum(step_r)
        running = 0.0
        for t in range(len(step_r) - 1, -1, -1):
            running = step_r[t] + gamma * running
            returns[i, t] = running
        for t, turn in enumerate(episode_turns):
            sets.setdefault((groups[i], turn.state), []).append((i, t))
    step = {}
    for members in sets.values():
        for key, a in zip(members, normalised([returns[k] for k in members])):
            step[key] = a
    out = torch.zeros(mask.shape, dtype=torch.float64)
    for i in range(len(rewards)):
        out[i] = episode[i]
        for t, turn in enumerate(turns[i]):
            out[i, turn.start:turn.end] += omega * step[i, t]
    return torch.where(mask != 0, out, torch.zeros_like(out))


def gigpo_batch(seed: int, dtype: torch.dtype) -> StepBatch:
    """Groups of 1..5 episodes of 0..4 turns; turn 0 is the task's start state, later states recur from a
    small set; turn rewards with ties; some episodes' returns exceed their turn rewards (shaping); one group
    whose returns are all equal; one episode with model tokens but no recorded turns."""
    rng = random.Random(seed)
    rows: list[tuple[int, float, list[StepTurn], list[float]]] = []
    for g in range(5):
        size = rng.randint(1, 5) if g != 1 else 3
        flat = g == 1
        for _ in range(size):
            mask_row, turns = [0.0, 0.0], []
            for t in range(rng.randint(1, 4) if not flat else 2):
                start = len(mask_row)
                mask_row += [1.0] * rng.randint(1, 3)
                r = rng.choice((0.0, 0.0, 0.5, 1.0, -0.1)) if not flat else 0.3
                turns.append(StepTurn(start, len(mask_row), r, "start" if t == 0 else rng.choice("abcd")))
                mask_row += [0.0] * rng.randint(1, 2)
            ret = sum(t.reward for t in turns) + (rng.choice((0.0, 0.0, 0.3, -0.2)) if not flat else 0.0)
            rows.append((100 + 7 * g, ret, turns, mask_row))
    rows.append((100, 0.5, [], [0.0, 1.0, 1.0, 1.0]))  # joins group 0, its tokens get A^E alone
    width = max(len(r[3]) for r in rows)
    mask = torch.tensor([r[3] + [0.0] * (width - len(r[3])) for r in rows], dtype=dtype)
    return StepBatch(torch.tensor([r[1] for r in rows], dtype=dtype), torch.tensor([r[0] for r in rows]),
                     mask, [r[2] for r in rows])


def compare_gigpo(v: SimpleNamespace) -> Row:
    """GiGPO has no counterpart in verl's core_algos: agentrl's gigpo_advantage vs `gigpo_reference`."""
    row = Row("gigpo vs the paper's equations (restated in the test)")
    for seed in SEEDS:
        for dtype in DTYPES:
            batch = gigpo_batch(seed, dtype)
            for c in (cfg(gigpo_gamma=0.95), cfg(gigpo_gamma=0.5, gigpo_step_weight=0.7),
                      cfg(norm_adv_by_std=False, gigpo_gamma=1.0)):
                ours = gigpo_advantage(batch, c)
                ref = gigpo_reference(batch.rewards.tolist(), batch.groups.tolist(), batch.mask, batch.turns,
                                      c.epsilon, c.norm_adv_by_std, c.gigpo_gamma, c.gigpo_step_weight)
                row.close(f"seed {seed} {dtype} gamma {c.gigpo_gamma} omega {c.gigpo_step_weight} "
                          f"std {c.norm_adv_by_std}", ours, ref, TOL[dtype])
    return row


# ----------------------------------------------------------------------------------------- the table

COMPARISONS: dict[str, Callable[[SimpleNamespace], Row | list[Row]]] = {
    "group_advantages": compare_group_advantages,
    "reinforce_pp": compare_reinforce_pp,
    "singletons": compare_singletons,
    "flat_groups": compare_flat_groups,
    "whiten_constant": compare_whiten_constant,
    "policy_losses": compare_policy_losses,
    "gspo_extremes": compare_gspo_extremes,
    "ppo_kl_extremes": compare_ppo_kl_extremes,
    "aggregation": compare_aggregation,
    "kl": compare_kl,
    "tis": compare_tis,
    "entropy": compare_entropy,
    "gigpo": compare_gigpo,
}
"""Each comparison by name (one test each); a comparison returns one Row or several."""


def run(name: str, v: SimpleNamespace) -> list[Row]:
    out = COMPARISONS[name](v)
    return out if isinstance(out, list) else [out]


def format_table(rows: Sequence[Row]) -> str:
    """comparison | cases | max abs and max rel diff in float64, then in float32 | verdict, one line per row
    (a FAIL row is followed by its first failures)."""
    width = max(len(r.name) for r in rows)
    columns = "  ".join(f"{c:>8}" for c in ("abs f64", "rel f64", "abs f32", "rel f32"))
    head = f"{'comparison':<{width}}  {'cases':>5}  {columns}  verdict"
    lines = [head, "-" * len(head)]
    for r in rows:
        diffs = "  ".join(f"{d[k]:>8.2g}" for k in ("float64", "float32") for d in (r.max_abs, r.max_rel))
        lines.append(f"{r.name:<{width}}  {r.cases:>5}  {diffs}  {r.verdict}")
        lines += [f"{'':<{width}}    ! {f}" for f in r.failures[:3]]
    return "\n".join(lines)
