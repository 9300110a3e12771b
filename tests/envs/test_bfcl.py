"""BFCL multi-turn: safe call parsing, the official checks on 800 replays, EnvTuning's protocol and rewards."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time

import pytest

from agentrl_core.envs.bfcl import protocol
from agentrl_core.envs.bfcl.calls import Call, CallError, bind, parse_calls, parse_json_calls, parse_python_calls
from agentrl_core.envs.bfcl.protocol import FORMAT_ERROR, TOOL_ERROR, TOOL_OK, format_tool_reward, progress_reward

THINK = "<think>ok</think>"

# -- rewards (no bfcl_eval needed) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        # rounds 5, n-3 = 1, n-1 = 2, n-2 = 1: (5-1)/5 + 2/(2+1) = 0.8 + 0.6667
        ([-3.0, -1.0, -2.0, -1.0, 1.0], 0.8 + 2 / 3),
        ([-1.0, 1.0], 2.0),  # (2-0)/2 + 1/1: the maximum
        ([-2.0, -2.0, 0.0], 1.0),  # (3-0)/3 + 0/2
        ([-3.0, -3.0, -1.0, 0.0], 0.5 + 1.0),  # (4-2)/4 + 1/1
        ([1.0, 1.0], 0.0),  # answers only: is_tool_call = 0
        ([-3.0] * 5 + [0.0], 0.0),  # format errors only: is_tool_call = 0 (no 0/0)
        ([], 0.0),
    ],
)
def test_stage_1_2_reward(log: list[float], expected: float) -> None:
    assert format_tool_reward(log) == pytest.approx(expected)
    assert protocol.episode_reward(1, log) == protocol.episode_reward(2, log) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("log", "expected"),
    [([-1.0, 1.0, -2.0, 0.0, 1.0], 2 / 3), ([-1.0, 1.0], 1.0), ([0.0, -3.0, 0.0], 0.0), ([-1.0], 0.0)],
)
def test_stage_3_reward_is_the_mean_turn_score(log: list[float], expected: float) -> None:
    assert progress_reward(log) == pytest.approx(expected)
    assert protocol.episode_reward(3, log) == pytest.approx(expected)
    with pytest.raises(ValueError, match="stage"):
        protocol.episode_reward(4, log)


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("<answer>hi</answer>", "missing the <think>"),
        (f"{THINK}{THINK}<answer>x</answer>", "more than one <think>"),
        (f"{THINK}<tool_call>[]</tool_call><tool_call>[]</tool_call>", "more than one <tool_call>"),
        (f"{THINK}<answer>a</answer><answer>b</answer>", "more than one <answer>"),
        (f"{THINK}<tool_call>[]</tool_call><answer>x</answer>", "both"),
        (f"{THINK} just words", "either <tool_call>"),
        (f"{THINK}<answer>x</answer> trailing", "outside the tags"),
        (f"{THINK}<tool_call>[{{'name': 'ls'}}]</tool_call>", "JSON list"),
        (f'{THINK}<tool_call>[{{"arguments": {{}}}}]</tool_call>', '"name"'),
    ],
)
def test_format_errors(reply: str, error: str) -> None:
    parsed = protocol.parse_reply(reply)
    assert parsed.kind == "format_error" and error in parsed.error


def test_well_formed_replies() -> None:
    tool = protocol.parse_reply(f' {THINK}\n<tool_call>[{{"name": "ls", "arguments": {{"a": true}}}}]</tool_call>\n')
    assert tool.kind == "tool_call" and tool.calls == (Call("ls", (), {"a": True}),)
    single = protocol.parse_reply(f'{THINK}<tool_call>{{"name": "pwd"}}</tool_call>')
    assert single.calls == (Call("pwd"),)
    answer = protocol.parse_reply(f"{THINK}<answer> Done. </answer>")
    assert (answer.kind, answer.answer) == ("answer", "Done.")


# -- call parsing (no bfcl_eval needed) ----------------------------------------------------------
DOC = {
    "name": "move",
    "parameters": {
        "type": "dict",
        "properties": {
            "source": {"type": "string"},
            "count": {"type": "integer"},
            "scale": {"type": "float"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "force": {"type": "boolean", "default": False},
        },
        "required": ["source", "count"],
    },
}


def test_python_and_json_syntax_give_the_same_call() -> None:
    python = parse_calls("[move('a.txt', 3, scale=2, tags=('x', 'y'))]")
    as_json = parse_calls('[{"name": "move", "arguments": {"source": "a.txt", "count": 3, "scale": 2, "tags": ["x", "y"]}}]')
    assert bind(python[0], DOC) == bind(as_json[0], DOC) == {"source": "a.txt", "count": 3, "scale": 2, "tags": ["x", "y"]}
    assert parse_calls("[]") == [] and parse_calls("move(source='a', count=-1)")[0].kwargs["count"] == -1


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('echo pwned')",  # attribute callee
        "[move(source=open('/etc/passwd').read(), count=1)]",  # non-literal argument
        "[move(source=x, count=1)]",  # a name, not a literal
        "[move(source='a', count=1 + 1)]",  # arithmetic is not a literal
        "[move(*['a', 1])]",
        "[move(**{'source': 'a'})]",
        "[(lambda: 1)()]",
        "[move(source='a', source='b')]",
        "move",  # not a call
        "import os",
        "[move(source='a', count=" + "9" * 5000 + ")]",  # over-long integer literal
    ],
)
def test_python_parser_rejects_anything_but_literal_calls(text: str) -> None:
    with pytest.raises(CallError):
        parse_python_calls(text)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[{bad json", "invalid JSON"),
        ('[{"name": "move", "arguments": [1]}]', "must be an object"),
        ('["move"]', "must be an object"),
        ('[{"name": 1}]', '"name"'),
        ("[" + "1" * 5000 + "]", "invalid JSON"),  # over-long integer
        ("[" * 100_000 + "]" * 100_000, "characters"),  # too long to parse at all
    ],
)
def test_json_parser_rejects_malformed_calls(text: str, error: str) -> None:
    with pytest.raises(CallError, match=error):
        parse_json_calls(text)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (Call("move", ("a",)), r"missing required argument\(s\) \['count'\]"),
        (Call("move", (), {"source": "a", "count": 1, "speed": 2}), r"unknown argument\(s\) \['speed'\]"),
        (Call("move", ("a", 1), {"source": "b"}), "both by position and by name"),
        (Call("move", ("a", 1, 1.0, [], True, 6)), "at most 5 arguments"),
        (Call("move", (), {"source": 3, "count": 1}), "must be string"),
        (Call("move", (), {"source": "a", "count": 1.5}), "must be integer"),
        (Call("move", (), {"source": "a", "count": True}), "must be integer"),  # bool is not an int here
        (Call("move", (), {"source": "a", "count": 1, "tags": ["x", 2]}), r"tags'\[1\] must be string"),
        (Call("move", (), {"source": "a", "count": 1, "force": "yes"}), "must be boolean"),
    ],
)
def test_bind_checks_names_required_and_types(call: Call, error: str) -> None:
    with pytest.raises(CallError, match=error):
        bind(call, DOC)


def test_bind_accepts_ints_for_floats_and_none_for_optionals() -> None:
    assert bind(Call("move", ("a", 2), {"scale": 3, "force": None}), DOC) == {"source": "a", "count": 2, "scale": 3, "force": None}


# -- everything below needs the bfcl extra -------------------------------------------------------


@pytest.fixture(scope="module")
def bfcl():
    pytest.importorskip("bfcl_eval")
    pytest.importorskip("mpmath")
    from agentrl_core.envs import bfcl as package

    return package


def _entry(category: str, index: int):
    from agentrl_core.envs.bfcl.data import get_entry

    return get_entry(category, index)


def test_import_does_not_load_the_extra() -> None:
    code = "import sys, agentrl_core.envs.bfcl; assert 'bfcl_eval' not in sys.modules and 'mpmath' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_check_env_on_every_stage(bfcl, stage: int) -> None:
    from agentrl_core.envs import check_env, env_class, make

    assert env_class("bfcl") is bfcl.Bfcl and env_class("bfcl-v1") is bfcl.Bfcl
    env = make("bfcl", stage=stage)
    assert env.reward_range == ((0.0, 2.0) if stage < 3 else (0.0, 1.0))
    check_env(env, tasks_per_split=4)


def test_splits_are_disjoint_halves_by_scenario(bfcl) -> None:
    from agentrl_core.envs.bfcl.stages import entry_key, stage_task_ids, task_id_of

    sizes = {s: (len(stage_task_ids(s, "train")), len(stage_task_ids(s, "test"))) for s in (1, 2, 3)}
    assert sizes == {1: (34, 31), 2: (100, 100), 3: (400, 400)}
    assert stage_task_ids(3, "train") == tuple(range(400)) and stage_task_ids(3, "test") == tuple(range(400, 800))
    assert stage_task_ids(2, "train") == tuple(range(100)) and stage_task_ids(2, "test") == tuple(range(400, 500))
    keys = {t: entry_key(t) for t in range(800)}
    assert len(set(keys.values())) == 800 and all(task_id_of(*k) == t for t, k in keys.items())
    train_scenarios = {keys[t][1] for t in range(400)}
    test_scenarios = {keys[t][1] for t in range(400, 800)}
    assert not train_scenarios & test_scenarios  # no test dialogue is a variant of a train one
    for split in ("train", "test"):
        ones = stage_task_ids(1, split)
        assert set(ones) <= set(stage_task_ids(2, split))
        assert all(len(_entry(*entry_key(t)).involved_classes) == 1 for t in ones)
    assert stage_task_ids(3, "train", ("miss_func",)) == tuple(range(100, 200))
    with pytest.raises(ValueError, match="unknown categories"):
        stage_task_ids(3, "train", ("nope",))


def test_unknown_tasks_and_bad_arguments(bfcl) -> None:
    from agentrl_core.errors import ResetNeededError, TaskNotFoundError

    for task_id in (-1, 800, 10**6):
        with pytest.raises(TaskNotFoundError, match=r"\[0, 400\)"):
            bfcl.Bfcl().reset(task_id=task_id)
    with pytest.raises(TaskNotFoundError, match="stage 2"):
        bfcl.Bfcl(stage=2).reset(task_id=100)  # a miss_func entry
    with pytest.raises(ValueError, match="stage"):
        bfcl.Bfcl(stage=4)
    with pytest.raises(ResetNeededError):
        bfcl.Bfcl().expert_action()


def test_all_800_ground_truth_replays_are_valid(bfcl) -> None:
    from agentrl_core.envs.bfcl.checker import check_trajectory, ground_truth_turns
    from agentrl_core.envs.bfcl.data import CATEGORIES, load_category

    start = time.perf_counter()
    verdicts = {e.id: check_trajectory(e, ground_truth_turns(e)) for c in CATEGORIES for e in load_category(c)}
    elapsed = time.perf_counter() - start
    assert len(verdicts) == 800
    assert [i for i, v in verdicts.items() if not v.valid] == []
    assert elapsed < 20, f"800 replays took {elapsed:.1f} s"


def test_ground_truth_calls_never_fail(bfcl) -> None:
    """The replays above are not vacuous: every ground-truth call passes our checks and runs."""
    from agentrl_core.envs.bfcl.checker import truth_calls
    from agentrl_core.envs.bfcl.data import CATEGORIES, load_category
    from agentrl_core.envs.bfcl.executor import Executor

    failed, total = [], 0
    for category in CATEGORIES:
        for entry in load_category(category):
            executor = Executor(entry)
            for turn in range(len(entry.turns)):
                for outcome in executor.run_all(truth_calls(entry, turn)):
                    total += 1
                    if not outcome.ok:
                        failed.append((entry.id, outcome.result))
    assert total == 4625 and failed == []


def _gt(entry) -> list[list[list[str]]]:
    from agentrl_core.envs.bfcl.checker import ground_truth_turns

    return copy.deepcopy(ground_truth_turns(entry))


def test_corrupted_trajectories_are_flagged_like_the_official_checker(bfcl) -> None:
    from agentrl_core.envs.bfcl.checker import check_trajectory

    base0 = _entry("base", 0)  # turn 0: cd(document), mkdir(temp), mv(final_report.pdf -> temp)
    dropped = _gt(base0)
    dropped[0][0].pop()  # no mv: the file system differs
    assert (check_trajectory(base0, dropped).turn, check_trajectory(base0, dropped).error_type) == (
        0, "multi_turn:instance_state_mismatch")
    changed = _gt(base0)
    changed[0][0][1] = "mkdir(dir_name='temp2')"
    assert check_trajectory(base0, changed).error_type == "multi_turn:instance_state_mismatch"
    no_grep = _gt(base0)
    no_grep[1][0] = [c for c in no_grep[1][0] if not c.startswith("grep")]  # read-only: state equal, result missing
    assert (check_trajectory(base0, no_grep).turn, check_trajectory(base0, no_grep).error_type) == (
        1, "multi_turn:execution_response_mismatch")
    empty = _gt(base0)
    empty[2] = []
    assert (check_trajectory(base0, empty).turn, check_trajectory(base0, empty).error_type) == (
        2, "multi_turn:empty_turn_model_response")
    split = _gt(base0)
    split[0] = [[c] for c in split[0][0]]  # the same calls over three steps: still valid
    assert check_trajectory(base0, split).valid

    miss_func0 = _entry("miss_func", 0)  # turn 2 asks for `sort`, held out until turn 3: no call expected
    early = _gt(miss_func0)
    early[2] = [["sort(file_name='final_report.pdf')"]]
    assert check_trajectory(miss_func0, early).valid  # the official runner judges nothing in such a turn
    strict = check_trajectory(miss_func0, early, strict_irrelevance=True)
    assert (strict.turn, strict.error_type) == (2, "multi_turn:irrelevance_error")
    state_changing = _gt(miss_func0)
    state_changing[2] = [["mkdir(dir_name='extra')"]]  # but what it did counts at the next turn's state check
    verdict = check_trajectory(miss_func0, state_changing)
    assert (verdict.turn, verdict.error_type) == (3, "multi_turn:instance_state_mismatch")
    assert check_trajectory(miss_func0, _gt(miss_func0)[:-1]).error_type == "multi_turn:force_terminated"


def test_every_dropped_call_and_every_strict_irrelevance_call_is_flagged(bfcl) -> None:
    from agentrl_core.envs.bfcl.checker import check_trajectory
    from agentrl_core.envs.bfcl.data import load_category

    dropped = extra = 0
    for entry in load_category("base") + load_category("miss_param"):
        truth = _gt(entry)
        first_call = next(step[0][0] for step in truth if step)
        for turn, steps in enumerate(truth):
            corrupted = _gt(entry)
            if steps:
                corrupted[turn][0].pop()
                dropped += 1
            else:
                corrupted[turn] = [[first_call]]
                extra += 1
            assert not check_trajectory(entry, corrupted, strict_irrelevance=True).valid, (entry.id, turn)
    assert dropped > 1400 and extra == 206


def test_executor_runs_documented_functions_only_and_binds_like_python(bfcl) -> None:
    from agentrl_core.envs.bfcl.data import visible_functions
    from agentrl_core.envs.bfcl.executor import Executor

    entry = _entry("miss_func", 0)  # GorillaFileSystem + TwitterAPI; cp excluded; sort held out until turn 3
    executor = Executor(entry)
    shown = visible_functions(entry, 0)
    assert "cp" not in shown and "sort" not in shown and "sort" in visible_functions(entry, 3)
    for name in ("_load_scenario", "__init__", "__class__", "eval", "__import__", "nope"):
        outcome = executor.run(Call(name, (), {}))
        assert not outcome.ok and outcome.result.endswith(f"{name!r} is not one of the available functions")
    # as the official executor (any public method by name): a held-out function still runs if called
    assert executor.run(Call("sort", (), {"file_name": "nope.txt"})).result.startswith("{")
    unknown = executor.run(Call("cd", (), {"folder": "document", "force": True}))
    assert not unknown.ok and "unknown argument(s) ['force']" in unknown.result
    good = executor.run(Call("cd", ("document",)))  # positional -> the signature's first parameter
    assert good.ok and json.loads(good.result) == {"current_working_directory": "document"}


def test_positional_arguments_bind_by_the_backend_signature(bfcl) -> None:
    """`purchase_insurance`: the doc lists insurance_cost before booking_id, the method the reverse."""
    from agentrl_core.envs.bfcl.calls import param_names
    from agentrl_core.envs.bfcl.data import entry_docs
    from agentrl_core.envs.bfcl.executor import Executor

    entry = next(e for e in _load_all() if "TravelAPI" in e.involved_classes)
    executor = Executor(entry)
    doc_order = param_names(entry_docs(entry)["purchase_insurance"][1])
    order = executor.positional_order("purchase_insurance")
    assert doc_order.index("insurance_cost") < doc_order.index("booking_id")
    assert order.index("booking_id") < order.index("insurance_cost")
    values = {"access_token": "tok", "insurance_type": "comprehensive", "booking_id": "b1", "insurance_cost": 50.0,
              "card_id": "card"}
    assert executor._check(Call("purchase_insurance", tuple(values[n] for n in order))) == values
    assert executor._check(Call("purchase_insurance", ("tok", "comprehensive"), {"booking_id": "b1", "insurance_cost": 50.0,
                                                                                   "card_id": "card"})) == values


def test_executor_guards_expensive_math(bfcl) -> None:
    import mpmath

    from agentrl_core.envs.bfcl.executor import Executor

    entry = next(e for e in _load_all() if "MathAPI" in e.involved_classes)
    executor = Executor(entry)
    dps = mpmath.mp.dps
    assert not executor.run(Call("logarithm", (), {"value": 8, "base": 2, "precision": 10**7})).ok
    assert not executor.run(Call("logarithm", (), {"value": 8, "base": 2, "precision": "10000000"})).ok
    assert not executor.run(Call("power", (), {"base": 10**9, "exponent": 10**9})).ok
    assert not executor.run(Call("power", (), {"base": 10**9, "exponent": "1e9"})).ok
    assert not executor.run(Call("add", (), {"a": 10**30, "b": 1})).ok
    assert executor.run(Call("logarithm", (), {"value": 8, "base": 2, "precision": 50})).ok
    assert mpmath.mp.dps == dps  # the process-wide precision is restored after the call


def _load_all():
    from agentrl_core.envs.bfcl.data import CATEGORIES, load_category

    return [e for c in CATEGORIES for e in load_category(c)]


def _tool(calls: list[dict]) -> str:
    return f"{THINK}<tool_call>{json.dumps(calls)}</tool_call>"


ANSWER = f"{THINK}<answer>Done.</answer>"


def test_scripted_episode_codes_and_stage_rewards(bfcl) -> None:
    for stage, expected in ((2, 8 / 9 + 1.0), (3, 1.0)):
        env = bfcl.Bfcl(stage=stage)
        obs, info = env.reset(task_id=0)  # multi_turn_base_0, 4 turns
        assert info["id"] == "multi_turn_base_0" and obs.endswith("User: " + _entry("base", 0).turns[0][0])
        assert '"name": "mv"' in obs and '"name": "cp"' not in obs  # cp is excluded
        first = env.step("no tags at all")
        assert first.observation.startswith("Format error: missing the <think></think> tags")
        assert (first.reward, first.terminated, first.info["code"]) == (0.0, False, FORMAT_ERROR)
        ran = env.step(env.expert_action())
        assert ran.info["code"] == TOOL_OK and ran.observation.startswith("Execution results: [")
        for _ in range(30):
            result = env.step(env.expert_action())
            if result.terminated:
                break
        # log: -3, -1, 1, then (-1, 1) x 3 -> rounds 9, n-3 1, n-1 4, n-2 0
        assert result.info["log"] == [-3.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0]
        assert result.info["success"] is True and result.reward == pytest.approx(expected)


def test_failed_calls_and_wrong_state_score_zero(bfcl) -> None:
    env = bfcl.Bfcl(stage=2)
    env.reset(task_id=0)
    error = env.step(_tool([{"name": "mkdir", "arguments": {"name": "x"}}, {"name": "cd", "arguments": {"folder": "document"}}]))
    assert error.info["code"] == TOOL_ERROR
    results = json.loads(error.observation.split("Execution results: ", 1)[1].split("\n", 1)[0])
    assert results[0].startswith("Error during execution: mkdir: unknown argument(s) ['name']")
    assert json.loads(results[1]) == {"current_working_directory": "document"}  # the second call still ran
    ended = env.step(ANSWER)  # nothing moved: the state check fails
    assert ended.info["turn_passed"] is False and ended.info["code"] == 0.0
    assert ended.observation == "User: " + _entry("base", 0).turns[1][0]
    for _ in range(3):
        last = env.step(ANSWER)  # empty turns fail too
    assert last.terminated and last.info["success"] is False
    assert last.info["log"] == [TOOL_ERROR, 0.0, 0.0, 0.0, 0.0]
    # rounds 5, n-3 0, n-1 0, n-2 1: 5/5 + 0/1
    assert last.reward == pytest.approx(1.0)
    assert last.info["turn_errors"][0] == "multi_turn:instance_state_mismatch"


def _well_formed(result) -> float:
    return result.info["episode_metrics"]["well_formed"]


def test_well_formed_is_every_reply_in_format_and_every_call_a_shown_function(bfcl) -> None:
    from agentrl_core.envs.bfcl.stages import task_id_of

    env = bfcl.Bfcl(stage=2)
    env.reset(task_id=0)
    assert _well_formed(env.step(ANSWER)) == 0.0  # no call yet: nothing shows the model can call
    assert _well_formed(env.step(env.expert_action())) == 1.0  # a real call, every reply in format
    failed = env.step(_tool([{"name": "mkdir", "arguments": {"name": "x"}}]))  # a shown function, bad argument
    assert failed.info["code"] == TOOL_ERROR and _well_formed(failed) == 1.0  # well-formed, wrong: not the metric
    assert _well_formed(env.step(_tool([{"name": "cp", "arguments": {}}]))) == 0.0  # cp is excluded: not shown
    assert _well_formed(env.step(env.expert_action())) == 0.0  # once broken, the episode stays broken

    env.reset(task_id=0)
    env.step(env.expert_action())
    assert _well_formed(env.step("no tags at all")) == 0.0  # a reply out of format
    env = bfcl.Bfcl(stage=3)
    env.reset(task_id=task_id_of("miss_func", 0))
    for _ in range(4):  # turns 0-1: ground truth then answer
        env.step(env.expert_action())
    assert _well_formed(env.step(_tool([{"name": "sort", "arguments": {"file_name": "a"}}]))) == 0.0  # not yet shown
    for task in (0, task_id_of("miss_func", 0)):  # the expert is well-formed to the end, reveal turns included
        env.reset(task_id=task)
        for _ in range(env.max_steps):
            result = env.step(env.expert_action())
            if result.terminated or result.truncated:
                break
        assert result.info["success"] is True and _well_formed(result) == 1.0


def test_progress_is_the_share_of_the_dialogues_turns_passed(bfcl) -> None:
    env = bfcl.Bfcl(stage=2)
    env.reset(task_id=0)  # multi_turn_base_0, 4 turns
    progress = [env.step(env.expert_action()).info["episode_metrics"]["progress"] for _ in range(4)]
    assert progress == [0.0, 0.25, 0.25, 0.5]  # call, answer (turn 0 passes), call, answer (turn 1 passes)
    env.reset(task_id=0)
    for _ in range(4):  # answer every turn at once: nothing moves, each turn fails
        last = env.step(ANSWER)
    assert last.terminated and last.info["success"] is False
    assert last.info["episode_metrics"]["progress"] == 0.0


def test_compact_docs_keep_names_descriptions_and_parameters(bfcl) -> None:
    full, compact = bfcl.Bfcl(stage=2), bfcl.Bfcl(stage=2, docs="compact")
    obs_full, _ = full.reset(task_id=0)
    obs_compact, _ = compact.reset(task_id=0)
    assert "This tool belongs to" in obs_full and '"response"' in obs_full
    assert "This tool belongs to" not in obs_compact and '"response"' not in obs_compact
    assert len(obs_compact) < 0.7 * len(obs_full)
    doc = next(d for d in _json_docs(obs_compact) if d["name"] == "mv")
    assert doc["description"].startswith("Move a file") and doc["parameters"]["required"] == ["source", "destination"]
    assert [d["name"] for d in _json_docs(obs_full)] == [d["name"] for d in _json_docs(obs_compact)]
    with pytest.raises(ValueError, match="docs must be one of"):
        bfcl.Bfcl(docs="short")


def _json_docs(observation: str) -> list[dict]:
    return json.loads(observation.split("(JSON):\n", 1)[1].split("\n]\n", 1)[0] + "\n]")


def test_turn_is_forced_to_end_after_the_attempt_limit(bfcl) -> None:
    env = bfcl.Bfcl(stage=1, max_attempts_per_turn=5)
    env.reset(task_id=env.task_ids("train")[0])
    for attempt in range(5):
        assert env.step("garbage").info["code"] == FORMAT_ERROR
    forced = env.step("garbage")  # the 6th non-answer reply ends the turn with its score
    assert forced.info["turn"] == 0 and forced.info["code"] == 0.0 and not forced.terminated
    assert forced.observation.startswith("(This turn ended after 6 replies without an answer.)\nUser: ")
    assert env.episode.turn == 1 and env.episode.log == [FORMAT_ERROR] * 5 + [0.0]


def test_empty_ground_truth_turn_and_reveal(bfcl) -> None:
    from agentrl_core.envs.bfcl.stages import task_id_of

    env = bfcl.Bfcl()
    env.reset(task_id=task_id_of("miss_func", 0))
    for _ in range(4):  # turns 0-1: ground truth then answer
        env.step(env.expert_action())
    assert env.episode.turn == 2
    reveal = env.step(ANSWER)  # asking instead of acting: the turn passes
    assert reveal.info["turn_passed"] is True and reveal.info["code"] == 1.0
    assert reveal.observation.endswith(protocol.REVEAL_MESSAGE) and '"name": "sort"' in reveal.observation
    assert env.step(env.expert_action()).info["code"] == TOOL_OK

    for strict in (False, True):  # a call where none is due: officially judged later, strictly scored 0 now
        env = bfcl.Bfcl(strict_irrelevance=strict)
        env.reset(task_id=task_id_of("miss_func", 0))
        for _ in range(4):
            env.step(env.expert_action())
        env.step(_tool([{"name": "ls", "arguments": {}}]))  # read-only: the state stays equal
        ended = env.step(ANSWER)
        assert ended.info["turn_passed"] is True and ended.info["code"] == (0.0 if strict else 1.0)
        for _ in range(env.max_steps):
            result = env.step(env.expert_action())
            if result.terminated or result.truncated:
                break
        assert result.info["success"] is True  # the official verdict either way
        turns = len(env.episode.entry.turns)
        assert result.reward == (pytest.approx(1 - 1 / turns) if strict else 1.0)  # stage 3: mean turn score

    env.reset(task_id=task_id_of("miss_param", 0))  # turn 3 lacks a parameter: answering passes
    for _ in range(6):
        env.step(env.expert_action())
    assert env.episode.turn == 3
    assert env.step(ANSWER).info["turn_passed"] is True


def test_reset_is_deterministic_and_episodes_are_isolated(bfcl) -> None:
    env, other = bfcl.Bfcl(), bfcl.Bfcl()
    before = copy.deepcopy(dict(_entry("base", 0).initial_config))
    first = env.reset(task_id=0)
    other.reset(task_id=0)
    env.step(_tool([{"name": "cd", "arguments": {"folder": "document"}}, {"name": "mkdir", "arguments": {"dir_name": "zzz"}}]))
    ls = _tool([{"name": "cd", "arguments": {"folder": "document"}}, {"name": "ls", "arguments": {}}])
    assert "zzz" in env.step(ls).observation
    assert "zzz" not in other.step(ls).observation  # another env's instances are its own
    assert env.reset(task_id=0) == first  # a fresh episode: the new directory is gone
    assert "zzz" not in env.step(ls).observation
    assert dict(_entry("base", 0).initial_config) == before  # the shared data was never mutated
    assert env.episode.model.instances["GorillaFileSystem"] is not other.episode.model.instances["GorillaFileSystem"]


def test_expert_wins_a_sample_of_every_category(bfcl) -> None:
    env = bfcl.Bfcl()
    for task_id in range(0, 800, 37):
        env.reset(task_id=task_id)
        for _ in range(env.max_steps):
            result = env.step(env.expert_action())
            if result.terminated or result.truncated:
                break
        assert result.terminated and result.info["success"] is True and result.reward == 1.0, task_id
