"""The int4 runtime's C keeps each instruction-set level's code at file level: a reader finds a
level's tile as one function, and no function body branches on the build (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

C_FOLDER = Path(__file__).parents[1] / "specchat" / "backends" / "int4" / "c"


def preprocessor_lines_in_bodies(text: str) -> list[str]:
    """Conditional preprocessor lines met inside braces (a function body, a struct)."""
    depth, found = 0, []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if depth > 0 and stripped.startswith("#") and not stripped.startswith("#pragma"):
            found.append(f"{number}: {stripped}")
        depth += line.count("{") - line.count("}")
    return found


@pytest.mark.parametrize("path", sorted(C_FOLDER.glob("*.[ch]")), ids=lambda p: p.name)
def test_no_function_body_branches_on_the_build(path: Path) -> None:
    assert preprocessor_lines_in_bodies(path.read_text()) == []


def test_the_check_finds_a_branch_inside_a_body() -> None:
    body = "static int f(void) {\n#if defined(HAVE_AVX2)\n    return 1;\n#endif\n    return 0;\n}\n"
    assert preprocessor_lines_in_bodies(body) == ["2: #if defined(HAVE_AVX2)", "4: #endif"]
