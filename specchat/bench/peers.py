"""The libraries' own implementations of the same methods, run on the same questions.

They are what a user would otherwise reach for, so our decoders are reported as ratios over them:
llama-cpp-python's `Llama.generate` (plain, and with `LlamaPromptLookupDecoding`), llama.cpp's own
`llama-server` with its own speculation (`--spec-type`: none, ngram-simple, ngram-mod) on the same
model file and threads, and transformers' `generate` (plain, `prompt_lookup_num_tokens`,
`assistant_model`). This module is the one place that reaches into a backend's library objects,
because running the library is its whole job.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from specchat.backends.base import Backend
from specchat.backends.hf.packed import stock_linears
from specchat.backends.registry import (
    GGUF,
    LLAMA_CPP,
    LLAMA_CPP_LIBRARY,
    TRANSFORMERS_LIBRARY,
    runtime_of,
)
from specchat.engine.events import DoneEvent
from specchat.engine.protocol import Cancel
from specchat.engine.stats import GenerationStats
from specchat.errors import SpecchatError
from specchat.evaluation.race import IDS, DecoderEntrant, RaceTurn


class Peer:
    """A library's own method as a race entrant: it answers the race's prompt ids greedily and
    reports only its end (no steps), with the decode time the library's own clock gives."""

    label: str
    compared_by = IDS
    _backend: Backend

    def run(self, turn: RaceTurn, cancel: Cancel = None) -> Iterator[DoneEvent]:
        """Peers draft from the prompt alone: the race's draft sources are not theirs to use."""
        yield self.answer(list(turn.prompt_ids), turn.max_tokens)

    def answer(self, prompt: list[int], max_tokens: int) -> DoneEvent:
        raise NotImplementedError

    def oracle(self, turn: RaceTurn, answer: Sequence[int]) -> None:
        return None  # a library's drafts are not ours to replay

    def _done(
        self,
        prompt: list[int],
        tokens: Sequence[int],
        seconds: float,
        steps: int = 0,
        drafted: int = 0,
        accepted: int = 0,
    ) -> DoneEvent:
        """The peer's answer as a done event; `steps` 0 where the library reports no passes."""
        text = b"".join(self._backend.token_bytes(t) for t in tokens).decode("utf-8", "replace")
        stats = GenerationStats(
            prompt_tokens=len(prompt),
            generated_tokens=len(tokens),
            steps=steps,
            drafted=drafted,
            accepted=accepted,
            decode_seconds=max(seconds, 1e-9),
        )
        return DoneEvent("eos", tuple(prompt), tuple(tokens), text, stats)

    def close(self) -> None:
        """Free what the peer started."""


def _decode_seconds(first_token_at: float | None, end: float, tokens: int) -> float:
    """Library calls do not separate prefill from decoding: time from the first generated token
    on, scaled to all tokens (our engine's decode time also covers the first token's step)."""
    if first_token_at is None or tokens < 2:
        return max(end - (first_token_at or end), 1e-9)
    return (end - first_token_at) * tokens / (tokens - 1)


def _library(backend: Backend) -> str:
    """Whose library `backend`'s runtime runs on ("" for specchat's own)."""
    made_by = runtime_of(backend)
    return made_by.library if made_by is not None else ""


def _gguf_file(backend: Backend) -> str | None:
    """The GGUF file `backend` runs, when it runs one as its own format (not transformers'
    conversion of it): what llama.cpp's own methods are set beside."""
    made_by = runtime_of(backend)
    if made_by is None or made_by.own_format != GGUF:
        return None
    return backend.model_path


class LlamaCppPeer(Peer):
    def __init__(self, backend: Backend, prompt_lookup: bool, num_pred_tokens: int = 10) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        path = _gguf_file(backend)
        if path is None:
            raise SpecchatError("llama-cpp-python peers need a GGUF model")
        self.label = f"peer:llama-cpp-python:{'pld' if prompt_lookup else 'greedy'}"
        self._eos = backend.eos_ids
        draft = (
            LlamaPromptLookupDecoding(num_pred_tokens=num_pred_tokens) if prompt_lookup else None
        )
        # With a draft model llama-cpp-python keeps every position's logits, but sizes that buffer
        # for all positions only when logits_all is passed up front (else prompts > n_batch fail).
        self._llm = Llama(
            path,
            n_ctx=min(backend.n_ctx, 2048) if prompt_lookup else backend.n_ctx,
            logits_all=prompt_lookup,
            n_threads=backend.threads,
            n_threads_batch=backend.threads,
            flash_attn=False,
            draft_model=draft,
            verbose=False,
        )
        self._backend = backend

    def answer(self, prompt: list[int], max_tokens: int) -> DoneEvent:
        tokens: list[int] = []
        self._llm.reset()
        first = None
        for token in self._llm.generate(prompt, top_k=1, temp=0.0, reset=True):
            if first is None:
                first = time.perf_counter()
            if token in self._eos:
                break
            tokens.append(token)
            if len(tokens) >= max_tokens:
                break
        end = time.perf_counter()
        return self._done(prompt, tokens, _decode_seconds(first, end, len(tokens)))


