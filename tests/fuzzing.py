"""Property-based fuzzing (hypothesis): a bounded, reproducible CI share, a longer random run by hand, and tallies.

CI runs each fuzz test with its own small `max_examples`, derandomized (the same inputs every run).
A longer run by hand: `AGENTRL_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -q -s -k fuzz` (random
inputs, that many examples per test). Every test records what each input got (a valid answer, or
which clear error) in a `Tally`, printed at the end of the test and appended as a JSON line to
`$AGENTRL_FUZZ_REPORT` when it is set.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES_ENV = "AGENTRL_FUZZ_EXAMPLES"
REPORT_ENV = "AGENTRL_FUZZ_REPORT"


def fuzz_settings(ci_examples: int) -> settings:
    """`ci_examples` derandomized examples, or $AGENTRL_FUZZ_EXAMPLES random ones when that is set."""
    by_hand = os.environ.get(EXAMPLES_ENV)
    return settings(
        max_examples=int(by_hand) if by_hand else ci_examples,
        derandomize=not by_hand,
        deadline=None,  # a shared 2-core machine: latency varies, the server's own timeouts bound each call
        database=None,  # no .hypothesis/ folder in the work tree
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                               HealthCheck.function_scoped_fixture],
        print_blob=True,
    )


class Tally:
    """What every fuzzed input got: `add("valid")` or `add("ConfigError")`, then `report()`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.outcomes: Counter[str] = Counter()
        self.start = time.monotonic()

    def add(self, outcome: str) -> None:
        self.outcomes[outcome] += 1

    @property
    def total(self) -> int:
        return sum(self.outcomes.values())

    def report(self) -> dict:
        """Print and (with $AGENTRL_FUZZ_REPORT) append the counts; returns them."""
        row = {"test": self.name, "inputs": self.total, "seconds": round(time.monotonic() - self.start, 1),
               "outcomes": dict(self.outcomes.most_common())}
        print(f"\nfuzz {self.name}: {row['inputs']} inputs in {row['seconds']} s: {row['outcomes']}")
        path = os.environ.get(REPORT_ENV)
        if path:
            with open(path, "a") as out:
                out.write(json.dumps(row) + "\n")
        return row


# -- strategies shared by the fuzz tests ------------------------------------------------------------
def json_values(max_leaves: int = 12) -> st.SearchStrategy:
    """Any JSON value: scalars (huge ints, floats, unicode text) nested in lists and objects."""
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
    )
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=max_leaves)


def model_text(max_size: int = 200) -> st.SearchStrategy[str]:
    """Text a model might write: any Unicode (no lone surrogates: a tokenizer never decodes to one)."""
    return st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=max_size)
