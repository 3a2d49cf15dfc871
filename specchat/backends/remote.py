"""A remote OpenAI-compatible server (vLLM, SGLang, llama.cpp's llama-server, ...) as the model.

specchat does not serve models that outgrow this machine: it becomes a client of an engine that
does. The server applies its own chat template and runs its own decoding (and speculation), so this
is not a `Backend` in the logits sense but a `ServerBackend`, and the decoder registry offers only
the server's own method on it. It streams `/v1/chat/completions` through the `openai` client and reads
each chunk into a `ServerChunk`: the text and whatever figures the server put on it —
llama-server's per-token `timings` (asked for with `timings_per_token`), the final `usage`, vLLM's
per-request `metrics`. Nothing here guesses a figure the server did not send.

Every failure is a `RemoteError` whose text is one line: connection refused, an error status, a read
timeout, a stream dropped mid-answer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from specchat.backends.base import ChatMessage
from specchat.backends.registry import OPENAI_SERVER
from specchat.errors import SpecchatError

DEFAULT_TIMEOUT = 60.0  # seconds without a byte from the server before a stream counts as stalled
_CONNECT_TIMEOUT = 10.0
SERVER_PREFIX = "server@"  # how a race names a server: server@HOST:PORT


class RemoteError(SpecchatError):
    """A remote server could not be reached or did not finish an answer (one line)."""


@dataclass(frozen=True)
class ServerChunk:
    """One streamed chunk: its text and the figures the server attached (None: not sent).

    llama-server's figures are cumulative over the answer: `generated` tokens so far
    (`predicted_n`), `drafted` and `accepted` draft tokens so far (`draft_n`, `draft_n_accepted`,
    sent once the first draft was made), and milliseconds. vLLM's `spec_*` totals arrive once, on
    the final chunk, with `--per-request-spec-decode-metrics`.
    """

    text: str = ""
    finish_reason: str | None = None
    generated: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    generated_ms: float | None = None
    prompt_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    spec_steps: int | None = None
    spec_drafted: int | None = None
    spec_accepted: int | None = None
    generation_ms: float | None = None  # vLLM's per-request decode time

    @property
    def has_timings(self) -> bool:
        return self.generated is not None


def _number(mapping: Any, key: str) -> float | None:
    if not isinstance(mapping, dict):
        return None
    value = mapping.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(mapping: Any, key: str) -> int | None:
    value = _number(mapping, key)
    return None if value is None else int(value)


def read_chunk(chunk: Any) -> ServerChunk:
    """A `ServerChunk` from an `openai` ChatCompletionChunk (extra fields are the servers' own)."""
    extra = chunk.model_extra or {}
    text = ""
    finish = None
    for choice in chunk.choices or ():
        delta = choice.delta
        if delta is not None and delta.content:
            text += delta.content
        finish = choice.finish_reason or finish
    timings = extra.get("timings")
    usage = chunk.usage
    metrics = extra.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    generated = _count(timings, "predicted_n")
    drafted = _count(timings, "draft_n")
    accepted = _count(timings, "draft_n_accepted")
    if generated is not None and drafted is None:
        # llama-server adds draft_n / draft_n_accepted to its timings once it has drafted
        drafted = accepted = 0
    return ServerChunk(
        text=text,
        finish_reason=finish,
        generated=generated,
        drafted=drafted,
        accepted=accepted,
        generated_ms=_number(timings, "predicted_ms"),
        prompt_ms=_number(timings, "prompt_ms"),
        prompt_tokens=None if usage is None else usage.prompt_tokens,
        completion_tokens=None if usage is None else usage.completion_tokens,
        spec_steps=_count(spec, "num_spec_steps"),
        spec_drafted=_count(spec, "num_draft_tokens"),
        spec_accepted=_count(spec, "num_accepted_draft_tokens"),
        generation_ms=_number(metrics, "generation_time_ms"),
    )


def _reason(exc: Exception, url: str, streaming: bool = False) -> str:
    """One line for whatever the client raised (`streaming`: after the answer had begun)."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return f"{url} did not answer in time (stalled past the timeout)"
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        message = body.get("message") if isinstance(body, dict) else None
        if message is None and isinstance(body, dict) and isinstance(body.get("error"), dict):
            message = body["error"].get("message")
        detail = message or exc.response.reason_phrase or "error"
        return f"{url} answered {exc.status_code}: {' '.join(str(detail).split())}"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        text = " ".join(str(cause or exc).split()) or type(cause or exc).__name__
        if "refused" in text.lower():
            return f"cannot connect to {url}: connection refused"
        if streaming:
            return f"{url} dropped the stream mid-answer ({text})"
        return f"the connection to {url} failed: {text}"
    return f"{url}: {' '.join(str(exc).split()) or type(exc).__name__}"


class ChatStream:
    """One streamed answer: iterate for `ServerChunk`s; `close` ends it at once (from any thread)."""

    def __init__(self, stream: Any, url: str) -> None:
        self._stream = stream
        self._url = url

    def __iter__(self) -> Iterator[ServerChunk]:
        try:
            for chunk in self._stream:
                yield read_chunk(chunk)
        except Exception as exc:
            raise RemoteError(_reason(exc, self._url, streaming=True)) from None

    def close(self) -> None:
        try:
            self._stream.close()
        except Exception:  # closing a broken connection may fail again; it is closed either way
            pass


class RemoteBackend:
    """An OpenAI-compatible server at `base_url` (ending in /v1), serving `model` (None: the one it
    lists first). The API key, if the server wants one, is read from the environment variable the
    user names — never from OPENAI_API_KEY by default, so no key goes to a URL it was not meant for.
    """

    name = OPENAI_SERVER
    level = ""  # the server's own hardware: nothing specchat runs

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key_env: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        import openai

        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SpecchatError(
                f"--base-url must be an http(s) URL such as http://HOST:PORT/v1, got {base_url!r}"
            )
        api_key = "none"
        if api_key_env:
            api_key = os.environ.get(api_key_env, "")
            if not api_key:
                raise SpecchatError(
                    f"--api-key-env {api_key_env}: that environment variable is not set"
                )
        self.base_url = base_url.rstrip("/")
        self.device = parts.netloc  # what the status line shows where a local model shows cpu/cuda
        self.timeout = timeout
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key,
            max_retries=0,  # a retried stream would repeat text already shown
            timeout=openai.Timeout(timeout, connect=min(timeout, _CONNECT_TIMEOUT)),
        )
        self.server_kind = (
            ""  # "llamacpp", "vllm", "sglang", ...: who the server says owns the model
        )
        self.model_name = model or ""
        self._look_up_model(model)

    def _look_up_model(self, model: str | None) -> None:
        """Ask the server which models it serves (this also checks that it answers at all)."""
        try:
            listed = list(self._client.models.list())
        except Exception as exc:
            raise RemoteError(_reason(exc, self.base_url)) from None
        chosen = next((m for m in listed if m.id == model), None) if model else None
        if model is None:
            if not listed:
                raise RemoteError(f"{self.base_url} serves no model: pass --model NAME")
            chosen = listed[0]
            self.model_name = chosen.id
        if chosen is not None:
            self.server_kind = str(getattr(chosen, "owned_by", "") or "")

    @property
    def label(self) -> str:
        """How races and reports name this server."""
        return f"server@{self.device}"

    def stream_chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int,
        stop: Sequence[str] = (),
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int | None = None,
    ) -> ChatStream:
        """Start streaming the answer to `messages`; raises RemoteError when the server cannot be
        reached or refuses the request (before anything arrived)."""
        extra: dict[str, object] = {}
        if top_k:
            extra["top_k"] = top_k
        if self.server_kind == "llamacpp":
            # per-chunk timings with the draft counters: what colours the server's own runs
            extra["timings_per_token"] = True
        optional: dict[str, Any] = {}
        if seed is not None:
            optional["seed"] = seed
        if stop:
            optional["stop"] = list(stop)
        if extra:
            optional["extra_body"] = extra
        try:
            stream = self._client.chat.completions.create(
                model=self.model_name,
                messages=[{"role": m.role, "content": m.content} for m in messages],
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=top_p,
                stream=True,
                stream_options={"include_usage": True},
                **optional,
            )
        except Exception as exc:
            raise RemoteError(_reason(exc, self.base_url)) from None
        return ChatStream(stream, self.base_url)

    def close(self) -> None:
        self._client.close()


def server_url(spelling: str) -> str:
    """`127.0.0.1:8080` → http://127.0.0.1:8080/v1; a URL with a scheme keeps it, and a path of
    its own (else /v1). A one-line SpecchatError for what is no server address."""
    text = spelling.strip().rstrip("/")
    url = text if "://" in text else f"http://{text}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or " " in text:
        raise SpecchatError(
            f"{SERVER_PREFIX}{spelling}: write {SERVER_PREFIX}HOST:PORT or "
            f"{SERVER_PREFIX}http(s)://HOST:PORT/v1"
        )
    return url if parts.path else f"{url}/v1"


def server_spelling(url: str) -> str:
    """The shortest spelling that `server_url` reads back as `url`."""
    short = url.removesuffix("/v1")
    if short.startswith("http://"):
        short = short[len("http://") :]
    return short if server_url(short) == url else url


def connect(model: str | None, options, progress=None) -> RemoteBackend:
    """The registry's loader (`backends/registry.py`): the server `options.base_url` names,
    serving `model` (None: the one it lists first)."""
    if not options.base_url:
        raise SpecchatError(
            f"--backend {RemoteBackend.name} needs --base-url URL (e.g. http://127.0.0.1:8080/v1)"
        )
    timeout = options.timeout if options.timeout is not None else DEFAULT_TIMEOUT
    if timeout <= 0:
        raise SpecchatError("--timeout must be more than 0 seconds")
    return RemoteBackend(
        options.base_url, model or None, api_key_env=options.api_key_env, timeout=timeout
    )
