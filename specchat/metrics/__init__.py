"""How fast an answer ran and what its drafts allowed: figures computed one way for every screen
and report, and the oracle over a drafter's proposals."""
