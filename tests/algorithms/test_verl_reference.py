"""agentrl's RL math against verl 0.9.1 (`verl/trainer/ppo/core_algos.py`, `verl/utils/torch_functional.py`).

A differential test: the same seeded random batches (groups of 1..8 with ties, all-equal groups of
fractional rewards, masks with environment-token gaps, padding and empty rows; float64 and float32) go
through agentrl and through verl, imported as a test-only dependency (scripts/setup.sh installs it with
--no-deps), and every value and every gradient w.r.t. logp (autograd) is compared. The cases live in
`verl_reference.py` beside this file; `bench/verl_reference.py` prints the same table, and so does this
module at its end (`pytest -s`).

Compared: grpo (with and without std; drgrpo) vs compute_grpo_outcome_advantage and its vectorized
version; rloo vs compute_rloo_outcome_advantage(_vectorized); reinforce_pp (gamma 1 and 0.9: verl carries
the return through mask-0 tokens, agentrl discounts by model tokens only, the same thing) and
reinforce_pp_baseline vs verl's; ppo_clip (dual clip) vs compute_policy_loss_vanilla, gspo vs
compute_policy_loss_gspo, vanilla_pg vs compute_policy_loss_reinforce (verl's REINFORCE loss, -A * logp,
the same thing; it is not in verl's loss registry but reached through loss_mode bypass_mode with
loss_type reinforce), each under the four aggregation modes vs agg_loss, on the full batch (verl's own
denominators) and on a micro-batch (LossNorm vs global_batch_info), with clipfrac, dual clipfrac and
ppo_kl; k1/k2/k3 vs kl_penalty k1,kl/k2,mse/k3,low_var_kl; tis_weights vs verl's token-level truncated
IS weights (rollout_corr_helper.compute_rollout_correction_weights, rollout_is="token", a float
threshold = the cap) and the weighted losses; entropy_from_logits vs verl_F.entropy_from_logits. GiGPO
has no counterpart in core_algos: it is compared with the paper's equations restated in
`verl_reference.gigpo_reference`. verl's losses take an ActorConfig: the smallest one it accepts is built
(`verl_reference.actor_config`: strategy, rollout_n and a micro-batch size are required by its checks).

Differences on purpose, each asserted, not skipped:
- A group of one gets A = 0 in every agentrl group estimator: it has no relative signal. verl gives GRPO
  r/(1 + eps) (mean 0, std 1), Dr.GRPO and RLOO r, RF++-baseline r before whitening.
- A group whose rewards are all exactly equal gets A = 0 exactly (grpo, drgrpo, rloo, opmd, gigpo's
  episode level), in float32 and float64. verl divides the rounding noise of the group mean by std + 1e-6:
  8 float32 rewards of 0.3 give |A| = 0.029 there, 16 of 3.7 give 0.19.
- reinforce_pp_baseline: the groups without spread (one sample, or all rewards equal) get 0 exactly and are
  left out of the batch whitening; the others equal verl's RF++-baseline run on them alone. verl whitens
  every group together, so a group without signal gets -mean/std there (0.42 in the test's example), a push
  that depends on the rest of the batch.
- Whitening (REINFORCE++) values that are all equal gives exactly 0; verl's masked_whiten returns the
  rounding noise of its mean (sum / (N + 1e-8)) times rsqrt(0 + 1e-8) = 1e4.
- masked_whiten's eps: agentrl (x - m) / (s + eps), eps = 1e-6, verl (x - m') * rsqrt(v' + 1e-8). Both are
  exact whitening up to these guards; the relative difference is eps/s - 0.5e-8/s^2 to first order, plus
  |m| 1e-8 / (N s) absolute from verl's N + 1e-8: the REINFORCE++ rows add 1.5x that bound, computed from
  each batch's s, m and N, to the dtype's tolerance (s ~ 0.3..1 here: ~1e-5 relative).
- seq-mean-token-mean divides each row by max(1, L) in agentrl and by L + 1e-8 in verl: 1e-8/L relative,
  inside float64's rtol (1e-7); an empty row is 0 in both.
- seq-mean-token-sum-norm: verl's default divisor is the micro-batch's padded width; agentrl's is always the
  constant algorithm.loss_scale_tokens. Both are given the same constant here.
- ppo_kl (a statistic): agentrl clamps each token's log-ratio to +-20 in every loss, as verl's PPO loss
  does; verl's gspo and reinforce losses average the unclamped log-ratios. Compared equal where no
  |log-ratio| > 20; beyond, each side's own formula is asserted.
- entropy with -inf logits (tokens removed by top-k/top-p): agentrl gives the entropy of the finite logits
  and a finite gradient (0 at the removed ones); verl gives NaN (0 * -inf).
- verl's vectorized GRPO accumulates its group statistics in float32 whatever the input dtype, so its
  float64 results are compared at float32's tolerance.

Tolerances (`verl_reference.TOL`), |agentrl - verl| <= atol + rtol |verl| elementwise: float64 rtol 1e-7,
atol 1e-12 (the two sides round differently, ~1e-15, except verl's 1e-8 guards above); float32 rtol 1e-5,
atol 1e-6 (a few ulps of 6e-8 in means, stds and sums of up to ~100 terms, amplified up to ~30x where
(r - mean) / std cancels; the aggregated losses and gradients are O(1e-2..1)). The table prints the
largest differences measured per dtype.

verl missing: the tests are skipped with a reason naming the setup step, except where
AGENTRL_REQUIRE_VERL=1 (.ci/run sets it), where that is a failure: CI cannot pass without running them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.algorithms import verl_reference as vr

REQUIRE_ENV = "AGENTRL_REQUIRE_VERL"
ROWS: list[vr.Row] = []


@pytest.fixture(scope="module")
def verl():
    """verl's modules; a skip naming the setup step, or a failure where AGENTRL_REQUIRE_VERL=1."""
    try:
        return vr.load_verl()
    except ImportError as e:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {e}")
        pytest.skip(str(e))


@pytest.fixture(scope="module", autouse=True)
def table():
    """Print the comparison table once the module's comparisons have run (`pytest -s` shows it)."""
    yield
    if ROWS:
        print("\nagentrl vs verl " + vr.VERL_VERSION + "\n" + vr.format_table(ROWS))


def test_verl_is_the_pinned_version(verl):
    # the comparisons below are of this exact release; another one may have moved its formulas
    assert verl.version == vr.VERL_VERSION


def test_ci_requires_verl():
    # .ci/run sets AGENTRL_REQUIRE_VERL=1, so CI fails rather than skipping this module when verl is missing
    assert f"{REQUIRE_ENV}=1" in (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()


@pytest.mark.parametrize("name", list(vr.COMPARISONS))
def test_against_verl(verl, name):
    rows = vr.run(name, verl)
    ROWS.extend(rows)
    failures = [f"{r.name}: {f}" for r in rows for f in r.failures]
    assert not failures, f"{len(failures)} failed case(s):\n" + "\n".join(failures[:10])
    assert all(r.cases > 0 for r in rows), [r.name for r in rows if not r.cases]
