"""What one decoding step produced: the unit every decoder returns and every event reports.

`StepEvent` lives here beside `Step`, not in `events`, so that `stats` can count step events while
`events` carries the stats in its done event.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """Tokens appended to the answer by one target pass.

    `drafted` counts the tokens proposed to the target in that pass, `accepted` how many of them it
    kept; `tokens` holds the accepted ones plus the target's own next token, so a step always yields
    at least one token (a beam step may yield none until its beams agree). `final` is set by a
    decoder that ended the answer itself (beam search picks its best hypothesis at the end).
    `source` says where the accepted drafted tokens were copied or guessed from (one of
    `sources.SOURCE_LABELS`; empty when none was accepted).
    """

    tokens: tuple[int, ...]
    drafted: int = 0
    accepted: int = 0
    seconds: float = 0.0
    final: bool = False
    source: str = ""


@dataclass(frozen=True)
class StepEvent:
    """One decoding step as the engine reports it: the tokens it appended (after EOS and limits
    were applied: possibly none) and the text that became final, with the step's counts and time.

    The engine sends one per decoder step, also a step that only produced EOS, so figures summed
    from the events equal the engine's own. The one exception is `tail`: text the detokenizer held
    back (a possible stop string, a split character) and released when the answer ended; it is no
    step and carries no tokens.
    """

    tokens: tuple[int, ...]
    text: str
    drafted: int
    accepted: int
    decoder: str
    seconds: float
    tail: bool = False
    source: str = ""  # where the step's accepted draft came from (Step.source)
