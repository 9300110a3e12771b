"""SFT data: conversation -> trajectory layout, ReAct/ADaPT rendering, converters, boundary-safe packing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from agentrl_core.envs.base import Env, StepResult
from agentrl_core.models import load_tokenizer
from agentrl_core.models.chat import ChatFormat
from agentrl_core.rollout import Trajectory, expert_episode, write_trajectories
from agentrl_core.sft_data import (
    AdaptPlan,
    adapt_plan_messages,
    agentgym_to_conversation,
    conversation_to_trajectory,
    conversations_to_trajectories,
    load_sft_dataset,
    pack,
    packed_logprobs,
    parse_adapt_plan,
    parse_react,
    per_sample_nll,
    plan_packs,
    read_agentgym_json,
    read_jsonl,
    render_adapt_plan,
    render_conversation,
    render_react,
    rollouts_to_conversations,
    write_jsonl,
)
from agentrl_core.training.batching import collate
from agentrl_core.training.logprobs import token_logprobs

SYSTEM = "You craft items."
CONV = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Goal: craft 1 stick."},
    {"role": "assistant", "content": "get 1 planks"},
    {"role": "user", "content": "Got 1 planks"},
    {"role": "assistant", "content": "craft 1 stick using 1 planks"},
]


@pytest.fixture(scope="module")
def tok(tiny_model_path: Path):
    return load_tokenizer(tiny_model_path)


@pytest.fixture(scope="module")
def chat(tok) -> ChatFormat:
    return ChatFormat(tok)


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of 1s."""
    runs, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


def _trained_texts(tok, traj: Trajectory) -> list[str]:
    return [tok.decode(traj.token_ids[a:b]) for a, b in _runs(traj.loss_mask)]


# -- conversation -> trajectory --------------------------------------------------------------------
def test_loss_mask_covers_exactly_the_assistant_tokens(tok, chat):
    traj = conversation_to_trajectory(CONV, chat, task_id=7)
    assert _trained_texts(tok, traj) == ["get 1 planks<|im_end|>", "craft 1 stick using 1 planks<|im_end|>"]
    n_asst = len(tok("get 1 planks", add_special_tokens=False)["input_ids"]) + len(
        tok("craft 1 stick using 1 planks", add_special_tokens=False)["input_ids"]) + 2
    assert traj.response_tokens == n_asst
    assert traj.num_turns == 2 and traj.task_id == 7 and traj.prompt_len == traj.loss_mask.index(1)
    # the whole sequence is the chat template's text (minus the newline after the last <|im_end|>)
    assert tok.decode(traj.token_ids) == tok.apply_chat_template(CONV, tokenize=False).removesuffix("\n")
    assert tok.decode(traj.token_ids[:traj.prompt_len]).endswith("<|im_start|>assistant\n")


class _Scripted(Env):
    """Two-step env whose expert says the assistant turns of CONV."""

    name = "scripted"
    action_format = "a command"
    system_prompt = SYSTEM
    splits: ClassVar[dict[str, list[int]]] = {"train": [0]}

    def _reset(self, *, task_id, seed, options):
        self.k = 0
        return "Goal: craft 1 stick.", {}

    def _step(self, action):
        self.k += 1
        done = self.k == 2
        return StepResult("Got 1 planks", float(done), done, False, {"success": done})

    def expert_action(self):
        return ["get 1 planks", "craft 1 stick using 1 planks"][self.k]


def test_ids_equal_what_the_demo_loop_produces(chat):
    demo = expert_episode(_Scripted(), chat, task_id=0, max_turns=5)
    assert demo.success and demo.messages == CONV
    traj = conversation_to_trajectory(demo.messages, chat)
    assert traj.token_ids == demo.token_ids
    assert traj.loss_mask == demo.loss_mask
    assert traj.prompt_len == demo.prompt_len


def test_invalid_conversations_are_refused(chat):
    with pytest.raises(ValueError, match="alternate"):
        conversation_to_trajectory([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], chat)
    with pytest.raises(ValueError, match="no assistant turn"):
        conversation_to_trajectory([{"role": "user", "content": "a"}], chat)
    with pytest.raises(ValueError, match="role 'tool'"):
        conversation_to_trajectory([{"role": "tool", "content": "a"}], chat)


def test_too_long_conversations_are_dropped(chat):
    short = {"messages": CONV[1:3]}
    kept = conversations_to_trajectories([{"messages": CONV}, short], chat, max_tokens=len(
        conversation_to_trajectory(CONV[1:3], chat).token_ids))
    assert [t.messages for t in kept] == [CONV[1:3]]
    with pytest.raises(ValueError, match="longer than 3 tokens"):
        conversations_to_trajectories([short], chat, max_tokens=3)


