"""An answer's steps as kept with it: what each step drafted, how much of it the target took, what
it threw away, where the draft came from, the draft length the policy chose and what the pass cost
— so the drafts view (`d` on an answer) and `specchat ask --explain` can open them, also for a
chat reopened later with no model at hand.

Rejected tokens are kept as text, made at record time from the backend's token bytes, and the
backend's measured pass costs (`block_cost`) are kept beside the steps: the oracle of a stored
answer then needs no model. Without them (a remote server) the steps' own pass times stand in.

The oracle here is the one of `metrics/oracle.py` over the drafts the answer actually made:
at each step's position the draft had `accepted` right tokens, and inside that accepted run what
remains of the same draft stays right. Perfect draft lengths over those — the least total pass
cost — against one single-token pass per token is what these drafts would have allowed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specchat.engine.events import StepEvent
from specchat.metrics import figures
from specchat.metrics.oracle import OracleFigures, efficiency, oracle_speedup

TIME_DIGITS = 7  # seconds are kept to a tenth of a microsecond


@dataclass(frozen=True)
class DraftStep:
    """One decoding step of an answer (a StepEvent as it is kept)."""

    text: str  # what the step added to the answer
    tokens: int  # how many tokens it added
    drafted: int
    accepted: int
    rejected: str = ""  # drafted, not taken (along the draft's first branch), as text
    rejected_tokens: int = 0
    source: str = ""  # where the draft came from, taken or not ("" nothing drafted, or unknown)
    depth: int = 0  # the draft length the policy chose
    pass_seconds: float = 0.0  # the target pass's cost
    seconds: float = 0.0  # the whole step's
    decoder: str = ""
    ending: int = 0  # the end-of-sequence token its pass produced (StepEvent.ending)

    @classmethod
    def of(cls, event: StepEvent, rejected_text: str = "") -> DraftStep:
        """The step as it is kept: times to a tenth of a microsecond, as stored, so an answer's
        drafts read the same live and reopened."""
        return cls(
            text=event.text,
            tokens=len(event.tokens),
            drafted=event.drafted,
            accepted=event.accepted,
            rejected=rejected_text,
            rejected_tokens=len(event.rejected),
            source=event.source,
            depth=event.depth,
            pass_seconds=round(event.pass_seconds, TIME_DIGITS),
            seconds=round(event.seconds, TIME_DIGITS),
            decoder=event.decoder,
            ending=event.ending,
        )

    def as_list(self) -> list:
        """The stored form: a list, as a long answer has hundreds of steps."""
        return [
            self.text,
            self.tokens,
            self.drafted,
            self.accepted,
            self.rejected,
            self.rejected_tokens,
            self.source,
            self.depth,
            round(self.pass_seconds, TIME_DIGITS),
            round(self.seconds, TIME_DIGITS),
            self.decoder,
            self.ending,
        ]

    @classmethod
    def from_list(cls, stored: Sequence) -> DraftStep:
        text, tokens, drafted, accepted, rejected, rejected_tokens, source, depth = stored[:8]
        pass_seconds, seconds, decoder = stored[8:11]
        ending = stored[11] if len(stored) > 11 else 0  # stored before it was kept: none
        return cls(
            str(text),
            int(tokens),
            int(drafted),
            int(accepted),
            str(rejected),
            int(rejected_tokens),
            str(source),
            int(depth),
            float(pass_seconds),
            float(seconds),
            str(decoder),
            int(ending),
        )


@dataclass(frozen=True)
class AnswerSteps:
    """Every step of an answer (tails released at the end are no steps), and the backend's
    measured cost of a k-token pass for k = 1, 2, … (empty: not known, e.g. a remote server)."""

    steps: tuple[DraftStep, ...]
    pass_costs: tuple[float, ...] = ()

    def as_dict(self) -> dict:
        return {
            "steps": [step.as_list() for step in self.steps],
            "pass_costs": [round(cost, TIME_DIGITS) for cost in self.pass_costs],
        }

    @classmethod
    def from_dict(cls, data: dict) -> AnswerSteps:
        return cls(
            tuple(DraftStep.from_list(step) for step in data.get("steps", [])),
            tuple(float(cost) for cost in data.get("pass_costs", [])),
        )


def rejected_text(token_bytes: Callable[[int], bytes], ids: Sequence[int]) -> str:
    """Token ids as the text they stand for, decoded together (a character may span tokens)."""
    return b"".join(token_bytes(token) for token in ids).decode("utf-8", errors="replace")


def measured_pass_costs(
    block_cost: Callable[[int], float], largest_draft: int
) -> tuple[float, ...]:
    """block_cost(k) for every pass size the oracle of steps that drafted at most
    `largest_draft` tokens can ask for."""
    return tuple(round(block_cost(k), TIME_DIGITS) for k in range(1, largest_draft + 2))


# -- the oracle over the answer's own drafts --------------------------------------------------
def accepted_lengths(steps: Sequence[DraftStep]) -> list[int]:
    """For every answer token, how many right tokens the answer's drafts offered from there: a
    step's accepted count at its first token, one fewer at each next one of its accepted run
    (the same draft, continued), none at the target's own token."""
    lengths: list[int] = []
    for step in steps:
        lengths.extend(max(0, step.accepted - j) for j in range(step.tokens))
    return lengths


