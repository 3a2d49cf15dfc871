"""Refresh the README screenshots from the real app on the bundled model:

    .venv/bin/python screenshots/take.py            # all of them
    .venv/bin/python screenshots/take.py code       # only code.svg and drafts.svg

Runs headless in private config/data folders; writes chat.svg, chat-light.svg, help.svg,
branches.svg (the answer regenerated with Ctrl+R: two versions, ‹2/2›), search.svg (Ctrl+K),
race.svg (the race mid-replay: the replay clock is stopped where the first decoder has finished),
race-done.svg (the replay over, with the summary), code.svg (a code edit on a file attached with
`@maths.py`, Tab completing its name: the runs the decoder copied, tinted inside the highlighted
code block) and drafts.svg (that answer's drafts, `d`); `take.py busy` writes busy.svg (the chat's
answer beside a busy process: the status line says it runs on fewer threads, and at what speed);
`take.py models` writes models.svg (F9's picker over a chat that has answered: the bundled model,
one in ollama's store and one in LM Studio's folder, each the bundled file kept as that app keeps
its models).
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent


def scratch(prefix: str) -> Path:
    """A private folder, removed when the script ends: a run leaves nothing in /tmp."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


PROMPT = (
    "Rewrite this list in the same order, one per line:\n"
    "- Apples are red\n- Bananas are yellow\n- Grapes are purple\n- Limes are green\n"
    "- Plums are dark blue\n- Oranges are orange\n- Cherries are dark red\n"
    "- Kiwis are brown outside and green inside\n- Lemons are bright yellow"
)
SIZE = (110, 34)
CODE_FILE = "maths.py"
CODE = (
    "def add(a, b):\n"
    '    """Return the sum of a and b."""\n'
    "    return a + b\n\n\n"
    "def total(numbers):\n"
    "    result = 0\n"
    "    for number in numbers:\n"
    "        result = add(result, number)\n"
    "    return result\n"
)


class StoppedClock:
    """The race replay's clock, moved by hand to the moment a screenshot shows."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def loaded(app, pilot) -> None:
    """The app loads the model as `specchat` does: the runtime and decoder it would choose here."""
    while not app.session.ready:
        await pilot.pause(0.1)
    await pilot.pause(0.3)


async def answered(app, pilot, prompt: str) -> None:
    """`prompt` sent as a user sends it, and its answer finished (the cursor still, for the shot)."""
    app.screen.query_one("#prompt").insert(prompt)
    await pilot.press("enter")
    await pilot.pause(0.2)
    await app.workers.wait_for_complete()
    await pilot.pause(0.3)
    app.screen.query_one("#prompt").cursor_blink = False


async def chat_shots() -> None:
    from specchat.app.tui.app import SpecchatApp
    from specchat.app.tui.screens.race import RaceScreen
    from specchat.options import RunConfig

    app = SpecchatApp(settings=RunConfig(max_tokens=160), save_settings_file=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        speculative = app.session.decoder_name  # what the chat starts on
        await answered(app, pilot, PROMPT)
        app.save_screenshot("chat.svg", str(HERE))
        app.theme = "specchat-light"
        await pilot.pause(0.3)
        app.save_screenshot("chat-light.svg", str(HERE))
        app.theme = "specchat-safe"
        await pilot.press("f1")
        await pilot.pause(0.3)
        app.save_screenshot("help.svg", str(HERE))
        await pilot.press("escape")
        await pilot.press("ctrl+r")  # a second version of the answer, drafted from the first
        await pilot.pause(0.2)
        await app.workers.wait_for_complete()
        await pilot.pause(0.3)
        app.save_screenshot("branches.svg", str(HERE))
        await pilot.press("ctrl+k")
        await pilot.pause(0.3)
        for key in "grapes":
            await pilot.press(key)
        await pilot.press("enter")
        await pilot.pause(0.5)
        app.screen.query_one("#search-input").cursor_blink = False
        app.save_screenshot("search.svg", str(HERE))
        await pilot.press("escape", "escape")  # back to the words, then out
        await pilot.pause(0.3)
        from specchat.evaluation.variants import LIBRARY_FIXED_DRAFT

        # greedy, the default decoder with its learned draft lengths, and prompt lookup drafting
        # a fixed number of tokens as llama-cpp-python does
        variant = f"pld:fixed_draft={LIBRARY_FIXED_DRAFT}"
        app.push_screen(RaceScreen(PROMPT, ["greedy", speculative, variant], 160))
        await pilot.pause(0.3)
        screen = app.screen
        clock = StoppedClock()
        screen.clock = clock
        await pilot.press("enter")
        await pilot.pause(0.5)
        while screen.running:
            await pilot.pause(0.1)
        ends = sorted(p.timeline.end for p in screen.panes if p.timeline is not None)
        clock.now = ends[0] + 0.25 * (ends[-1] - ends[0])
        screen.replay_tick()
        await pilot.pause(0.3)
        screen.query_one("#race-prompt").cursor_blink = False
        app.save_screenshot("race.svg", str(HERE))
        clock.now = ends[-1]
        screen.replay_tick()
        await pilot.pause(0.3)
        app.save_screenshot("race-done.svg", str(HERE))


async def code_shots() -> None:
    """A code edit in the default decoder (it copies most of its input) on a file attached as a
    user attaches one (`@ma`, Tab): the runs inside the highlighted code block, then the
    answer's drafts."""
    from specchat.app.tui.app import SpecchatApp
    from specchat.options import RunConfig

    app = SpecchatApp(settings=RunConfig(max_tokens=200), save_settings_file=False)
    folder = scratch("specchat-project-")
    (folder / CODE_FILE).write_text(CODE)
    os.chdir(folder)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        prompt = app.screen.query_one("#prompt")
        prompt.insert("Add type hints to the functions in @ma")
        await pilot.press("tab")  # completes @maths.py
        prompt.insert("and return the whole file.")
        await pilot.press("enter")
        await pilot.pause(0.2)
        await app.workers.wait_for_complete()
        while app.session.busy:
            await pilot.pause(0.1)
        await pilot.pause(0.3)
        app.screen.query_one("#prompt").cursor_blink = False
        app.save_screenshot("code.svg", str(HERE))
        await pilot.press("shift+tab", "d")
        await pilot.pause(0.3)
        app.save_screenshot("drafts.svg", str(HERE))


