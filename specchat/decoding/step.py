"""What one decoding step produced: the unit every decoder returns (the engine reports it as a
`StepEvent`)."""

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
    `sources.SOURCE_LABELS`), or, when none was accepted, where the refused draft came from
    (empty when nothing was drafted): the drafts view shows which source guessed wrong. A
    speculative step also says what it drafted that the target did not take (`rejected`: the
    rest of the draft past the accepted tokens, along its first branch), the draft length its
    policy chose (`depth`) and what the target pass cost (`pass_seconds`). `distance` is None
    when the step's tokens were drawn from the target's distribution (greedy, or exact
    verification); soft matching sets it to the summed total variation between what its
    positions were drawn from and the target's.
    """

    tokens: tuple[int, ...]
    drafted: int = 0
    accepted: int = 0
    seconds: float = 0.0
    final: bool = False
    source: str = ""
    rejected: tuple[int, ...] = ()
    depth: int = 0
    pass_seconds: float = 0.0
    distance: float | None = None
