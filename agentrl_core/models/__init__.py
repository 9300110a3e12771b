"""Model store: resolve a model name to a local folder (importing embedded models once), then load it.

Importing this package is cheap: torch, transformers and huggingface_hub are imported only by the
functions that need them.
"""

from agentrl_core.models.embedded import ALIASES, EmbeddedModel, convert_gguf, get_embedded, import_embedded
from agentrl_core.models.loading import load_model, load_tokenizer, local_model_folder, model_info, resolve_model
from agentrl_core.models.model_cache import MARKER, ModelLockTimeout, agentrl_home, model_dir, models_dir, read_marker

__all__ = [
    "ALIASES",
    "MARKER",
    "EmbeddedModel",
    "ModelLockTimeout",
    "agentrl_home",
    "convert_gguf",
    "get_embedded",
    "import_embedded",
    "load_model",
    "load_tokenizer",
    "local_model_folder",
    "model_dir",
    "model_info",
    "models_dir",
    "read_marker",
    "resolve_model",
]