def pass_cost_from_steps(steps: Sequence[DraftStep]) -> Callable[[int], float] | None:
    """A k-token pass's cost from the steps' own pass times: a line through (drafted + 1,
    seconds) fitted by least squares (flat when one size was seen), never below zero."""
    points = [(step.drafted + 1, step.pass_seconds) for step in steps if step.pass_seconds > 0]
    if not points:
        return None
    sizes = {size for size, _ in points}
    if len(sizes) == 1:
        flat = statistics.median(seconds for _, seconds in points)
        return lambda k: flat
    mean_k = statistics.fmean(size for size, _ in points)
    mean_s = statistics.fmean(seconds for _, seconds in points)
    spread = sum((size - mean_k) ** 2 for size, _ in points)
    slope = max(0.0, sum((size - mean_k) * (s - mean_s) for size, s in points) / spread)
    base = mean_s - slope * mean_k
    floor = min(seconds for _, seconds in points) / 2
    return lambda k: max(floor, base + slope * k)


def _from_table(costs: tuple[float, ...]) -> Callable[[int], float]:
    def cost(k: int) -> float:
        if k <= len(costs):
            return costs[k - 1]
        if len(costs) == 1:
            return costs[0]
        return costs[-1] + (costs[-1] - costs[-2]) * (k - len(costs))

    return cost


@dataclass(frozen=True)
class DraftFigures:
    """An answer's figures from its steps, and its oracle."""

    tokens: int  # shown (without the end-of-sequence token)
    steps: int
    drafted: int
    accepted: int
    rejected: int
    pass_seconds: float
    costs_from: str  # "measured pass costs" or "the steps' pass times" ("" none)
    modelled_speedup: float | None  # these steps' passes against one-token passes, same costs
    oracle: OracleFigures | None
    ending: int = 0  # end-of-sequence tokens the steps produced: tokens of their steps

    @property
    def tokens_per_step(self) -> float:
        return figures.tokens_per_step(self.tokens + self.ending, self.steps)

    @property
    def acceptance_rate(self) -> float:
        return figures.acceptance_rate(self.accepted, self.drafted)

    @property
    def efficiency(self) -> float | None:
        """(speedup − 1) / (oracle − 1): how much of what the drafts allowed the policy took."""
        return efficiency(self.modelled_speedup, self.oracle.speedup if self.oracle else None)

    def as_dict(self) -> dict[str, object]:
        """The JSON form (`ask --explain --json`), figures rounded."""

        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 4)

        return {
            "tokens": self.tokens,
            "steps": self.steps,
            "tokens_per_step": rounded(self.tokens_per_step),
            "drafted": self.drafted,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "pass_seconds": round(self.pass_seconds, 6),
            "costs_from": self.costs_from,
            "modelled_speedup": rounded(self.modelled_speedup),
            "oracle_speedup": rounded(self.oracle.speedup) if self.oracle else None,
            "efficiency": rounded(self.efficiency),
            "drafted_right": rounded(self.oracle.copyable) if self.oracle else None,
        }


def draft_figures(answer: AnswerSteps) -> DraftFigures:
    steps = answer.steps
    tokens = sum(step.tokens for step in steps)
    ending = sum(step.ending for step in steps)
    if answer.pass_costs:
        cost, costs_from = _from_table(answer.pass_costs), "measured pass costs"
    else:
        fitted = pass_cost_from_steps(steps)
        cost, costs_from = fitted, "the steps' pass times" if fitted else ""
    modelled = oracle = None
    if cost is not None and tokens:
        spent = sum(cost(step.drafted + 1) for step in steps)
        modelled = (tokens + ending) * cost(1) / spent if spent > 0 else None
        oracle = oracle_speedup(accepted_lengths(steps), cost)
    return DraftFigures(
        tokens=tokens,
        steps=len(steps),
        drafted=sum(step.drafted for step in steps),
        accepted=sum(step.accepted for step in steps),
        rejected=sum(step.rejected_tokens for step in steps),
        pass_seconds=sum(step.pass_seconds for step in steps),
        costs_from=costs_from,
        modelled_speedup=modelled,
        oracle=oracle,
        ending=ending,
    )


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int) -> str:
    """`values` as a line of bars at most `width` wide (neighbours averaged when there are
    more), the tallest bar the largest value."""
    if not values or width <= 0:
        return ""
    if len(values) > width:
        size = len(values) / width
        values = [
            statistics.fmean(values[int(i * size) : max(int(i * size) + 1, int((i + 1) * size))])
            for i in range(width)
        ]
    top = max(values)
    if top <= 0:
        return SPARKS[0] * len(values)
    return "".join(
        SPARKS[min(len(SPARKS) - 1, int(v / top * (len(SPARKS) - 1) + 0.5))] for v in values
    )
