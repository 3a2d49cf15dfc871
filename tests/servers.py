"""Real servers for the remote backend's tests, all on 127.0.0.1 and stopped by the tests.

- `llama_server_binary`, `llama_server`, `llama_server_ngram`: llama.cpp's own llama-server,
  built by scripts/llama-server (once, cached) and started through that script on free ports,
  without and with n-gram speculation (`--spec ngram-mod`). Tests skip with the reason only when
  the server cannot be built.
- `FaultServer`: a tiny OpenAI-compatible HTTP server that misbehaves on purpose — refuses with an
  error status, stalls after some text, drops the connection mid-answer — or streams text with no
  figures at all, or with vLLM's final speculation totals (the format vLLM documents).

Registered as a pytest plugin by tests/conftest.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from specchat.bench.llama_server import LlamaServerProcess, free_port
from specchat.bench.peers import LLAMA_SERVER_SPECS

SERVER_THREADS = 1  # the suite shares two cores; the server's speed is never a result
# The bundled model answers this by repeating itself: n-gram speculation has runs to find.
REPEATING_PROMPT = (
    "Write the sentence 'the quick brown fox jumps over the lazy dog' five times, one per line."
)


SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "llama-server"


@pytest.fixture(scope="session")
def llama_server_binary() -> str:
    """scripts/llama-server's build, made now when missing (its progress on the terminal): the
    chat's set-up does not build it, the tests that need it do."""
    result = subprocess.run(
        ["bash", str(SCRIPT), "--path"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "SPECCHAT_PYTHON": sys.executable},
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not Path(lines[-1]).is_file():
        pytest.skip("llama-server cannot be built here (see the build's messages above)")
    return lines[-1]


def start_llama_server(spec: str | None = None, extra: Sequence[str] = ()) -> LlamaServerProcess:
    """scripts/llama-server on a free port, as a user starts it (the script builds nothing now:
    the session fixture built it)."""
    port = free_port()
    command = ["bash", str(SCRIPT), "--port", str(port)]
    if spec:
        command += ["--spec", spec]
    # --metrics: the server's own totals at /metrics, the tests' oracle for its counters
    command += ["--threads", str(SERVER_THREADS), "--ctx-size", "2048", "--metrics", *extra]
    env = {**os.environ, "SPECCHAT_PYTHON": sys.executable}
    return LlamaServerProcess(command, port, env).start()


@pytest.fixture(scope="session")
def llama_server(llama_server_binary) -> Iterator[LlamaServerProcess]:
    """llama-server on the bundled model, no speculation."""
    server = start_llama_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def llama_server_ngram(llama_server_binary) -> Iterator[LlamaServerProcess]:
    """llama-server on the bundled model with its n-gram speculation (ngram-mod with 3-token
    lookups, as bench's `ngram-mod-3` peer: its defaults seldom draft on short answers)."""
    server = start_llama_server(*LLAMA_SERVER_SPECS["ngram-mod-3"])
    yield server
    server.stop()


def server_metrics(server: LlamaServerProcess) -> dict[str, float]:
    """llama-server's Prometheus counters (`--metrics`), e.g. spec_decode_num_accepted_tokens_total:
    the server's own totals, read apart from any stream."""
    from urllib.request import urlopen

    with urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name.split(":", 1)[-1]] = float(value)
    return found


# -- the misbehaving server -------------------------------------------------------------------


def sse(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def chunk(text: str | None = None, finish: str | None = None, **extra) -> dict:
    delta = {} if text is None else {"content": text}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fault",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


class FaultServer:
    """OpenAI-compatible enough for the `openai` client: GET /v1/models lists one model; POST
    /v1/chat/completions does what `behaviour` says:

    - "status": answers 500 with an error body;
    - "stall": streams `texts`, then sends nothing until the server stops;
    - "drop": streams `texts`, then closes the connection mid-body;
    - "plain": streams `texts`, a finish and usage, no figures of any speculation;
    - "totals": like "plain", with vLLM's per-request speculation metrics on the final chunk.
    """

    def __init__(self, behaviour: str, texts: Sequence[str] = ("Hello", ",", " world")) -> None:
        self.behaviour = behaviour
        self.texts = list(texts)
        self.released = threading.Event()
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []  # of every request, GET and POST
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.released.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _json(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                server.headers.append(dict(self.headers))
                models = [{"id": "fault", "object": "model", "created": 0, "owned_by": "test"}]
                self._json(200, {"object": "list", "data": models})

            def _send(self, data: bytes) -> None:
                # one HTTP chunk per event, as streaming servers send them
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def do_POST(self) -> None:
                server.headers.append(dict(self.headers))
                length = int(self.headers.get("Content-Length", 0))
                server.requests.append(json.loads(self.rfile.read(length) or b"{}"))
                if server.behaviour == "status":
                    self._json(500, {"error": {"message": "the model crashed", "code": 500}})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self._send(sse(chunk("")))
                for text in server.texts:
                    self._send(sse(chunk(text)))
                if server.behaviour == "stall":
                    server.released.wait(120)
                    return
                if server.behaviour == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)  # mid-body: no final chunk, no [DONE]
                    return
                self._send(sse(chunk(finish="stop")))
                usage = {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}
                final = chunk(usage=usage)
                final["choices"] = []
                if server.behaviour == "totals":
                    final["metrics"] = {
                        "speculative_decoding": {
                            "num_spec_steps": 4,
                            "num_draft_tokens": 12,
                            "num_accepted_draft_tokens": 3,
                            "mean_acceptance_length": 1.75,
                            "draft_acceptance_rate": 0.25,
                        }
                    }
                self._send(sse(final))
                self._send(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

        return Handler
