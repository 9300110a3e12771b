"""Chat-template token splicing: the ids that open an episode and the ids of each later turn."""

from __future__ import annotations

from typing import Any

_PROBE_REPLY = "AGENTRL_REPLY_PROBE"


class ChatFormat:
    """Turns chat turns into token ids without ever re-tokenizing the history.

    The prompt of turn 1 is the template rendered over [system, user]. After the model's reply
    (which ends with the eos token, or is closed with one), the ids of the next user turn are the
    template's text between the end of an assistant message and the next generation prompt, which
    is found once by rendering a probe conversation. So turn k's context is exactly the ids the
    engine consumed and produced in turns 1..k-1 plus this suffix.
    """

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; use an instruction-tuned model")
        self.tokenizer = tokenizer
        self.eos_id = int(tokenizer.eos_token_id)
        self._eos_text = tokenizer.eos_token
        self._after_eos, self._user_open, self._user_close = self._probe()

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )

    def _probe(self) -> tuple[str, str, str]:
        """Split the template around an assistant reply and a following user turn."""
        marker = "AGENTRL_USER_PROBE"
        base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": _PROBE_REPLY}]
        closed = self._render(base, False)
        opened = self._render(base + [{"role": "user", "content": marker}], True)
        if not opened.startswith(closed):
            raise ValueError("chat template re-renders earlier turns; token splicing is not possible")
        reply_end = closed.rindex(_PROBE_REPLY + self._eos_text) + len(_PROBE_REPLY + self._eos_text)
        after_eos = closed[reply_end:]
        user_open, _, user_close = opened[len(closed):].partition(marker)
        return after_eos, user_open, user_close

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of the opening messages followed by the generation prompt."""
        text = self._render(messages, True)
        return self.encode(text)

    def user_turn_ids(self, content: str) -> list[int]:
        """Ids to append after an eos-terminated reply: a user turn, then the generation prompt."""
        return self.encode(self._after_eos + self._user_open + content + self._user_close)

    def assistant_ids(self, content: str) -> list[int]:
        """Ids of an assistant reply as the model should write it (content then eos), for SFT."""
        return self.encode(content) + [self.eos_id]

    def encode(self, text: str) -> list[int]:
        """Tokenize text in which special tokens appear literally."""
        return _encode(self.tokenizer, text)

    def decode_reply(self, ids: list[int]) -> str:
        """Text of a reply, without special tokens."""
        return self.tokenizer.decode(ids, skip_special_tokens=True).strip()


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
