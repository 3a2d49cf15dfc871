"""The server's own method: what runs on a remote OpenAI-compatible server.

A remote server decodes (and speculates, if it was started so) by itself and streams text; specchat
cannot step it. This pseudo-decoder is how the registry, the CLI and the TUI name that method:
`-d server`, a key in the chat, a row in a race. `RemoteEngine` runs it; its `step` is never called.
"""

from __future__ import annotations

from specchat.backends.base import Backend
from specchat.decoding.base import Decoder
from specchat.decoding.sampling import Sampler
from specchat.decoding.step import Step
from specchat.errors import SpecchatError


class ServerDecoder(Decoder):
    name = "server"
    key = "f10"
    description = "the remote server's own decoding and speculation (--backend openai)"
    greedy_family = False  # another runtime, maybe another model: compared by text, not by ids
    needs_logits = False
    needs_server = True

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        raise SpecchatError("the server decoder runs only on a remote server (--backend openai)")