# -- formats ---------------------------------------------------------------------------------------
def test_react_rendering():
    text = render_react("I need planks first.", "get 1 planks")
    assert text == "Thought: I need planks first.\nAction: get 1 planks"
    turn = parse_react(text)
    assert (turn.thought, turn.action) == ("I need planks first.", "get 1 planks")
    assert render_conversation(CONV, "react", ["Planks first.", "Now the stick."])[2:] == [
        {"role": "assistant", "content": "Thought: Planks first.\nAction: get 1 planks"},
        {"role": "user", "content": "Got 1 planks"},
        {"role": "assistant", "content": "Thought: Now the stick.\nAction: craft 1 stick using 1 planks"},
    ]
    with pytest.raises(ValueError, match="not a ReAct turn"):
        parse_react("get 1 planks")
    with pytest.raises(ValueError, match="needs one for every turn"):
        render_conversation(CONV, "react", ["only one", None])


def test_adapt_plan_rendering_matches_the_textcraft_prompt_layout():
    plan = AdaptPlan(("fetch 1 oak log", "craft 4 oak planks using 1 oak log"), "AND",
                     ("My ingredient is 1 oak log.", None), "I need both steps, so AND.")
    text = render_adapt_plan(plan)
    assert text == ("# Think: My ingredient is 1 oak log.\n"
                    "Step 1: fetch 1 oak log\n"
                    "Step 2: craft 4 oak planks using 1 oak log\n"
                    "# Think: I need both steps, so AND.\n"
                    "Execution Order: (Step 1 AND Step 2)")
    assert parse_adapt_plan(text) == plan
    assert render_adapt_plan(AdaptPlan(("get 1 stick", "craft 1 stick using 1 planks"), "OR")) == (
        "Step 1: get 1 stick\nStep 2: craft 1 stick using 1 planks\nExecution Order: (Step 1 OR Step 2)")
    msgs = adapt_plan_messages("craft 4 oak planks", ["craft 4 oak planks using 1 oak log"], plan, "sys")
    assert msgs[1]["content"] == "Crafting commands:\ncraft 4 oak planks using 1 oak log\n\nGoal: craft 4 oak planks."
    assert msgs[2] == {"role": "assistant", "content": text}
    with pytest.raises(ValueError, match="Execution Order"):
        parse_adapt_plan("Step 1: get 1 stick")


def test_adapt_executor_rendering_inserts_think_turns(tok, chat):
    out = render_conversation(CONV, "adapt", ["I have no planks. Get them.", None])
    assert out[2:] == [
        {"role": "assistant", "content": "think: I have no planks. Get them."},
        {"role": "user", "content": "OK."},
        {"role": "assistant", "content": "get 1 planks"},
        {"role": "user", "content": "Got 1 planks"},
        {"role": "assistant", "content": "craft 1 stick using 1 planks"},
    ]
    traj = conversation_to_trajectory(out, chat)
    assert _trained_texts(tok, traj) == ["think: I have no planks. Get them.<|im_end|>", "get 1 planks<|im_end|>",
                                         "craft 1 stick using 1 planks<|im_end|>"]


# -- converters ------------------------------------------------------------------------------------
AGENTGYM_ITEM = {
    "item_id": "textcraft_3",
    "conversations": [
        {"from": "human", "loss": None, "value": "You are a crafting agent. Reply with one command."},
        {"from": "gpt", "loss": False, "value": "OK. I'll follow your instructions."},
        {"from": "human", "loss": None, "value": "Goal: craft 1 stick."},
        {"from": "gpt", "loss": True, "value": "Thought: planks first.\nAction: get 1 planks"},
        {"from": "human", "loss": None, "value": "Got 1 planks"},
        {"from": "gpt", "loss": None, "value": "Thought: now craft.\nAction: craft 1 stick using 1 planks"},
    ],
}


def test_agentgym_json_round_trip_masks_loss_false_turns(tok, chat, tmp_path):
    src = tmp_path / "agenttraj.json"
    src.write_text(json.dumps([AGENTGYM_ITEM]))
    [conv] = read_agentgym_json(src)
    assert conv["meta"] == {"source": "agentgym", "item_id": "textcraft_3", "env": "textcraft"}
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert conv["messages"][1] == {"role": "assistant", "content": "OK. I'll follow your instructions.", "loss": False}
    assert "loss" not in conv["messages"][3] and "loss" not in conv["messages"][5]

    path = write_jsonl(tmp_path / "data" / "sft.jsonl", [conv])
    assert len(path.read_text().splitlines()) == 1
    [back] = read_jsonl(path)
    assert back == conv

    [traj] = conversations_to_trajectories([back], chat)
    assert traj.env == "textcraft"
    assert _trained_texts(tok, traj) == ["Thought: planks first.\nAction: get 1 planks<|im_end|>",
                                         "Thought: now craft.\nAction: craft 1 stick using 1 planks<|im_end|>"]
    ok_ids = chat.assistant_ids("OK. I'll follow your instructions.")
    start = next(i for i in range(len(traj.token_ids)) if traj.token_ids[i:i + len(ok_ids)] == ok_ids)
    assert traj.loss_mask[start:start + len(ok_ids)] == [0] * len(ok_ids)  # present, but not trained on


