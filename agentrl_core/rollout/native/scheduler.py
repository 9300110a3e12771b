"""Continuous batching for the native engine: which sequences prefill and decode in each step.

A request is a whole context (token ids) plus how to sample its reply. On admission it reuses
the longest cached prefix it can find, so a later turn of an episode prefills only the tokens
the environment appended:
- an idle cached sequence that the new context extends (the episode's previous turn) is taken
  over: same slot, nothing copied;
- else the cached sequence sharing the longest prefix, if at least `share_min` tokens, is copied
  into a fresh slot (the samples of a GRPO group share their prompt: it is prefilled once);
- a request whose prompt shares `share_min` more tokens with one being prefilled this very step
  waits one step, then copies instead of prefilling the same tokens again.
A slot that does not fit the KV budget evicts the least recently used idle sequence (it will be
prefilled again if it comes back); if nothing idle is left, the request waits for others to
finish, so memory stays bounded instead of running out.

Each step takes one token of every decoding sequence plus prefill chunks up to `max_step_tokens`
tokens in all (a long prompt is prefilled over several steps). The schedule is a function of the
requests and their order only, never of timing, so seeded runs repeat exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

import torch

from agentrl_core.rollout.native.forward import Segment
from agentrl_core.rollout.native.kv_cache import CacheFull, SlabKVCache
from agentrl_core.rollout.native.sampler import SamplingParams


@dataclass
class CachedSequence:
    """Token ids whose keys/values sit in `slot`, positions [0, len(tokens))."""

    slot: int
    tokens: list[int]
    key: Hashable | None = None
    busy: bool = False
    last_used: int = 0


@dataclass
class Request:
    """One reply to generate for a context; `seq` is set once admitted."""

    rid: int
    prompt: list[int]
    params: SamplingParams
    max_new_tokens: int
    generator: torch.Generator | None
    key: Hashable | None = None
    seq: CachedSequence | None = None
    pending: list[int] = field(default_factory=list)
    out_tokens: list[int] = field(default_factory=list)
    out_logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    reused: int = 0
    """Prompt tokens whose keys/values came from the cache (not prefilled)."""


@dataclass
class StepPlan:
    """The segments of one forward and which request each belongs to (and whether it ends its prefill)."""

    segments: list[Segment]
    owners: list[Request]


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (slice comparisons, binary search)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class Scheduler:
    """Admission, prefix reuse, eviction and step planning over a SlabKVCache."""

    def __init__(self, cache: SlabKVCache, *, max_step_tokens: int = 2048, max_running: int | None = None,
                 share_min: int = 16) -> None:
        self.cache = cache
        self.max_step_tokens, self.max_running, self.share_min = max_step_tokens, max_running, share_min
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.sequences: list[CachedSequence] = []
        self.clock = 0
        self.stats = {"prefilled_tokens": 0, "reused_tokens": 0, "copied_tokens": 0, "evictions": 0, "steps": 0}

    # ---- admission ---------------------------------------------------------------------------------

    def admit(self) -> list[Request]:
        """Move waiting requests into `running` while slots and budget allow; returns those that cannot
        ever run (their prompt alone exceeds the budget), marked with `error`."""
        failed: list[Request] = []
        prefilling: list[Request] = []
        still: list[Request] = []
        blocked = False
        for req in self.waiting:
            full = self.max_running is not None and len(self.running) >= self.max_running
            if blocked or full or self._shares_with(req, prefilling):
                still.append(req)  # after a request that found no room, nobody overtakes it
                continue
            outcome = self._place(req)
            if outcome == "placed":
                self.running.append(req)
                prefilling.append(req)
            elif outcome == "never":
                failed.append(req)
            else:
                still.append(req)
                blocked = True
        self.waiting = still
        return failed

    def _shares_with(self, req: Request, prefilling: list[Request]) -> bool:
        """Whether a request admitted this step will compute a prefix of `req`'s prompt worth copying."""
        _, cached = self._best_donor(req)
        return any(common_prefix(o.prompt, req.prompt) >= cached + self.share_min for o in prefilling)

    def _place(self, req: Request) -> str:
        """Give `req` a sequence: "placed", "wait" (no room now) or "never" (too long for the budget)."""
        need = len(req.prompt) + req.max_new_tokens
        if not self.cache.fits(1, need):
            req.error = (f"a context of {len(req.prompt)} tokens + {req.max_new_tokens} new ones does not fit the KV "
                         f"cache budget ({self.cache.max_bytes >> 20} MiB); raise rollout.engine.kv_cache_mb")
            return "never"
        donor, shared = self._best_donor(req)
        if donor is not None and not donor.busy and shared == len(donor.tokens):
            return self._take_over(req, donor)
        try:
            self._make_room(need)
            slot = self._allocate()
        except CacheFull:
            return "wait"
        seq = CachedSequence(slot=slot, tokens=[], key=req.key, busy=True, last_used=self.clock)
        if donor is not None and shared >= self.share_min and donor in self.sequences:
            self.cache.copy_prefix(donor.slot, slot, shared)
            seq.tokens = donor.tokens[:shared]
            self.stats["copied_tokens"] += shared
        self.sequences.append(seq)
        self._start(req, seq)
        return "placed"

    def _best_donor(self, req: Request) -> tuple[CachedSequence | None, int]:
        """The cached sequence sharing the longest prefix with `req` (at most all but its last token, which
        is always fed to get the first logits); among equals, an idle one that `req` fully extends (its
        next turn: taken over without a copy)."""
        limit = len(req.prompt) - 1
        best, best_len, best_full = None, 0, False
        for s in self.sequences:
            shared = min(common_prefix(s.tokens, req.prompt), limit)
            full = not s.busy and shared == len(s.tokens)
            if shared > best_len or (shared == best_len and shared > 0 and full and not best_full):
                best, best_len, best_full = s, shared, full
        return best, best_len

    def _take_over(self, req: Request, seq: CachedSequence) -> str:
        """Continue an idle sequence that `req`'s prompt extends: no copy, no prefill of what is cached."""
        seq.busy = True  # not an eviction candidate while room is made
        try:
            self._make_room(len(req.prompt) + req.max_new_tokens)
        except CacheFull:
            seq.busy = False
            return "wait"
        seq.key, seq.last_used = req.key, self.clock
        self._start(req, seq)
        return "placed"

    def _start(self, req: Request, seq: CachedSequence) -> None:
        req.seq = seq
        req.reused = len(seq.tokens)
        req.pending = req.prompt[len(seq.tokens):]
        self.stats["reused_tokens"] += req.reused

    def _make_room(self, length: int) -> None:
        """Grow T to `length`: first give back unused slots, then evict idle sequences, until it fits
        (CacheFull if it cannot)."""
        while True:
            try:
                self.cache.reserve_length(length)
                return
            except CacheFull:
                if not (self._shrink() or self._evict_one()):
                    raise

    def _shrink(self) -> bool:
        """Pack the cached sequences into the lowest slots and drop the slots above them (the slab keeps
        every slot at length T, so unused slots cost as much as used ones); False if none can go."""
        keep = max(1, len(self.sequences))
        if keep >= self.cache.slots:
            return False
        free_low = sorted(set(range(keep)) - {s.slot for s in self.sequences})
        moves = {}
        for seq in sorted(self.sequences, key=lambda s: s.slot):
            if seq.slot >= keep:
                moves[seq.slot] = free_low.pop(0)
                seq.slot = moves[seq.slot]
        self.cache.shrink(moves, keep)
        return True

    def _allocate(self) -> int:
        while True:
            try:
                return self.cache.allocate()
            except CacheFull:
                if not self._evict_one():
                    raise

    def _evict_one(self) -> bool:
        """Drop the least recently used idle sequence; False if there is none."""
        idle = [s for s in self.sequences if not s.busy]
        if not idle:
            return False
        victim = min(idle, key=lambda s: s.last_used)
        self.drop(victim)
        self.stats["evictions"] += 1
        return True

    def drop(self, seq: CachedSequence) -> None:
        """Forget a sequence and free its slot."""
        self.sequences.remove(seq)
        self.cache.release(seq.slot)

    def drop_idle(self, key: Hashable | None = None) -> None:
        """Forget idle sequences: all of them, or those with `key`."""
        for s in [s for s in self.sequences if not s.busy and (key is None or s.key == key)]:
            self.drop(s)

    # ---- one step ------------------------------------------------------------------------------------

    def plan(self) -> StepPlan:
        """Segments of the next forward: every decoding request's last token, then prefill chunks."""
        segments, owners = [], []
        budget = self.max_step_tokens
        for req in sorted((r for r in self.running if not r.pending), key=lambda r: r.seq.slot):
            segments.append(Segment(req.seq.slot, len(req.seq.tokens), [req.out_tokens[-1]], True))
            owners.append(req)
            budget -= 1
        for req in self.running:
            if req.pending and budget > 0:
                chunk = req.pending[:max(1, budget)]
                segments.append(Segment(req.seq.slot, len(req.seq.tokens), chunk, len(chunk) == len(req.pending)))
                owners.append(req)
                budget -= len(chunk)
        return StepPlan(segments, owners)

    def commit(self, plan: StepPlan) -> list[Request]:
        """After the forward: the fed tokens are now cached. Returns the requests that sample this step."""
        self.clock += 1
        self.stats["steps"] += 1
        sampling = []
        for seg, req in zip(plan.segments, plan.owners):
            req.seq.tokens.extend(seg.tokens)
            req.seq.last_used = self.clock
            if req.pending:
                del req.pending[:len(seg.tokens)]
                self.stats["prefilled_tokens"] += len(seg.tokens)
            if seg.wants_logits:
                sampling.append(req)
        return sampling

    def finish(self, req: Request) -> None:
        """`req` is done: its sequence stays cached (idle) for a later turn, until evicted or released."""
        self.running.remove(req)
        if req.seq is not None:
            req.seq.busy, req.seq.last_used = False, self.clock
