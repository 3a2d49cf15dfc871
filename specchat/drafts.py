"""Loading a draft model for a target: the default draft, self-speculation, the vocabulary check.

The draft-model decoder is handed what this returns; it never loads a model itself. Drafts are
loaded once per process and shared by every decoder instance that uses them.
"""

from __future__ import annotations

from functools import lru_cache

from specchat.backends.base import Backend
from specchat.errors import SpecchatError
from specchat.models import BUNDLED_FILE, load_backend

SELF_PREFIX = "self:"


@lru_cache(maxsize=2)
def _load_cached(spec: str | None, backend: str | None, device: str) -> Backend:
    return load_backend(spec, backend=backend, device=device, n_ctx=8192)


def default_draft_reason(target: Backend) -> str | None:
    """Why there is no default draft for this target (None when there is one)."""
    if target.name == "hf" and target.model_name == BUNDLED_FILE.removesuffix(".gguf"):
        return None
    if target.name == "llama":
        return "the bundled model has no smaller sibling on llama.cpp: pass --draft MODEL"
    return "no default draft for this model: pass --draft MODEL"


def check_same_vocabulary(target: Backend, draft: Backend) -> None:
    """Refuse a draft whose tokens mean something else: its drafts would all be rejected."""
    common = min(target.vocab_size, draft.vocab_size)
    if abs(target.vocab_size - draft.vocab_size) > 256 or common == 0:
        raise SpecchatError(
            f"the draft's vocabulary ({draft.vocab_size} tokens) does not match the target's "
            f"({target.vocab_size})"
        )
    for token_id in range(0, common, max(1, common // 512)):
        if target.token_bytes(token_id) != draft.token_bytes(token_id):
            raise SpecchatError(
                f"the draft's vocabulary does not match the target's (token {token_id} differs)"
            )


def load_draft(spec: str | None, backend: str | None, device: str, target: Backend) -> Backend:
    """The draft for `target`: `spec` (a model spec, or self:L for the target's first L layers on
    hf), or the default draft when there is one; checked to share the target's vocabulary."""
    if spec is not None and spec.startswith(SELF_PREFIX):
        if target.name != "hf":
            raise SpecchatError("self-speculation (draft self:L) needs the hf backend")
        try:
            layers = int(spec.removeprefix(SELF_PREFIX))
        except ValueError:
            raise SpecchatError(f"draft {spec!r}: use self:LAYERS") from None
        from specchat.backends.hf import early_exit_draft

        draft = early_exit_draft(target, layers)
    elif spec is None:
        reason = default_draft_reason(target)
        if reason:
            raise SpecchatError(f"decoder 'draft' is unavailable: {reason}")
        draft = _load_cached(None, "llama", device)
    else:
        draft = _load_cached(spec, backend, device)
    check_same_vocabulary(target, draft)
    return draft
