"""Which engine answers on a backend: specchat's own loop for a model it runs, the server's stream
for a remote server. Both emit the same events, so callers never ask which one they got."""

from __future__ import annotations

from specchat.backends.base import Backend
from specchat.backends.remote import RemoteBackend
from specchat.decoding.base import Decoder
from specchat.decoding.engine import Engine
from specchat.decoding.remote_engine import RemoteEngine


def engine_for(backend: Backend | RemoteBackend, decoder: Decoder) -> Engine:
    if isinstance(backend, RemoteBackend):
        return RemoteEngine(backend, decoder)
    return Engine(backend, decoder)
