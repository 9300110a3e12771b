"""The placement plan and its check against the cluster: pure, no Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl_core.config import DistributedConfig
from agentrl_core.distributed.placement import Bundle, check_fits, plan_placement
from agentrl_core.distributed.rollout_pool import split_evenly
from agentrl_core.distributed.weight_sync import (
    StaleWeightsError,
    WeightSyncError,
    accept,
    check_versions,
)
from agentrl_core.errors import ConfigError


def test_seed_003_layout_six_rollout_gpus_two_training_on_an_8_gpu_node() -> None:
    plan = plan_placement(DistributedConfig(backend="ray", rollout_workers=6, cpus_per_rollout_worker=2,
                                            gpus_per_node=8, rollout_gpus=6, train_gpus=2))
    assert plan.rollout == (Bundle(2.0, 1.0),) * 6 and plan.trainer == Bundle(1.0, 2.0)
    assert plan.rollout[0].resources() == {"CPU": 2.0, "GPU": 1.0}
    assert plan.cpus == 13.0 and plan.rollout_gpus == 6.0
    assert (plan.rollout_strategy, plan.trainer_strategy) == ("PACK", "STRICT_PACK")
    check_fits(plan, {"CPU": 16.0, "GPU": 8.0})


def test_cpu_only_plan_has_no_gpu_resource_and_fractional_gpu_shares_are_allowed() -> None:
    plan = plan_placement(DistributedConfig(rollout_workers=3))
    assert plan.rollout[0].resources() == {"CPU": 1.0} and plan.trainer.resources() == {"CPU": 1.0}
    shared = plan_placement(DistributedConfig(rollout_workers=4, rollout_gpus=1, gpus_per_node=1))
    assert [b.gpus for b in shared.rollout] == [0.25] * 4


@pytest.mark.parametrize("fields, words", [
    ({"rollout_gpus": 2}, "gpus_per_node is 0"),
    ({"rollout_gpus": 3, "rollout_workers": 2, "gpus_per_node": 8}, "multiple of"),
    ({"rollout_gpus": 4, "rollout_workers": 1, "gpus_per_node": 2}, "use more rollout workers"),
    ({"train_gpus": 4, "gpus_per_node": 2}, "runs on one node"),
])
def test_impossible_plans_say_which_setting_to_change(fields: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        plan_placement(DistributedConfig(**fields))


def test_check_fits_names_the_missing_resource() -> None:
    gpu_plan = plan_placement(DistributedConfig(rollout_workers=2, rollout_gpus=2, gpus_per_node=8, train_gpus=1))
    with pytest.raises(ConfigError, match=r"asked for 2 rollout GPUs but the cluster has 0 GPUs; set "
                                          r"distributed.rollout_gpus=0"):
        check_fits(gpu_plan, {"CPU": 64.0})
    with pytest.raises(ConfigError, match=r"2 rollout \+ 1 training GPUs but the cluster has 2"):
        check_fits(gpu_plan, {"CPU": 64.0, "GPU": 2.0})
    cpu_plan = plan_placement(DistributedConfig(rollout_workers=3, cpus_per_rollout_worker=2))
    with pytest.raises(ConfigError, match=r"asked for 7 CPUs \(3 rollout workers x 2 \+ 1 trainer workers x 1\)"):
        check_fits(cpu_plan, {"CPU": 6.0})
    check_fits(cpu_plan, {"CPU": 7.0})


def test_custom_resources_pin_the_trainer_and_the_rollout_workers_to_their_nodes() -> None:
    plan = plan_placement(DistributedConfig(rollout_workers=2, trainer_resource="agentrl_trainer",
                                            rollout_resource="agentrl_rollout"))
    assert plan.trainer.resources() == {"CPU": 1.0, "agentrl_trainer": 1.0}
    assert [b.resources() for b in plan.rollout] == [{"CPU": 1.0, "agentrl_rollout": 1.0}] * 2
    two_nodes = {"CPU": 3.0, "agentrl_trainer": 1.0, "agentrl_rollout": 2.0}
    check_fits(plan, two_nodes)
    with pytest.raises(ConfigError, match=r"2 units of the custom resource 'agentrl_rollout' "
                                          r"\(distributed.rollout_resource\) but the cluster has 1"):
        check_fits(plan, {**two_nodes, "agentrl_rollout": 1.0})
    with pytest.raises(ConfigError, match=r"'agentrl_trainer' \(distributed.trainer_resource\) but the cluster has 0"):
        check_fits(plan, {"CPU": 3.0, "agentrl_rollout": 2.0})
    with pytest.raises(ValueError, match="trainer_resource"):
        DistributedConfig(trainer_resource="no spaces")


def test_split_evenly_keeps_order_and_balances() -> None:
    assert split_evenly(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_evenly([1], 3) == [[1], [], []]


def test_versions_only_move_forward_and_every_worker_is_checked() -> None:
    accept(-1, 0)
    accept(3, 4)
    with pytest.raises(StaleWeightsError, match="offered weights version 4 but this worker already holds version 4"):
        accept(4, 4)
    with pytest.raises(StaleWeightsError):
        accept(5, 4)
    check_versions([2, 2], 2, ["a", "b"])
    with pytest.raises(WeightSyncError, match="b has 1"):
        check_versions([2, 1], 2, ["a", "b"])


def test_config_rejects_unknown_distributed_keys_and_bad_values() -> None:
    with pytest.raises(ValueError):
        DistributedConfig(rollout_worker=2)
    with pytest.raises(ValueError):
        DistributedConfig(rollout_workers=0)


def test_only_what_cannot_run_on_ray_is_refused_when_the_recipe_is_built():
    from agentrl_core.config import RecipeConfig

    with pytest.raises((ConfigError, ValueError), match="openai samples from a fixed served model"):
        RecipeConfig(distributed={"backend": "ray"}, rollout={"engine": {"kind": "openai"}})
    for setting in ({"model": {"lora": {"enabled": True}}}, {"algorithm": {"dynamic_sampling": True}},
                    {"algorithm": {"rollout_filter_ratio": 0.25}},
                    {"rollout": {"engine": {"kind": "vllm"}}},
                    {"trainer": {"backend": "deepspeed"}}, {"experience": {"enabled": True}},
                    {"algorithm": {"r3l_retry": True, "advantage": "r3l", "policy_loss": "opmd"}}):
        RecipeConfig(distributed={"backend": "ray"}, **setting)  # each runs on the Ray executor


def test_several_trainer_workers_need_ray_and_deepspeed():
    from agentrl_core.config import RecipeConfig

    with pytest.raises((ConfigError, ValueError), match="set distributed.backend=ray"):
        RecipeConfig(distributed={"trainer_workers": 2}, trainer={"backend": "deepspeed"})
    with pytest.raises((ConfigError, ValueError), match="set trainer.backend=deepspeed"):
        RecipeConfig(distributed={"backend": "ray", "trainer_workers": 2})
    cfg = RecipeConfig(distributed={"backend": "ray", "trainer_workers": 2}, trainer={"backend": "deepspeed"})
    plan = plan_placement(cfg.distributed)
    assert plan.trainers == (Bundle(1.0, 0.0),) * 2 and plan.trainer_strategy == "PACK" and plan.cpus == 3.0


def test_the_async_loop_is_refused_without_ray_or_without_its_off_policy_correction():
    from agentrl_core.config import RecipeConfig

    with pytest.raises((ConfigError, ValueError), match="set distributed.backend=ray"):
        RecipeConfig(distributed={"max_policy_lag": 1}, algorithm={"tis_cap": 2.0})
    with pytest.raises((ConfigError, ValueError), match="set algorithm.tis_cap"):
        RecipeConfig(distributed={"backend": "ray", "max_policy_lag": 1})
    with pytest.raises(ValueError):
        DistributedConfig(max_policy_lag=-1)
    cfg = RecipeConfig(distributed={"backend": "ray", "max_policy_lag": 0}, algorithm={"tis_cap": 2.0})
    assert cfg.distributed.max_policy_lag == 0
    # 0 is the synchronous schedule: on every executor, without the off-policy correction
    assert RecipeConfig(distributed={"max_policy_lag": 0}).distributed.max_policy_lag == 0


def test_a_model_folder_travels_as_files_and_its_copy_is_removed_after_loading(tmp_path) -> None:
    from agentrl_core.distributed.weight_sync import folder_files, materialised
    from agentrl_core.errors import AgentRLError

    (tmp_path / "m" / "sub").mkdir(parents=True)
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "m" / "sub" / "w.bin").write_bytes(b"\x00\x01")
    files = folder_files(tmp_path / "m")
    assert files == {"config.json": b"{}", "sub/w.bin": b"\x00\x01"}
    with materialised(files) as folder:
        assert (Path(folder) / "sub" / "w.bin").read_bytes() == b"\x00\x01" and Path(folder) != tmp_path / "m"
    assert not Path(folder).exists()  # nothing of the run is left on the worker's node
    with materialised(str(tmp_path / "m")) as same:
        assert same == str(tmp_path / "m")
    with pytest.raises(AgentRLError, match="outside its folder"), materialised({"../evil": b""}):
        pass
