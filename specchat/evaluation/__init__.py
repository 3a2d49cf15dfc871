"""Judging decoders: races, the oracle over a drafter's proposals, speed figures, variants."""
