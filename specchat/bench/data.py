"""Benchmark questions in Spec-Bench's JSON Lines format: question_id, category, turns."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import SpecchatError

BUNDLED_QUESTIONS = Path(__file__).parent / "questions" / "spec_bench_dev.jsonl"


@dataclass(frozen=True)
class Question:
    question_id: int | str
    category: str
    turns: tuple[str, ...]


def load_questions(
    path: str | Path | None,
    categories: list[str] | None = None,
    limit_per_category: int | None = None,
) -> list[Question]:
    """Questions from a file (None: the bundled Spec-Bench dev half), filtered; every problem is
    one clear line."""
    file = Path(path) if path is not None else BUNDLED_QUESTIONS
    if not file.is_file():
        raise SpecchatError(f"benchmark data not found: {file}")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecchatError(
            f"{file} is not UTF-8 text (byte {exc.start}): Spec-Bench data is JSON Lines"
        ) from None
    except OSError as exc:
        raise SpecchatError(f"cannot read {file}: {exc.strerror or exc}") from None
    questions: list[Question] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            turns = item["turns"]
            if (
                not isinstance(turns, list)
                or not turns
                or not all(isinstance(t, str) and t for t in turns)
            ):
                raise ValueError("turns must be a non-empty list of strings")
            questions.append(Question(item["question_id"], str(item["category"]), tuple(turns)))
        except (ValueError, KeyError, TypeError) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise SpecchatError(f"{file}:{number}: not a Spec-Bench question ({detail})") from None
    if not questions:
        raise SpecchatError(f"{file} holds no questions")
    if categories:
        known = {q.category for q in questions}
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise SpecchatError(
                f"no category {unknown[0]!r} in {file.name} (it has: {', '.join(sorted(known))})"
            )
        questions = [q for q in questions if q.category in categories]
    if limit_per_category:
        seen: dict[str, int] = {}
        kept = []
        for q in questions:
            seen[q.category] = seen.get(q.category, 0) + 1
            if seen[q.category] <= limit_per_category:
                kept.append(q)
        questions = kept
    return questions
