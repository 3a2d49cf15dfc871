"""A remote server's stream as decoding steps, exactly as far as the server's own figures say.

Three kinds of server, told apart by what their chunks carry, never by a guess:

- **per token** (llama.cpp's llama-server with `timings_per_token`): every chunk carries the
  cumulative count of generated tokens and of drafted and accepted draft tokens. When a pass of the
  server verified a draft, it raised both counters before sending the pass's first token, then sent
  the accepted tokens and its own next token one chunk each (docs/remote.md shows the real
  sequence). So a chunk whose accepted count grew by a opens a step of a + 1 tokens with a
  accepted; a chunk whose counters did not move is a plain one-token step. Token counts come from the
  generated counter, not from chunks: a token without text of its own (half a character, text held
  back for a stop string) sends no chunk, and its count arrives with the next one.
- **totals** (vLLM with `--per-request-spec-decode-metrics`): drafted and accepted totals arrive on
  the final chunk; a chunk may hold several tokens of several steps, so nothing is coloured live.
- **none**: text only. The answer's figures are what `usage` says at the end, if anything.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specchat.backends.remote import ServerChunk

PER_TOKEN = "per_token"
TOTALS = "totals"
NONE = "none"

NOTES = {
    PER_TOKEN: "runs as the server reports them, token by token",
    TOTALS: "speculation totals only: runs cannot be coloured live",
    NONE: "the server reports no speculation figures",
}


@dataclass(frozen=True)
class ServerStep:
    """What one pass of the server appended: `tokens` is the server's count (0: not reported)."""

    text: str
    tokens: int
    drafted: int
    accepted: int
    seconds: float


@dataclass
class _OpenStep:
    size: int  # tokens the step will hold: accepted + the server's own next token
    tokens: int
    drafted: int
    accepted: int
    text: str = ""


class ServerSteps:
    """Feed chunks in order (`add`), then `finish`: each returns the steps that completed."""

    def __init__(self) -> None:
        self.reports = NONE
        self.last: ServerChunk | None = None  # the latest chunk with timings or totals
        self.usage: ServerChunk | None = None  # the chunk with the answer's token counts
        self._generated = 0
        self._drafted = 0
        self._accepted = 0
        self._marked_ms = 0.0  # the server's decode clock when the last step was emitted
        self._open: _OpenStep | None = None

    def add(self, chunk: ServerChunk, seconds: float, ended: bool = False) -> list[ServerStep]:
        """Steps completed by `chunk`; `seconds` is the client's clock since the previous chunk,
        used only for a server that sends no timings of its own. `ended`: the server said the
        model ended the answer (finish "stop", no stop strings asked for)."""
        if chunk.completion_tokens is not None:
            self.usage = chunk
        if chunk.spec_steps is not None:
            self.reports = TOTALS
            self.last = chunk
        if not chunk.has_timings:
            return [ServerStep(chunk.text, 0, 0, 0, seconds)] if chunk.text else []
        self.reports = PER_TOKEN
        self.last = chunk
        new = max(0, chunk.generated - self._generated)
        drafted = max(0, (chunk.drafted or 0) - self._drafted)
        accepted = max(0, (chunk.accepted or 0) - self._accepted)
        self._generated += new
        self._drafted += drafted
        self._accepted += accepted
        if ended and new and not chunk.text:
            # the end-of-answer token: llama-server counts it, but it is no part of the answer
            # (specchat's own engine does not count it either)
            new -= 1
        done: list[ServerStep] = []
        if drafted > 0 or accepted > 0:  # a verified pass began with one of these tokens
            # One chunk carries several tokens when some had no text of their own: the first
            # ones finish the pass still open (the server sends a pass's tokens before it
            # drafts again), the rest open the new pass.
            open_step = self._open
            remaining = open_step.size - open_step.tokens if open_step is not None else 0
            before = min(remaining, max(0, new - 1))
            for _ in range(before):
                self._take_token(done)
            self._close(done)
            self._open = _OpenStep(accepted + 1, 0, drafted, accepted)
            new -= before
        for _ in range(new):
            self._take_token(done)
        if chunk.text:
            if self._open is not None:
                self._open.text += chunk.text
            elif done:
                done[-1] = replace(done[-1], text=done[-1].text + chunk.text)
            else:  # text with no token of its own: it joins the next step
                self._open = _OpenStep(1, 0, 0, 0, chunk.text)
        self._stamp(done, chunk.generated_ms)
        return done

    def finish(self) -> list[ServerStep]:
        """The step still open when the stream ended (cut short by EOS, a stop or the limit)."""
        done: list[ServerStep] = []
        self._close(done)
        self._stamp(done, self.last.generated_ms if self.last is not None else None)
        return done

    def _stamp(self, done: list[ServerStep], ms: float | None) -> None:
        """The server's decode time since the last step went out goes to the last step done."""
        if done and ms is not None:
            done[-1] = replace(done[-1], seconds=max(0.0, ms - self._marked_ms) / 1000.0)
            self._marked_ms = ms

    def _take_token(self, done: list[ServerStep]) -> None:
        if self._open is None:
            self._open = _OpenStep(1, 0, 0, 0)
        self._open.tokens += 1
        if self._open.tokens >= self._open.size:
            self._close(done)

    def _close(self, done: list[ServerStep]) -> None:
        step, self._open = self._open, None
        if step is not None and (step.tokens or step.text or step.drafted):
            done.append(ServerStep(step.text, step.tokens, step.drafted, step.accepted, 0.0))
