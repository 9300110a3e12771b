"""The registry: built-ins registered on import, make by name, unknown names list the valid ones."""

from __future__ import annotations

from typing import Any

import pytest

from tests.envs.conftest import every_env

import agentrl_core.env_service as env_service
import agentrl_core.envs as envs
from agentrl_core.envs import Env, env_class, make, names, register
from agentrl_core.envs.countdown import Countdown
from agentrl_core.envs.household import Household
from agentrl_core.errors import UnknownEnvError


def test_builtins_are_registered_on_import() -> None:
    assert {"countdown", "household"} <= set(names())
    assert names() == sorted(names())
    assert env_class("countdown") is Countdown and env_class("household") is Household


@pytest.mark.parametrize("name", every_env())
def test_class_attributes_match_a_default_instance(name: str) -> None:
    """Listings (e.g. `agentrl envs`) read the class; sessions use instances: they must agree."""
    cls, env = env_class(name), make(name)
    assert (cls.max_steps, cls.action_format, cls.reward_range) == (env.max_steps, env.action_format, env.reward_range)


def test_make_passes_kwargs() -> None:
    env = make("household", max_steps=20)
    assert isinstance(env, Household) and env.max_steps == 20
    assert make("countdown", max_attempts=5).max_steps == 5


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(UnknownEnvError) as err:
        make("nope-world")
    message = str(err.value)
    assert "'nope-world'" in message and "countdown" in message and "household" in message
    assert isinstance(err.value, KeyError)  # callers may catch it as a lookup failure


def test_register_rejects_clashes_and_nameless_classes() -> None:
    register(Countdown)  # the same class again is fine (e.g. a module reload)

    class Impostor(Countdown):
        pass

    with pytest.raises(ValueError, match="already registered"):
        register(Impostor)

    class Nameless(Env):
        def task_ids(self, split: str) -> list[int]:
            return [0]

        def _reset(self, **_: Any) -> tuple[str, dict[str, Any]]:
            return "", {}

        def _step(self, action: str) -> Any:
            raise NotImplementedError

        def expert_action(self) -> str:
            return ""

    with pytest.raises(ValueError, match="name"):
        register(Nameless)
    assert "Impostor" not in str(names())


def test_package_exports() -> None:
    for name in ("Env", "StepResult", "make", "names", "register", "env_class", "check_env"):
        assert getattr(envs, name) is not None
    with pytest.raises(AttributeError):
        envs.no_such_thing  # noqa: B018
    for name in ("EnvClient", "RemoteEnv", "launch_server", "ServerProcess", "create_app"):  # the service's, lazily
        assert getattr(env_service, name) is not None
    with pytest.raises(AttributeError):
        env_service.no_such_thing  # noqa: B018


def test_versioned_ids_name_the_same_class() -> None:
    from agentrl_core.envs.registry import versioned_id, versioned_ids

    assert env_class("countdown-v1") is env_class("countdown") and versioned_id(Countdown) == "countdown-v1"
    assert {f"{n}-v{env_class(n).version}" for n in names()} == set(versioned_ids())
    with pytest.raises(UnknownEnvError):
        env_class("countdown-v99")


def test_a_missing_extra_names_its_install_command() -> None:
    from agentrl_core.envs.extras import install_command, missing_extra_message
    from agentrl_core.errors import MissingExtraError

    message = missing_extra_message("fancy", "fancy", ("agentrl_no_such_module_xyz", "json"))
    assert message is not None and "agentrl_no_such_module_xyz" in message and "json" not in message.split("needs")[1].split("which")[0]
    assert "pip install 'agentrl[fancy]'" in message
    assert missing_extra_message("fancy", "fancy", ("json",)) is None
    assert "--no-deps" in install_command("bfcl")

    class Fancy(Countdown):
        name = "fancy"
        extra = "fancy"
        requires = ("agentrl_no_such_module_xyz",)

    with pytest.raises(MissingExtraError, match="agentrl\\[fancy\\]"):
        Fancy()