class _FirstTokenClock:
    """A transformers streamer that notes when the first generated tokens arrive."""

    def __init__(self) -> None:
        self.calls = 0
        self.first: float | None = None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2:  # the first call carries the prompt
            self.first = time.perf_counter()

    def end(self) -> None:
        pass


class TransformersPeer(Peer):
    def __init__(self, backend: Backend, mode: str, num_pred_tokens: int = 10) -> None:
        if _library(backend) != TRANSFORMERS_LIBRARY:
            raise SpecchatError("transformers peers need a model on transformers")
        self.label = f"peer:transformers:{mode}"
        self._backend = backend
        self._kwargs: dict[str, object] = {}
        if mode == "pld":
            self._kwargs["prompt_lookup_num_tokens"] = num_pred_tokens
        elif mode == "draft":
            # No smaller sibling of the bundled model exists in transformers form: the target
            # drafts for itself, which shows the machinery's own cost.
            self._kwargs["assistant_model"] = backend.model

    def answer(self, prompt: list[int], max_tokens: int) -> DoneEvent:
        import torch

        model = self._backend.model
        input_ids = torch.tensor([prompt], device=model.device)
        clock = _FirstTokenClock()
        # transformers as it ships: its own nn.Linear, not our prepacked weights (backends/hf/packed.py)
        with torch.no_grad(), stock_linears(model):
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                do_sample=False,
                max_new_tokens=max_tokens,
                pad_token_id=next(iter(self._backend.eos_ids)),
                streamer=clock,
                **self._kwargs,
            )
        end = time.perf_counter()
        generated = out[0, len(prompt) :].tolist()
        cut = next((i for i, t in enumerate(generated) if t in self._backend.eos_ids), None)
        tokens = generated[:cut] if cut is not None else generated
        return self._done(prompt, tokens, _decode_seconds(clock.first, end, len(tokens)))


class LlamaServerPeer(Peer):
    """llama.cpp's llama-server with its own speculation (`spec_type`, "none" for plain; lengths
    as in LLAMA_SERVER_SPECS), started on 127.0.0.1 on the same GGUF file, threads and context,
    with flash attention off like our backend; timed by the server's own figures. It gets our prompt's token ids (one template for
    all) and returns its token ids, so its exactness is judged as ours is."""

    def __init__(self, backend: Backend, spec: str, binary: Path) -> None:
        import openai

        from specchat.bench.llama_server import (
            LlamaServerProcess,
            free_port,
            server_command,
        )

        path = _gguf_file(backend)
        if path is None:
            raise SpecchatError("llama-server peers need a GGUF model")
        self.label = f"peer:llama-server:{spec}"
        spec_type, flags = LLAMA_SERVER_SPECS[spec]
        self._backend = backend
        port = free_port()
        command = server_command(
            binary,
            path,
            port,
            spec_type=spec_type,
            threads=backend.threads,
            n_ctx=backend.n_ctx,
            extra=flags,
        )
        self._server = LlamaServerProcess(command, port).start()
        self._client = openai.OpenAI(
            base_url=self._server.base_url, api_key="none", max_retries=0, timeout=600
        )
        # ngram-mod keeps the n-grams of every answer the server gave, across requests: in a
        # repeat of the same race it would draft the answer it gave the round before. A repeat
        # goes to a fresh server (a question asked again in a new chat is another race: there
        # the server keeps what it remembers, as our saved chats do).
        self._remembers = spec_type == "ngram-mod"
        self._last_turn: RaceTurn | None = None

    def run(self, turn: RaceTurn, cancel: Cancel = None) -> Iterator[DoneEvent]:
        if self._remembers and turn is self._last_turn:
            self._server.stop()
            self._server.start()
        self._last_turn = turn
        yield from super().run(turn, cancel)

    def answer(self, prompt: list[int], max_tokens: int) -> DoneEvent:
        response = self._client.completions.create(
            model="smollm2",
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=0.0,
            # llama-server's own fields: the generated token ids (under __verbose) and timings
            extra_body={"top_k": 1, "return_tokens": True, "verbose": True},
        )
        extra = response.model_extra or {}
        timings = extra.get("timings") or {}
        tokens = list((extra.get("__verbose") or {}).get("tokens") or [])
        while tokens and tokens[-1] in self._backend.eos_ids:
            tokens.pop()
        generated = int(timings.get("predicted_n", len(tokens)))
        accepted = int(timings.get("draft_n_accepted", 0))
        # the server times decoding from its first token on (that one came with the prompt):
        # scaled to all tokens, as for the library peers above
        seconds = float(timings.get("predicted_ms", 0.0)) / 1000.0
        if generated > 1:
            seconds *= generated / (generated - 1)
        return self._done(
            prompt,
            tokens,
            seconds,
            generated - accepted,  # passes: each yields the server's own token plus accepted drafts
            int(timings.get("draft_n", 0)),
            accepted,
        )

    def close(self) -> None:
        self._client.close()
        self._server.stop()


