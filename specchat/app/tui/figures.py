"""The status bar's figures: the answer's stats, grown from its step events while it streams
(`GenerationStats.with_step`, the rule the engine counts by, so live and final figures agree) and
read from the history for a stored answer. Pure, so they are tested without a screen."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text

from specchat.engine.events import StepEvent
from specchat.engine.stats import GenerationStats
from specchat.history import StoredMessage, decoders_label
from specchat.metrics.figures import not_target_distribution

FINISH_LABELS = {
    "eos": "EOS",
    "max_tokens": "max tokens",
    "stop": "stop string",
    "context_full": "context full",
    "repeating": "repeating (a loop)",
    "cancelled": "cancelled (stopped)",
    "error": "server error",
}


@dataclass
class Figures:
    """The status line's head names the active decoder (what the next step or answer runs) and
    its parameters; the figures below it are an answer's, named by `answer_by` wherever that
    answer was written by another decoder (an opened chat's last answer, a switch since)."""

    decoder: str = ""
    params: str = ""
    pending: str | None = None  # a decoder that takes over at the next step
    answer_by: tuple[str, ...] = ()  # the decoders that wrote the answer the figures are of
    stats: GenerationStats = field(default_factory=GenerationStats)
    elapsed: float = 0.0
    finish: str | None = None
    streaming: bool = False

    def add(self, event: StepEvent) -> None:
        self.decoder = event.decoder
        if self.pending == event.decoder:
            self.pending = None
        if event.decoder and event.decoder not in self.answer_by:
            self.answer_by += (event.decoder,)
        self.stats = self.stats.with_step(event)

    def finished(self, active: str, params: str, finish: str, elapsed: float) -> None:
        """The answer ended: its figures stay, the active decoder is shown (a switch that came
        too late applies to the next answer, and is no longer pending)."""
        self.decoder = active
        self.params = params
        self.pending = None
        self.finish = finish
        self.elapsed = elapsed
        self.streaming = False

    @property
    def tokens(self) -> int:
        return self.stats.generated_tokens

    @property
    def tokens_per_second(self) -> float:
        return self.stats.tokens_per_second

    @property
    def tokens_per_step(self) -> float:
        return self.stats.tokens_per_step

    @property
    def acceptance(self) -> float | None:
        return self.stats.acceptance_rate if self.stats.drafted else None

    @classmethod
    def stored(cls, message: StoredMessage, active: str, params: str) -> Figures:
        """Figures of a finished answer, from what the history keeps of it, under the active
        decoder `active` with its `params`."""
        return cls(
            decoder=active,
            params=params,
            answer_by=message.written_by,
            stats=message.stats or GenerationStats(),
            elapsed=message.elapsed_seconds,
            finish=message.finish_reason,
        )


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
    inexact = not_target_distribution(figures.stats.distance_per_token)
    if inexact:
        text.append(f"  {inexact}", style="bold reverse")
    if figures.answer_by and figures.answer_by != (figures.decoder,):
        text.append(f"  by {decoders_label(figures.answer_by)}", style="italic")
    if figures.streaming:
        text.append("  ● generating", style="bold")
    elif figures.finish:
        label = FINISH_LABELS.get(figures.finish, figures.finish)
        text.append(f"  ended: {label}", style="bold")
    return text