def test_load_sft_dataset_by_suffix(tok, chat, tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([AGENTGYM_ITEM]))
    write_jsonl(tmp_path / "b.jsonl", [{"messages": CONV, "meta": {"env": "textcraft"}}])
    [from_json] = load_sft_dataset(tmp_path / "a.json", chat)
    [from_jsonl] = load_sft_dataset(tmp_path / "b.jsonl", chat)
    assert from_json.response_tokens > 0 and from_jsonl.env == "textcraft"
    assert from_jsonl.token_ids == conversation_to_trajectory(CONV, chat).token_ids
    with pytest.raises(ValueError, match="unknown suffix"):
        (tmp_path / "c.txt").write_text("")
        load_sft_dataset(tmp_path / "c.txt", chat)
    with pytest.raises(FileNotFoundError, match="sft.dataset"):
        load_sft_dataset(tmp_path / "missing.jsonl", chat)


def test_agentgym_errors_and_merging():
    with pytest.raises(ValueError, match="'from' must be one of"):
        agentgym_to_conversation({"item_id": "x_1", "conversations": [{"from": "bot", "value": "hi"}]})
    item = {"item_id": "webshop_9", "conversations": [
        {"from": "human", "value": "a"}, {"from": "human", "value": "b"}, {"from": "gpt", "value": "c"},
        {"from": "human", "value": "trailing observation"}]}
    conv = agentgym_to_conversation(item, system="sys")
    assert conv["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "a\n\nb"},
                                {"role": "assistant", "content": "c"}]


def test_read_jsonl_reports_the_bad_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"messages": CONV}) + "\n" + json.dumps({"messages": [{"role": "user"}]}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: .*content must be a string"):
        read_jsonl(path)


def _rollout(task_id: int, *, success: bool, error: str | None = None, truncated: bool = False) -> Trajectory:
    t = Trajectory(task_id=task_id, env="textcraft", group=task_id, sample=1, token_ids=[1, 2], loss_mask=[0, 1],
                   logprobs=[0.0, -0.5], reward=float(success), success=success, truncated=truncated, error=error,
                   num_turns=2, messages=[dict(m) for m in CONV])
    return t


def test_rollouts_keep_only_successful_trajectories(tmp_path):
    path = write_trajectories(tmp_path / "rollout_log" / "step_1.parquet", [
        _rollout(0, success=True), _rollout(1, success=False), _rollout(2, success=True, error="engine failed"),
        _rollout(3, success=True, truncated=True), _rollout(4, success=True)], step=1)
    convs = rollouts_to_conversations([path])
    assert [c["meta"]["task_id"] for c in convs] == [0, 4]
    assert convs[0]["messages"] == CONV
    assert convs[0]["meta"] == {"source": "rollout", "env": "textcraft", "task_id": 0, "group": 0, "sample": 1,
                                "reward": 1.0, "num_turns": 2}
    assert rollouts_to_conversations([path], min_reward=2.0) == []


# -- packing ---------------------------------------------------------------------------------------
def test_plan_packs_first_fit_decreasing():
    assert plan_packs([5, 3, 4, 2], 8) == [[0, 1], [2, 3]]
    assert plan_packs([9, 2], 8) == [[0], [1]]  # too long: alone, never cut


def test_pack_layout(chat):
    a = Trajectory(0, "e", 0, 0, token_ids=[10, 11, 12], loss_mask=[0, 1, 1], logprobs=[0.0] * 3)
    b = Trajectory(1, "e", 1, 0, token_ids=[20, 21], loss_mask=[0, 1], logprobs=[0.0] * 2)
    batch = pack([a, b], [[0, 1]], pad_id=0)
    assert batch.input_ids.tolist() == [[10, 11, 12, 20, 21]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 0, 1]]
    assert batch.segment_ids.tolist() == [[0, 0, 0, 1, 1]]
    assert batch.target_mask.tolist() == [[1.0, 1.0, 0.0, 1.0]]  # 12 -> 20 crosses a boundary: not scored
    allowed = (batch.attention_mask[0, 0] == 0).int().tolist()
    assert allowed == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 1, 1]]


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def tiny_model(request, tiny_model_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32,
                                                 attn_implementation=request.param)
    return model.eval()


