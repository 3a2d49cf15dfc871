"""Answers rendered as Markdown with the speculative runs laid over them.

A run is a span of character offsets into the answer's raw text — the Markdown source — so the
renderer keeps, for every character it draws, the source offset it came from (`source_map.py`):
markup that disappears (`**`, fences, bullets, table pipes) simply owns no drawn character, and a
run's colour lands on the drawn characters whose source offsets it covers (`paint.py`). Prose takes
the run's colour as its foreground; a highlighted code block keeps its syntax colours and takes the
run as a background tint.

`blocks.py` splits a text into top-level blocks (CommonMark closes a block for good once a later one
starts, so every block but the last is final while an answer streams) and `render.py` draws a
range of blocks as one Rich renderable. The widget (`widgets/answer_body.py`) keeps finished blocks
in static pieces and repaints only the last one.
"""
