"""KL estimators at hand points, their expectations, clamps, and entropy_from_logits."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl_core.algorithms import KL_ESTIMATORS, entropy_from_logits, kl_k1, kl_k2, kl_k3

LOGP = torch.tensor([[-1.0, -2.0, -0.5]])
REF = torch.tensor([[-1.5, -1.0, -0.5]])


def test_k1_hand_values():
    # logp - ref = [-1 + 1.5, -2 + 1, 0] = [0.5, -1, 0]
    torch.testing.assert_close(kl_k1(LOGP, REF), torch.tensor([[0.5, -1.0, 0.0]]))


def test_k2_hand_values():
    # 0.5 * [0.5^2, 1^2, 0] = [0.125, 0.5, 0]
    torch.testing.assert_close(kl_k2(LOGP, REF), torch.tensor([[0.125, 0.5, 0.0]]))


def test_k3_hand_values():
    # d = ref - logp = [-0.5, 1, 0]; exp(d) - d - 1 = [0.60653 + 0.5 - 1, 2.71828 - 2, 0] = [0.10653, 0.71828, 0]
    torch.testing.assert_close(kl_k3(LOGP, REF), torch.tensor([[0.1065307, 0.7182818, 0.0]]))


def test_k3_is_non_negative():
    gen = torch.Generator().manual_seed(0)
    logp, ref = -torch.rand(50, 40, generator=gen) * 10, -torch.rand(50, 40, generator=gen) * 10
    assert (kl_k3(logp, ref) >= 0).all()


def test_k3_clamps():
    # d = -100 -> -20: e^-20 + 20 - 1 = 19.0 -> clamped to 10; d = +100 -> 20: e^20 - 21 -> 10
    out = kl_k3(torch.tensor([[0.0, -100.0]]), torch.tensor([[-100.0, 0.0]]))
    torch.testing.assert_close(out, torch.tensor([[10.0, 10.0]]))


def test_expectations_match_exact_kl():
    # Under sampling from p, E_p[k1] = E_p[k3] = KL(p || q) exactly; k2 is biased but >= 0.
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.2, 0.6])
    exact = float((p * (p / q).log()).sum())
    logp, logq = p.log()[None], q.log()[None]
    assert float((p * kl_k1(logp, logq)[0]).sum()) == pytest.approx(exact, rel=1e-6)
    assert float((p * kl_k3(logp, logq)[0]).sum()) == pytest.approx(exact, rel=1e-6)
    assert float((p * kl_k2(logp, logq)[0]).sum()) > 0


@pytest.mark.parametrize("name", sorted(KL_ESTIMATORS))
def test_zero_when_policies_agree_and_shape_checked(name):
    fn = KL_ESTIMATORS[name]
    torch.testing.assert_close(fn(LOGP, LOGP.clone()), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="one shape"):
        fn(torch.zeros(2, 3), torch.zeros(2, 4))


def test_entropy_hand_value():
    # p = softmax([0, ln 3]) = [1/4, 3/4]; H = 0.25 ln 4 + 0.75 ln(4/3) = 0.346574 + 0.215762 = 0.562335
    h = entropy_from_logits(torch.tensor([0.0, math.log(3.0)]))
    assert h.item() == pytest.approx(0.562335, abs=1e-6)


def test_entropy_matches_direct_computation():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=gen, dtype=torch.float64) * 4
    p = torch.softmax(logits, -1)
    direct = -(p * p.log()).sum(-1)
    out = entropy_from_logits(logits)
    assert out.shape == (3, 5)
    torch.testing.assert_close(out, direct)


def test_uniform_logits_give_log_vocab():
    for v in (1, 7, 49152):
        torch.testing.assert_close(entropy_from_logits(torch.full((2, v), 3.5)), torch.full((2,), math.log(v)))


def test_entropy_stable_for_large_and_minus_inf_logits():
    # [1000, 1000] -> log 2 (no overflow); [0, 0, -inf] -> log 2 and a finite gradient
    assert entropy_from_logits(torch.tensor([1000.0, 1000.0])).item() == pytest.approx(math.log(2))
    logits = torch.tensor([0.0, 0.0, float("-inf")], requires_grad=True)
    h = entropy_from_logits(logits)
    h.backward()
    assert h.item() == pytest.approx(math.log(2))
    assert torch.isfinite(logits.grad).all()
