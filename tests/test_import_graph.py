"""No import cycle among specchat's modules (imports inside functions count: they hide cycles),
and the layers point one way: a module imports only from its own layer or the ones below it."""

from __future__ import annotations

import ast
from pathlib import Path

import specchat

ROOT = Path(specchat.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("specchat"):
                    graph[name].add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, " -> ".join(cycle)


# specchat's layers, lowest first: each may import from itself and those before it, never after.
LAYERS = (
    # what everything may use: errors, where files live, the CPU, figures computed one way
    ("specchat.errors", "specchat.locations", "specchat.cpu", "specchat.hardware", "specchat.openmp",
     "specchat.memory_probe", "specchat.tables", "specchat.metrics", "specchat.json_tables",
     "specchat.heap", "specchat.first_time", "specchat.wording"),
    # models and their runtimes; prompts and what a user attaches to them
    ("specchat.backends", "specchat.bundled", "specchat.devices", "specchat.prompting",
     "specchat.attachments"),
    ("specchat.decoding",),  # the algorithms
    ("specchat.engine", "specchat.answer_steps"),  # the loop and what a step keeps
    # a run's options and settings, resolved for its decoders; the colours
    ("specchat.options", "specchat.settings", "specchat.run_config", "specchat.themes"),
    # opening a model, the store, the one answer path
    ("specchat.models", "specchat.model_stores", "specchat.hf_files", "specchat.history", "specchat.saved_chats", "specchat.run_spans",
     "specchat.answers"),
    ("specchat.evaluation", "specchat.bench"),  # races and Spec-Bench
    ("specchat.app", "specchat.__main__"),  # the CLI and the chat
)  # fmt: skip


def _layer(module: str) -> int | None:
    for index, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def test_every_module_has_a_layer():
    unplaced = [name for name in _graph() if name != "specchat" and _layer(name) is None]
    assert not unplaced, f"add these to LAYERS: {unplaced}"


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [
        f"{name} -> {target}"
        for name, targets in _graph().items()
        for target in targets
        if target != "specchat" and _layer(name) is not None
        and (_layer(target) or 0) > _layer(name)
    ]  # fmt: skip
    assert not upward, "\n".join(upward)


def test_decoding_and_backends_never_import_the_app():
    for name, targets in _graph().items():
        if name.startswith(("specchat.decoding", "specchat.backends")):
            assert not [t for t in targets if t.startswith("specchat.app")], name


def test_screens_and_widgets_reach_the_model_only_through_the_session():
    model_side = (
        "specchat.answers",
        "specchat.backends",
        "specchat.models",
        "specchat.prompting",
        "specchat.engine.local",
    )
    for name, targets in _graph().items():
        if name.startswith(("specchat.app.tui.screens", "specchat.app.tui.widgets")):
            assert not [t for t in targets if t.startswith(model_side)], name


def _imports_textual(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        found += [name for name in names if name.split(".")[0] == "textual"]
    return found


def test_the_chat_session_and_conversation_know_nothing_of_textual():
    """The chat's core is plain Python: the CLI can use it and tests need no terminal."""
    for module in ("session", "conversation"):
        path = ROOT / "app" / f"{module}.py"
        assert not _imports_textual(path), module
        for name, targets in _graph().items():
            if name == f"specchat.app.{module}":
                assert not [t for t in targets if t.startswith("specchat.app.tui")], name
