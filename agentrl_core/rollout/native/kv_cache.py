"""The KV cache of the native engine: one slab per layer, a slot per sequence, bounded by a byte budget.

Layer l keeps keys and values as [slots, H_kv, T, D] tensors; a sequence owns one slot and its
positions [0, length). A slab (rather than one tensor per sequence) lets every decode row of a
step attend in a single SDPA call over a contiguous range of slots, with no copy. Slots and T
grow by doubling when needed, as long as slots · T · bytes_per_token stays within the budget;
`CacheFull` tells the scheduler to evict an idle sequence (it will be prefilled again) or to wait.
Free slots are handed out lowest first, which keeps the decode range compact.
"""

from __future__ import annotations

import torch


class CacheFull(RuntimeError):
    """The slab cannot grow to what was asked within its byte budget."""


class SlabKVCache:
    """Per-layer K/V slabs [slots, H_kv, T, D] with slot allocation and budgeted growth."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, *, dtype: torch.dtype, device: torch.device,
                 max_bytes: int, initial_slots: int = 4, initial_tokens: int = 256) -> None:
        self.layers, self.kv_heads, self.head_dim = layers, kv_heads, head_dim
        self.dtype, self.device, self.max_bytes = dtype, torch.device(device), int(max_bytes)
        self.bytes_per_token = layers * 2 * kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size()
        if self.bytes_per_token > self.max_bytes:
            raise ValueError(f"a KV cache budget of {self.max_bytes} bytes holds no token "
                             f"({self.bytes_per_token} bytes each); raise rollout.engine.kv_cache_mb")
        self.slots, self.tokens = 0, 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self._free: list[int] = []
        self._used: set[int] = set()
        tokens = min(max(16, initial_tokens), self.capacity_tokens)
        self._resize(max(1, min(initial_slots, self.capacity_tokens // tokens)), tokens)

    @property
    def capacity_tokens(self) -> int:
        """Most tokens the budget allows in all slots together."""
        return self.max_bytes // self.bytes_per_token

    @property
    def bytes(self) -> int:
        """Bytes the slabs take now."""
        return self.slots * self.tokens * self.bytes_per_token

    @property
    def used_slots(self) -> int:
        return len(self._used)

    def allocate(self) -> int:
        """A free slot (lowest index first), growing the slot count if none is free; CacheFull if over budget."""
        if not self._free:
            room = self.max_bytes // (self.tokens * self.bytes_per_token)
            if room <= self.slots:
                raise CacheFull(f"{self.slots + 1} slots x {self.tokens} tokens exceed the KV budget of "
                                f"{self.max_bytes >> 20} MiB")
            self._resize(min(self.slots * 2, room), self.tokens)
        slot = min(self._free)
        self._free.remove(slot)
        self._used.add(slot)
        return slot

    def release(self, slot: int) -> None:
        """Give `slot` back; its contents are garbage from now on."""
        if slot not in self._used:
            raise KeyError(f"slot {slot} is not allocated")
        self._used.remove(slot)
        self._free.append(slot)

    def reserve_length(self, length: int) -> None:
        """Make every slot hold at least `length` positions; CacheFull if that would exceed the budget."""
        if length > self.tokens:
            want = self.tokens
            while want < length:
                want *= 2
            fits = self.max_bytes // (self.slots * self.bytes_per_token)
            self._resize(self.slots, max(length, min(want, fits)))

    def fits(self, slots: int, length: int) -> bool:
        """Whether `slots` slots of `length` positions would fit in the budget."""
        return slots * max(length, 1) * self.bytes_per_token <= self.max_bytes

    def write(self, layer: int, slots: torch.Tensor, positions: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [N, H_kv, D] at (slots[i], positions[i]); returns layer's whole (keys, values) slabs."""
        keys, values = self.keys[layer], self.values[layer]
        keys[slots, :, positions] = k.to(self.dtype)
        values[slots, :, positions] = v.to(self.dtype)
        return keys, values

    def shrink(self, moves: dict[int, int], slots: int) -> None:
        """Move slot src -> dst for each of `moves` (dst free), then keep only the first `slots` slots: the
        room given back lets T grow. Every used slot must be below `slots` after the moves."""
        for src, dst in moves.items():
            self.copy_prefix(src, dst, self.tokens)
            self._used.remove(src)
            self._used.add(dst)
            self._free.remove(dst)
            self._free.append(src)
        if any(slot >= slots for slot in self._used):
            raise ValueError("shrink() would drop a used slot")
        self.keys = [k[:slots].clone() for k in self.keys]
        self.values = [v[:slots].clone() for v in self.values]
        self._free = [f for f in self._free if f < slots]
        self.slots = slots

    def clear(self) -> None:
        """Give the memory back: no slot is in use; the slabs shrink to one small slot (they regrow on demand)."""
        if self._used:
            raise ValueError("clear() with slots in use")
        self.slots = self.tokens = 0
        self.keys, self.values, self._free = [], [], []
        self._resize(1, 16, check=False)

    def copy_prefix(self, src: int, dst: int, length: int) -> None:
        """Positions [0, length) of slot `src` into slot `dst` (sharing a common prompt costs a copy, not a prefill)."""
        for keys, values in zip(self.keys, self.values):
            keys[dst, :, :length] = keys[src, :, :length]
            values[dst, :, :length] = values[src, :, :length]

    def _resize(self, slots: int, tokens: int, *, check: bool = True) -> None:
        if check and slots * tokens * self.bytes_per_token > self.max_bytes:
            raise CacheFull(f"{slots} slots x {tokens} tokens exceed the KV budget of {self.max_bytes >> 20} MiB")
        shape = (slots, self.kv_heads, tokens, self.head_dim)
        old_slots, old_tokens = self.slots, self.tokens
        new_keys, new_values = [], []
        for layer in range(self.layers):
            k = torch.zeros(shape, dtype=self.dtype, device=self.device)
            v = torch.zeros(shape, dtype=self.dtype, device=self.device)
            if self.keys:
                keep_s, keep_t = min(old_slots, slots), min(old_tokens, tokens)
                k[:keep_s, :, :keep_t] = self.keys[layer][:keep_s, :, :keep_t]
                v[:keep_s, :, :keep_t] = self.values[layer][:keep_s, :, :keep_t]
                self.keys[layer] = self.values[layer] = None  # type: ignore[call-overload]  # free as we go
            new_keys.append(k)
            new_values.append(v)
        self.keys, self.values = new_keys, new_values
        self._free += list(range(old_slots, slots))
        self.slots, self.tokens = slots, tokens
