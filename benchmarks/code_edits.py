"""Benchmark data of code edits on real code: functions from the Python standard library (no
docstrings), each with an edit a programmer asks for — type hints, descriptive names, a comment
per line — answered by rewriting the whole function, so the answer copies most of the prompt.

    .venv/bin/python benchmarks/code_edits.py /tmp/code_edits.jsonl
    .venv/bin/specchat bench --data /tmp/code_edits.jsonl -d pld -d suffix --max-tokens 256 --peers

With --held-out it writes twelve other functions, for confirming what was tuned on the six.
With --attached the code is attached as `ask -f FUNCTION.py` attaches a file (under its name,
before the question: specchat.attachments) instead of pasted after the question.
"""

from __future__ import annotations

import argparse
import ast
import base64
import calendar
import colorsys
import difflib
import fnmatch
import glob
import heapq
import html
import inspect
import json
import shlex
import statistics
import textwrap

from specchat.attachments import Attachment, with_attachments

FUNCTIONS = (
    shlex.quote,
    colorsys.rgb_to_hsv,
    textwrap.dedent,
    fnmatch.filter,
    colorsys.rgb_to_hls,
    calendar.weekday,
)
HELD_OUT = (
    difflib.get_close_matches,
    calendar.monthrange,
    colorsys.hls_to_rgb,
    textwrap.indent,
    shlex.split,
    html.escape,
    heapq.nsmallest,
    colorsys.yiq_to_rgb,
    base64.b64encode,
    glob.has_magic,
    statistics.median,
    statistics.mode,
)
EDITS = (
    ("type-hints", "Add type hints to this function and return the whole function."),
    (
        "rename",
        "Rename the variables in this function to descriptive names and return the whole function.",
    ),
    ("comment", "Add a comment above each line of this function and return the whole function."),
)


def source_without_docstring(function) -> str:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    node = tree.body[0]
    if ast.get_docstring(node):
        node.body = node.body[1:]
    return ast.unparse(node)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--held-out", action="store_true", help="the twelve functions not tuned on")
    parser.add_argument("--attached", action="store_true", help="the code as ask -f attaches it")
    args = parser.parse_args()
    with open(args.out, "w", encoding="utf-8") as out:
        for number, function in enumerate(HELD_OUT if args.held_out else FUNCTIONS, 1):
            category, ask = EDITS[(number - 1) % len(EDITS)]
            source = source_without_docstring(function)
            if args.attached:
                attached = Attachment(f"{function.__name__}.py", source)
                prompt = with_attachments(ask, [attached])
            else:
                prompt = f"{ask}\n\n```python\n{source}\n```"
            item = {"question_id": number, "category": category, "turns": [prompt]}
            out.write(json.dumps(item) + "\n")


if __name__ == "__main__":
    main()
