"""Shared fixtures: the real embedded model, a tiny random model with its tokenizer, a live env server."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A token exported in the developer's shell would make every server the tests start refuse their plain clients;
# the tests that need one set it themselves (run_token()).
os.environ.pop("AGENTRL_SERVER_TOKEN", None)
# Started as a background job (`cmd &`, nohup), this process and every child would inherit SIGINT ignored, and
# the tests that send SIGINT would wait in vain: Python's usual handler here means children start with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# A parallel worker of the suite (pytest-xdist, `-n`) gets one CPU thread, and so does every process it starts
# (model.cpu_threads=auto takes OMP_NUM_THREADS's share): the workers share the cores, and a multi-threaded
# kernel beside a busy neighbour waits on descheduled threads at every parallel region. Set before torch loads.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"

WORKER_MEMORY_GIB = 4.0
"""Memory one parallel worker may need at its peak (a real model, a server or two, a training step)."""
WORKER_DISK_GIB = 1.5
"""Temporary disk one parallel worker may need at its peak: a real model's checkpoint (0.5 GiB in float32) in a
test's tmp_path beside its module's kept fixtures (a DeepSpeed stage's 0.4 GiB). Measured: 1.9 GiB at most over
the suite on 3 workers in one run, 3.0 GiB in another (df sampled every 10 s); a CI disk with less free ran out."""
SHARED_SCOPES = ("module", "package", "class")
"""Fixture scopes shared by several tests: the tests sharing one run in the same worker, so it starts once."""


def pytest_report_header(config: pytest.Config) -> str:
    """The CPU the tests ran on (model, the flags that decide speed, cores), in the session header."""
    from agentrl_core.system.machine_info import describe_cpu

    return describe_cpu()


@pytest.fixture(scope="session")
def embedded_model_path() -> Path:
    """The real SmolLM2-135M-Instruct, imported once into the user's cache (scripts/setup.sh does it)."""
    from agentrl_core.models import resolve_model

    return Path(resolve_model("smollm2-135m-instruct"))


def make_tiny_model(out: Path) -> Path:
    """A 2-layer random Llama (seed 0) with the real SmolLM2 tokenizer and chat template, saved in `out`."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from agentrl_core.models import resolve_model

    tok = AutoTokenizer.from_pretrained(Path(resolve_model("smollm2-135m-instruct")))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory, embedded_model_path: Path) -> Path:
    """A 2-layer random Llama with the real SmolLM2 tokenizer and chat template: fast, same token layout."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def prefect_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Prefect database migrated to head, made once for the session (all parallel workers: their base
    temp folders share a parent) and copied into each test's home (tests/prefect_home.py says why)."""
    from tests.prefect_home import migrated_database

    root = tmp_path_factory.getbasetemp()
    return migrated_database((root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "prefect-database")


@pytest.fixture
def prefect_home(tmp_path: Path, prefect_database: Path) -> Path:
    """`tmp_path`/prefect: a Prefect home whose database is already migrated, as after a user's first run."""
    from tests.prefect_home import seed_home

    return seed_home(tmp_path / "prefect", prefect_database)


@pytest.fixture(scope="session")
def env_server_url():
    """A real env server (all registered envs) on 127.0.0.1 for the whole session."""
    from agentrl_core.env_service import launch_server

    with launch_server() as server:
        yield server.url


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than the usable cores, as many as the memory holds (WORKER_MEMORY_GIB each)
    and the temporary folder's free disk holds (WORKER_DISK_GIB each).

    Many tests wait on what they started (a server booting, a Ray node found dead, a run reaching a phase):
    with one worker per core the CPUs were 91% busy over the suite (17.2 min on 2 cores), with one more 99%
    (16.7 min, bench/results/test_suite.json): the extra worker fills those waits."""
    import tempfile

    from agentrl_core.system import diskfull
    from agentrl_core.system.machine_info import usable_cores

    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    free = diskfull.free_bytes(tempfile.gettempdir())  # None where the OS cannot say: no bound
    by_disk = int(free / 2**30 // WORKER_DISK_GIB) if free is not None else usable_cores() + 1
    return max(1, min(usable_cores() + 1, int(memory_gib // WORKER_MEMORY_GIB), by_disk))


def xdist_group_of(item: pytest.Item) -> str | None:
    """The worker group a test must run in: "ray" for a test marked `ray` (one local Ray at a time), else
    the module or package whose shared fixture it uses (a server, a model, a training run: started once),
    else None (any worker). Session fixtures are each worker's own (a model path, an env server)."""
    if item.get_closest_marker("ray"):
        return "ray"
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(info, "names_closure", ()):
        for definition in info.name2fixturedefs.get(name, ()):
            if definition.scope == "package":  # one instance for the package's tests
                return definition.baseid or item.nodeid.split("::")[0]
            if definition.scope in SHARED_SCOPES:  # one per module (or class): the module's tests together
                return item.nodeid.split("::")[0]
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    """Group each test for `--dist loadgroup` (xdist_group_of) as it is collected: xdist reads the groups in its
    own pytest_collection_modifyitems, which may run before any conftest's."""
    if not item.get_closest_marker("xdist_group") and (group := xdist_group_of(item)):
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """How many parallel workers ran the tests (bench/bench_test_suite.py records it beside the time)."""
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > 0:
        terminalreporter.write_line(f"ran on {workers} parallel workers (pytest-xdist; -n 0 runs the tests in one "
                                    "process)")