async def busy_shot() -> None:
    """The chat answering while another process keeps a core busy (a shell loop): the thread
    count follows the load (`backends/threads_by_load.py`) and the status line says so."""
    from specchat.app.tui.app import SpecchatApp
    from specchat.options import RunConfig

    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        app = SpecchatApp(settings=RunConfig(max_tokens=160), save_settings_file=False)
        async with app.run_test(size=SIZE) as pilot:
            await loaded(app, pilot)
            await answered(app, pilot, PROMPT)
            app.save_screenshot("busy.svg", str(HERE))
    finally:
        loop.kill()
        loop.wait()


def model_stores(root: Path) -> None:
    """An ollama store (a blob and a manifest naming it) and an LM Studio folder, each holding
    the bundled GGUF, found as `specchat models` finds a user's."""
    from specchat.bundled import bundled_gguf

    gguf = bundled_gguf()
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    blobs = root / "ollama" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"sha256-{digest}").symlink_to(gguf)
    manifest = root / "ollama" / "manifests" / "registry.ollama.ai" / "library" / "smollm2"
    manifest.mkdir(parents=True)
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"}
    (manifest / "135m").write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}))
    repo = root / "lmstudio" / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF"
    repo.mkdir(parents=True)
    (repo / "smollm2-135m-instruct-q4_1.gguf").symlink_to(gguf)
    os.environ["OLLAMA_MODELS"] = str(root / "ollama")
    os.environ["LMSTUDIO_MODELS"] = str(root / "lmstudio")
    os.environ["HF_HUB_CACHE"] = str(root / "hub")


async def models_shot() -> None:
    """F9 after an answer: the picker over the chat, the running model marked."""
    from specchat.app.tui.app import SpecchatApp
    from specchat.app.tui.screens.models import ModelPickerScreen
    from specchat.options import RunConfig

    model_stores(scratch("specchat-stores-"))
    app = SpecchatApp(settings=RunConfig(max_tokens=160), save_settings_file=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(app, pilot)
        await answered(app, pilot, PROMPT)
        await pilot.press("f9")  # the list is read in a worker, then the picker opens
        while not isinstance(app.screen, ModelPickerScreen):
            await pilot.pause(0.1)
        await pilot.pause(0.3)
        app.save_screenshot("models.svg", str(HERE))


def main() -> None:
    folder = str(scratch("specchat-shots-"))
    os.environ["SPECCHAT_CONFIG_DIR"] = os.path.join(folder, "config")
    os.environ["SPECCHAT_DATA_DIR"] = os.path.join(folder, "data")
    which = set(sys.argv[1:]) or {"chat", "code"}  # `take.py code`: only the code shots
    if "chat" in which:
        asyncio.run(chat_shots())
    if "code" in which:
        asyncio.run(code_shots())
    if "busy" in which:  # only when asked: it needs a second core that a busy process takes
        asyncio.run(busy_shot())
    if "models" in which:  # only when asked: its stores are made up of the bundled model
        asyncio.run(models_shot())


if __name__ == "__main__":
    main()
