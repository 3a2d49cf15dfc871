"""F9 in a real terminal (tmux): the picker lists the models this machine has (here an LM Studio
folder holding a copy of the bundled model), the arrow keys and Enter load one while the chat
stays open, and the status line then names it and the next answer runs on it."""

from __future__ import annotations

import pytest

from specchat.bundled import bundled_gguf
from specchat.models import list_models, listing_facts

from .tmux import (
    ask,
    capture,
    keys,
    needs_tmux,
    quit_and_close,
    start_specchat,
    wait_for,
    wait_until_usable,
)

pytestmark = needs_tmux
OTHER = "Pub/Smol-GGUF/other-q4_1.gguf"


def status_line(screen: str) -> str:
    """The status bar's first line (decoder · model · runtime), above its figures ("": not on
    screen, as while a model loads)."""
    lines = screen.splitlines()
    figures = [i for i, line in enumerate(lines) if "tok/s" in line and "tok/step" in line]
    return lines[figures[0] - 1] if figures else ""


def open_picker(session: str) -> str:
    """F9 until the picker shows with its list: a key can get lost while Textual still reads
    the terminal's replies to its start-up queries (a second F9 while the list is read opens no
    second one). The screen is read once the entries are painted ("runs on …"), not at the
    title: a capture can land between the two (seen once in a fresh-clone run beside the suite,
    the title painted and the list not yet)."""
    for _ in range(10):
        keys(session, "F9")
        try:
            return wait_for(session, lambda s: "Enter loads it" in s and "runs on" in s, limit=10.0)
        except AssertionError:
            continue
    raise AssertionError(f"F9 never opened the picker:\n{capture(session)}")


@pytest.mark.slow
def test_f9_switches_the_model_in_a_real_terminal(private_dirs, monkeypatch):
    lmstudio = private_dirs / "lmstudio"
    (lmstudio / OTHER).parent.mkdir(parents=True)
    (lmstudio / OTHER).symlink_to(bundled_gguf())
    # the terminal's specchat inherits these: only the bundled model and the folder are found
    monkeypatch.setenv("LMSTUDIO_MODELS", str(lmstudio))
    monkeypatch.setenv("OLLAMA_MODELS", str(private_dirs / "no-ollama"))
    monkeypatch.setenv("HF_HUB_CACHE", str(private_dirs / "no-hf-cache"))
    listed = list_models()
    specs = [m.spec for m in listed]
    session = start_specchat(private_dirs, "threads = 1\nmax_tokens = 8\n", name="models")
    try:
        before = status_line(wait_until_usable(session))
        assert OTHER not in before
        picker = open_picker(session)
        assert "● smollm2" in picker and f"  {OTHER}  ·  LM Studio" in picker, picker
        # each with what `specchat models` says of it: family, quantization, size, runtimes
        family, quant, size, runs = listing_facts(listed[0])
        assert picker.count(f"{family} · {quant} · {size} · runs on {runs}") == 2, picker
        keys(session, "Home", *["Down"] * specs.index(OTHER), "Enter")
        wait_for(session, lambda s: "Enter loads it" not in s and OTHER in status_line(s), 300)
        ask(session, "Say hi.")
        screen = wait_for(session, lambda s: "ended:" in s)
        assert OTHER in status_line(screen) and "tok/s" in screen
        picker = open_picker(session)
        assert f"● {OTHER}" in picker and "● smollm2" not in picker, picker
        keys(session, "Escape")
        wait_for(session, lambda s: "Enter loads it" not in s)
    finally:
        quit_and_close(session)