# llama-server's speculation peers: name → (its --spec-type, more flags). `ngram-mod` runs with
# llama-server's own defaults (24-token lookups, 48–64-token drafts: rare, long, nearly always
# right), as a user of llama-server gets it; `ngram-simple` and `ngram-mod-3` have lookup and draft
# lengths matched to our pld's defaults (3-gram lookup, up to 10 drafted tokens).
LLAMA_SERVER_SPECS: dict[str, tuple[str, tuple[str, ...]]] = {
    "none": ("none", ()),
    "ngram-simple": (
        "ngram-simple",
        ("--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "10"),
    ),
    "ngram-mod": ("ngram-mod", ()),
    "ngram-mod-3": (
        "ngram-mod",
        (
            "--spec-ngram-mod-n-match",
            "3",
            "--spec-ngram-mod-n-min",
            "1",
            "--spec-ngram-mod-n-max",
            "10",
        ),
    ),
}


def llama_server_peers(backend: Backend, binary: str | None = None) -> list[Peer]:
    """llama-server with each of its speculation types; none (with the reason on stderr) where
    llama-server is not built (`binary`: the settings' llama_server) or cannot start here."""
    import sys

    from specchat.bench.llama_server import find_llama_server

    peers: list[Peer] = []
    try:
        found = find_llama_server(binary)
        for spec in LLAMA_SERVER_SPECS:
            peers.append(LlamaServerPeer(backend, spec, found))
    except SpecchatError as exc:
        for peer in peers:
            peer.close()
        sys.stderr.write(f"specchat: note: no llama-server peers: {exc}\n")
        return []
    return peers


def other_runtime_peers(backend: Backend, decoders: list[str]) -> list[DecoderEntrant]:
    """The same GGUF on specchat's other runtime (int4 beside llama.cpp, llama.cpp beside int4):
    its greedy and the first of `decoders` that drafts, named NAME@RUNTIME. Their answers are
    that runtime's, so they are not judged against this one's greedy."""
    from specchat.backends.runtimes import candidates
    from specchat.decoding.registry import DECODERS
    from specchat.models import LoadOptions, load_model
    from specchat.options import RunConfig
    from specchat.run_config import run_params

    others = [
        r for r in candidates(GGUF, Path(backend.model_path), backend.device) if r != backend.name
    ]
    if not others:
        return []
    options = LoadOptions(backend=others[0], threads=backend.threads, n_ctx=backend.n_ctx)
    other = load_model(backend.model_path, options)
    names = ["greedy", *[n for n in decoders if DECODERS[n].speculative][:1]]
    params = run_params(names, RunConfig())
    entrants = []
    for name in names:
        entrant = DecoderEntrant(other, name, params[name], f"{name}@{other.name}")
        entrant.compared_by, entrant.owns_backend = None, True
        entrants.append(entrant)
    return entrants


def peers_for(
    backend: Backend, llama_server: str | None = None, decoders: list[str] | None = None
) -> list:
    """The libraries' own methods on `backend`'s model (`llama_server`: the settings' binary),
    and for a GGUF the same model on specchat's other runtime (`decoders`: ours in the run)."""
    if _gguf_file(backend) is not None:
        llama_cpp = [
            LlamaCppPeer(backend, False),
            LlamaCppPeer(backend, True),
            *llama_server_peers(backend, llama_server),
        ]
        if _library(backend) != LLAMA_CPP_LIBRARY:  # llama.cpp's answers are not its greedy's
            for peer in llama_cpp:
                peer.compared_by = None
        return [*llama_cpp, *other_runtime_peers(backend, decoders or [])]
    return [
        TransformersPeer(backend, "greedy"),
        TransformersPeer(backend, "pld"),
        TransformersPeer(backend, "draft"),
    ]


# What every one of our methods is set beside, in absolute tok/s and as a ratio: llama.cpp's
# greedy (specchat's llama.cpp runtime, llama-cpp-python) and llama-server's own speculation.
REFERENCE_PEERS = (
    f"greedy@{LLAMA_CPP}",
    "peer:llama-cpp-python:greedy",
    "peer:llama-server:none",
    "peer:llama-server:ngram-mod",
)


# Which peer each of our methods is compared with.
MATCHING_PEER = {
    "greedy": (
        "peer:llama-cpp-python:greedy",
        "peer:llama-server:none",
        "peer:transformers:greedy",
    ),
    "pld": (
        "peer:llama-cpp-python:pld",
        "peer:llama-server:ngram-simple",
        "peer:llama-server:ngram-mod",
        "peer:llama-server:ngram-mod-3",
        "peer:transformers:pld",
    ),
    "draft": ("peer:transformers:draft",),
}