@pytest.fixture(scope="module")
def demos(chat) -> list[Trajectory]:
    convs = [CONV, render_conversation(CONV, "react", ["Planks first.", "Craft it."]),
             [{"role": "user", "content": "Goal: get 2 oak logs."}, {"role": "assistant", "content": "get 2 oak log"}]]
    return [conversation_to_trajectory(c, chat, task_id=i) for i, c in enumerate(convs)]


@torch.no_grad()
def test_packed_nll_equals_unpacked_nll(tiny_model, demos):
    """Per token (fp32, atol 1e-5) and as the SFT loss Σ NLL / Σ m: packing changes nothing.

    (The raw sum, ~360 nats over ~33 tokens of a random 49k-vocab model, is compared relatively:
    one fp32 ulp at 360 is 3e-5, so an absolute 1e-5 there would test rounding, not packing.)
    """
    batch = pack(demos, plan_packs([len(d.token_ids) for d in demos], 10_000), pad_id=0)
    assert len(batch.index) == 1 and sorted(batch.index[0]) == [0, 1, 2]
    lp = packed_logprobs(tiny_model, batch)
    nll = per_sample_nll(batch, lp)
    seg_t = batch.segment_ids[0, 1:]
    ref_total, n_tokens = 0.0, 0
    for i, d in enumerate(demos):
        mb = collate(demos, [i], pad_id=0)
        ref = token_logprobs(tiny_model, mb.input_ids, mb.attention_mask, mb.target_mask).logprobs
        s = batch.index[0].index(i)
        got = lp[0][(seg_t == s) & batch.target_mask[0].bool()]
        torch.testing.assert_close(got, ref[mb.target_mask.bool()], atol=1e-5, rtol=0)
        assert float(nll[i]) == pytest.approx(float(-ref.sum()), rel=1e-6)
        ref_total += float(-ref.sum())
        n_tokens += d.response_tokens
    assert int(batch.target_mask.sum()) == n_tokens
    assert float(sum(nll.values())) / n_tokens == pytest.approx(ref_total / n_tokens, abs=1e-5)
    # two rows with padding give the same per-sample sums
    two = pack(demos, [[0, 2], [1]], pad_id=0)
    nll2 = per_sample_nll(two, packed_logprobs(tiny_model, two))
    for i in range(3):
        assert float(nll2[i]) == pytest.approx(float(nll[i]), rel=1e-6)


@torch.no_grad()
def test_no_attention_crosses_sample_boundaries(tiny_model, demos):
    a, b = demos[0], demos[2]
    gen = torch.Generator().manual_seed(0)
    a2 = Trajectory(0, "e", 0, 0, token_ids=torch.randint(100, 5000, (len(a.token_ids),), generator=gen).tolist(),
                    loss_mask=a.loss_mask, logprobs=a.logprobs)
    packed = [pack([x, b], [[0, 1]], pad_id=0) for x in (a, a2)]
    lp = [packed_logprobs(tiny_model, p) for p in packed]
    b_cols = packed[0].segment_ids[0, 1:] == 1
    assert b_cols.sum() > 0
    torch.testing.assert_close(lp[0][0, b_cols], lp[1][0, b_cols], atol=1e-6, rtol=0)
    assert not torch.allclose(lp[0][0, ~b_cols], lp[1][0, ~b_cols])  # sample A itself did change
    # control: plain causal attention over the concatenation does let A leak into B
    plain = [tiny_model(input_ids=p.input_ids, position_ids=p.position_ids).logits[0, :-1][b_cols] for p in packed]
    assert not torch.allclose(plain[0], plain[1], atol=1e-4)


# -- wired into the SFT stage -------------------------------------------------------------------------
def test_sft_stage_trains_on_a_dataset_file_with_and_without_packing(tiny_model_path, tmp_path):
    import json

    from agentrl_core.recipes import load_recipe
    from agentrl_core.training.sft import train_sft

    records = [{"messages": [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": f"Say {w}."},
                             {"role": "assistant", "content": w}], "meta": {"i": i}}
               for i, w in enumerate(["alpha", "beta", "gamma", "delta"])]
    data = tmp_path / "conv.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    losses = {}
    for packing in (False, True):
        cfg = load_recipe("household_grpo", [f"model.name={tiny_model_path}", f"run.root={tmp_path}",
                                             f"sft.dataset={data}", f"sft.packing={str(packing).lower()}",
                                             "sft.epochs=1", "sft.batch_size=4", "model.compute_dtype=float32"])
        stage = tmp_path / f"sft-{packing}"
        result = train_sft(cfg, init_model=tiny_model_path, env_url="http://127.0.0.1:9", stage_dir=stage)
        assert result.steps == 1  # 4 conversations, batch 4, 1 epoch: no env server was needed
        losses[packing] = json.loads((stage / "metrics.jsonl").read_text().splitlines()[0])["loss"]
    assert losses[True] == pytest.approx(losses[False], rel=1e-5)  # packing changes the layout, not the loss
