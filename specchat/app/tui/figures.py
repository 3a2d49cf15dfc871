"""The status bar's figures: accumulated from step events while streaming, read from the stored
stats once an answer is done. Pure functions, so they are tested without a screen."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from specchat.decoding.events import StepEvent
from specchat.decoding.stats import acceptance_rate, tokens_per_second, tokens_per_step

FINISH_LABELS = {
    "eos": "EOS",
    "max_tokens": "max tokens",
    "stop": "stop string",
    "context_full": "context full",
    "cancelled": "cancelled (stopped)",
}


@dataclass
class Figures:
    decoder: str = ""
    params: str = ""
    pending: str | None = None  # a decoder that takes over at the next step
    tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    decode_seconds: float = 0.0
    elapsed: float = 0.0
    finish: str | None = None
    streaming: bool = False

    def add(self, event: StepEvent) -> None:
        self.decoder = event.decoder
        if self.pending == event.decoder:
            self.pending = None
        self.tokens += len(event.tokens)
        if event.tokens:
            self.steps += 1
        self.drafted += event.drafted
        self.accepted += event.accepted
        self.decode_seconds += event.seconds

    @property
    def tokens_per_second(self) -> float:
        return tokens_per_second(self.tokens, self.decode_seconds)

    @property
    def tokens_per_step(self) -> float:
        return tokens_per_step(self.tokens, self.steps)

    @property
    def acceptance(self) -> float | None:
        return acceptance_rate(self.accepted, self.drafted) if self.drafted else None

    @classmethod
    def from_stats(cls, decoder: str, stats: dict, finish: str | None) -> Figures:
        """Figures of a finished answer, from the stats stored with it."""
        return cls(
            decoder=decoder,
            tokens=int(stats.get("generated_tokens", 0)),
            steps=int(stats.get("steps", 0)),
            drafted=int(stats.get("drafted", 0)),
            accepted=int(stats.get("accepted", 0)),
            decode_seconds=float(stats.get("decode_seconds", 0.0)),
            elapsed=float(stats.get("elapsed_seconds", 0.0)),
            finish=finish,
        )


def format_params(params: dict[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def status_text(figures: Figures, model: str) -> Text:
    """Two lines: decoder, its parameters and the model; then tok/s, tok/step, acceptance,
    tokens, elapsed time and how the answer ended."""
    text = Text(no_wrap=True, overflow="ellipsis", end="")
    text.append(f" {figures.decoder} ", style="bold reverse")
    if figures.params:
        text.append(f" {figures.params}")
    if figures.pending:
        text.append(f"  → {figures.pending} from the next step", style="bold italic")
    text.append(f"  ·  {model}", style="dim")
    text.append("\n")
    text.append(f" {figures.tokens_per_second:6.1f} tok/s", style="bold")
    text.append(f"  {figures.tokens_per_step:4.2f} tok/step")
    acceptance = figures.acceptance
    text.append("  acceptance " + ("–" if acceptance is None else f"{acceptance:.0%}"))
    text.append(f"  {figures.tokens} tokens  {figures.elapsed:.1f} s")
    if figures.streaming:
        text.append("  ● generating", style="bold")
    elif figures.finish:
        label = FINISH_LABELS.get(figures.finish, figures.finish)
        text.append(f"  ended: {label}", style="bold")
    return text
