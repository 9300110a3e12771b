"""Success rates as statistics: Wilson intervals, paired model comparisons, and verdicts in plain words.

A rate measured on n tasks is uncertain by about 1/sqrt(n): 3/16 and 2/16 are not different models.
Everything here is exact-enough closed form (no resampling), so the same numbers come out
every time.

- One rate: the Wilson score interval.
- Two models on the same tasks: the difference of their success rates with a paired interval.
  With one binary outcome per task (k = 1) it is Newcombe's hybrid score interval for paired
  proportions (method 10, Statistics in Medicine 1998), with McNemar's exact test as the p-value.
  With several samples per task, the per-task differences d_t = a_t − b_t (each a success rate)
  get a paired t interval over tasks.
- The verdict names a winner only when the whole interval is on one side of 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

Z95 = 1.959963984540054
"""The standard normal's 97.5% quantile: two-sided 95% intervals."""


def wilson_interval(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion p = successes / n.

    centre = (p + z²/2n) / (1 + z²/n),  half = z / (1 + z²/n) · sqrt(p(1−p)/n + z²/4n²).
    (0, 1) when n = 0: nothing was measured.
    """
    if n <= 0:
        return 0.0, 1.0
    p = min(1.0, max(0.0, successes / n))
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def t_quantile(df: int, z: float = Z95) -> float:
    """Student t quantile with `df` degrees of freedom at the normal quantile z (Cornish–Fisher expansion,
    Abramowitz & Stegun 26.7.5; within 1e-3 of the exact value for df >= 3)."""
    if df < 1:
        return math.inf
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


def mcnemar_exact_p(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value: 2·P(X <= min(b, c)), X ~ Binomial(b + c, 1/2), capped at 1."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(a_only, b_only) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Comparison:
    """Model `a` minus model `b` on the same `n` tasks: the difference of success rates (or of the episode
    metric `metric`) and its 95% interval."""

    a: str
    b: str
    n: int
    diff: float
    low: float
    high: float
    method: str
    p_value: float | None = None
    a_only: int | None = None
    """Tasks only `a` solved (binary outcomes), the discordant pairs McNemar counts."""
    b_only: int | None = None
    metric: str = "success"
    """What is compared: "success", or the name of an environment's episode metric (envs.episode_metrics)."""

    @property
    def verdict(self) -> str:
        """"a > b" or "a < b" when the interval excludes 0, else "no difference shown"."""
        if self.low > 0:
            return f"{self.a} > {self.b}"
        if self.high < 0:
            return f"{self.a} < {self.b}"
        return "no difference shown"

    def text(self) -> str:
        """e.g. "grpo − sft: +12.5 points [4.1, 20.8] on 200 tasks (McNemar p = 0.003): grpo > sft"."""
        p = f", McNemar p = {self.p_value:.3g}" if self.p_value is not None else ""
        what = "" if self.metric == "success" else f"{self.metric}: "
        return (f"{what}{self.a} − {self.b}: {100 * self.diff:+.1f} points [{100 * self.low:+.1f}, {100 * self.high:+.1f}] "
                f"on {self.n} tasks ({self.method}{p}): {self.verdict}")

    def to_dict(self) -> dict:
        return asdict(self) | {"verdict": self.verdict}


def _newcombe_paired(a: list[float], b: list[float], z: float) -> tuple[float, float, float, int, int]:
    """(θ, low, high, a_only, b_only) for paired binary outcomes: `newcombe_paired_counts` on their 2x2 table."""
    both = sum(1 for x, y in zip(a, b) if x and y)
    a_only = sum(1 for x, y in zip(a, b) if x and not y)
    b_only = sum(1 for x, y in zip(a, b) if y and not x)
    theta, low, high = newcombe_paired_counts(both, a_only, b_only, len(a) - both - a_only - b_only, z)
    return theta, low, high, a_only, b_only


def newcombe_paired_counts(both: int, a_only: int, b_only: int, neither: int,
                           z: float = Z95) -> tuple[float, float, float]:
    """(θ, low, high): the paired difference of two success rates from its 2x2 table, Newcombe's method 10.

    With counts both = a, a_only = b, b_only = c, neither = d: p1 = (a+b)/n, p2 = (a+c)/n, θ = (b − c)/n;
    (l_i, u_i) the Wilson intervals of p_i; φ = C/sqrt((a+b)(c+d)(a+c)(b+d)) (0 if a margin is 0), where
    Newcombe's continuity-corrected C = ad − bc − n/2 if ad − bc > n/2, 0 if 0 <= ad − bc <= n/2, ad − bc if < 0;
    low = θ − sqrt((p1−l1)² − 2φ(p1−l1)(u2−p2) + (u2−p2)²), high = θ + sqrt((u1−p1)² − 2φ(u1−p1)(p2−l2) + (p2−l2)²).
    As in Newcombe (1998) and its R implementations (contingencytables' Newcombe_square_and_add_CI_paired_2x2,
    biostatUZH's confIntPairedProportion); the raw φ (no n/2) gives slightly too narrow intervals.
    Worked examples (tests/evaluation/test_stats.py): Altman et al. 2000 p. 52, (14, 5, 0, 22) -> 0.1220
    [0.0115, 0.2265]; Fagerland et al. 2017 ch. 8, (59, 6, 16, 80) -> -0.0621 [-0.1186, -0.0046].
    """
    n = both + a_only + b_only + neither
    if n <= 0:
        raise ValueError("a paired comparison needs at least one task (all four counts are 0)")
    p1, p2 = (both + a_only) / n, (both + b_only) / n
    l1, u1 = wilson_interval(both + a_only, n, z)
    l2, u2 = wilson_interval(both + b_only, n, z)
    margins = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    phi = _corrected_cross(both, a_only, b_only, neither) / math.sqrt(margins) if margins > 0 else 0.0
    theta = p1 - p2
    dl = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    du = (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2
    return theta, max(-1.0, theta - math.sqrt(max(dl, 0.0))), min(1.0, theta + math.sqrt(max(du, 0.0)))


def _corrected_cross(both: int, a_only: int, b_only: int, neither: int) -> float:
    """Newcombe's continuity-corrected ad − bc: less n/2 when above n/2, 0 in [0, n/2], unchanged below 0."""
    cross, half_n = both * neither - a_only * b_only, (both + a_only + b_only + neither) / 2
    if cross > half_n:
        return cross - half_n
    return 0.0 if cross >= 0 else float(cross)


def _paired_t(d: list[float], z: float) -> tuple[float, float, float]:
    """(mean, low, high) of the per-task differences d with a t interval: mean ± t_{n−1} · s / sqrt(n)."""
    n = len(d)
    mean = sum(d) / n
    if n < 2:
        return mean, -1.0, 1.0
    s = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = t_quantile(n - 1, z) * s / math.sqrt(n)
    return mean, max(-1.0, mean - half), min(1.0, mean + half)


def compare(a: Mapping[int, float], b: Mapping[int, float], names: tuple[str, str] = ("A", "B"),
            z: float = Z95, metric: str = "success") -> Comparison:
    """Compare two models on the tasks both were scored on; `a`/`b` map task id -> success rate (or the
    share `metric` names) on that task."""
    tasks = sorted(set(a) & set(b))
    if not tasks:
        raise ValueError(f"{names[0]} and {names[1]} share no scored task: compare models on the same tasks")
    xa, xb = [float(a[t]) for t in tasks], [float(b[t]) for t in tasks]
    if all(v in (0.0, 1.0) for v in xa + xb):
        theta, low, high, a_only, b_only = _newcombe_paired(xa, xb, z)
        return Comparison(names[0], names[1], len(tasks), theta, low, high, "paired Newcombe",
                          mcnemar_exact_p(a_only, b_only), a_only, b_only, metric=metric)
    mean, low, high = _paired_t([x - y for x, y in zip(xa, xb)], z)
    return Comparison(names[0], names[1], len(tasks), mean, low, high, "paired t over tasks", metric=metric)


def format_rate(rate: float | None, low: float | None, high: float | None, n: int) -> str:
    """e.g. "18.8% [6.6, 43.0] n=16"; "n/a" when nothing was scored."""
    if rate is None or low is None or high is None:
        return "n/a"
    return f"{100 * rate:.1f}% [{100 * low:.1f}, {100 * high:.1f}] n={n}"
