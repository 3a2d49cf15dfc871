"""Speed after a decoder switch mid-answer against speed before it, in the real chat in a terminal.

A person's session, in tmux, in a fresh process and chat store per key: two greedy answers, then a
long answer during which the key is pressed (F3 sample, F4 beam, ...), Esc, F2 back to greedy,
then two greedy answers more, each in a new chat (Ctrl+N) so every answer has the same prompt.
The figure is the median tokens/s after ÷ the median before, as the chat stored them (the engine's
decode tokens/s). Before the model thread (app/model_thread.py) a switch to sample or beam left
every later answer 3-5x slower; 1.0 means the switch left nothing behind.

    .venv/bin/python benchmarks/measure_switch_speed.py                    # F3 F4 F5, int4
    .venv/bin/python benchmarks/measure_switch_speed.py --keys F3 --backend llama --repeats 3
    .venv/bin/python benchmarks/measure_switch_speed.py --threads-only     # the cause, headless

`--threads-only` measures the cause without a terminal: the model loaded and answering in one
worker thread, then answering in a second (what a switch mid-answer led to), then in the first
again — each worker a plain thread, as the chat's were, against the same on the model thread.

Run it alone on the machine. Needs tmux (not for --threads-only).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from measure_ui_cost import Terminal, specchat_command  # noqa: E402

QUESTION = "List five animals and one fact about each."
LONG = "Write a very long story about a knight and a dragon."


def ask(terminal: Terminal, text: str, new_chat: bool = True) -> None:
    if new_chat:
        terminal.press("C-n")
        time.sleep(0.3)
    terminal.type(text)
    for _ in range(40):  # a key can get lost while Textual reads the terminal's replies
        terminal.press("Enter")
        try:
            terminal.wait_for(lambda s: "generating" in s, 3, "the answer", 0.05)
            return
        except SystemExit:
            continue


def session(key: str, backend: str, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """(tokens/s of the answers before the switch, of those after) in one fresh chat process."""
    from specchat.history import DB_FILE, HistoryStore

    home = Path(tempfile.mkdtemp(prefix="specchat-switch-"))
    config, data = home / "config", home / "data"
    config.mkdir()
    settings = f'decoder = "greedy"\nbackend = "{backend}"\nmax_tokens = 512\n'
    (config / "settings.toml").write_text(settings)
    chat_env = {**env, "SPECCHAT_CONFIG_DIR": str(config), "SPECCHAT_DATA_DIR": str(data)}
    chat_env["TERM"] = "xterm-256color"
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in chat_env.items())
    terminal = Terminal(f"env -i {assignments} {shlex.join(specchat_command())}", (120, 35))
    ended = lambda s: "ended:" in s  # noqa: E731
    try:
        terminal.wait_for(lambda s: "tok/s" in s and "Ask something" in s, 300, "a loaded model")
        for _ in range(2):
            ask(terminal, QUESTION, new_chat=False)
            terminal.wait_for(ended, 600, "the end of the answer", 0.5)
            terminal.press("C-n")
        ask(terminal, LONG, new_chat=False)
        time.sleep(0.5)
        terminal.press(key)
        time.sleep(1.0)
        terminal.press("Escape")
        terminal.wait_for(ended, 600, "the stopped answer", 0.2)
        terminal.press("F2")
        time.sleep(0.5)
        for _ in range(2):
            ask(terminal, QUESTION)
            terminal.wait_for(ended, 600, "the end of the answer", 0.5)
    finally:
        terminal.close()
    store = HistoryStore(data / DB_FILE)
    speeds: list[tuple[int, str, float]] = []
    for chat in store.list_chats():
        messages = store.messages(chat.id)
        if len(messages) >= 2 and messages[-1].stats is not None:
            speeds.append((chat.id, messages[0].content, messages[-1].stats.tokens_per_second))
    store.close()
    shutil.rmtree(home, ignore_errors=True)
    speeds.sort()
    switched = next(i for i, (_, question, _) in enumerate(speeds) if question == LONG)
    before = [s for _, q, s in speeds[:switched] if q == QUESTION]
    after = [s for _, q, s in speeds[switched + 1 :] if q == QUESTION]
    return before, after


def threads_only(backend: str, repeats: int) -> None:
    """Greedy tokens/s answering from worker thread A, then B, then A again: plain threads (one
    OpenMP pool each) against the model thread (one pool)."""
    from concurrent.futures import ThreadPoolExecutor

    from specchat.answers import make_decoder
    from specchat.app.model_thread import run_on_model_thread
    from specchat.backends.base import ChatMessage
    from specchat.decoding.sampling import SamplingParams
    from specchat.engine.events import DoneEvent
    from specchat.engine.local import Engine
    from specchat.models import LoadOptions, load_model

    held: dict[str, Engine] = {}

    def load() -> None:
        model = load_model(None, LoadOptions(backend=backend, threads=2, n_ctx=2048))
        held["engine"] = Engine(model, make_decoder("greedy", {}, model))

    def answer() -> float:
        engine = held["engine"]
        request = engine.request(
            [ChatMessage("user", QUESTION)], max_tokens=256, sampling=SamplingParams()
        )
        done = [e for e in engine.generate(request) if isinstance(e, DoneEvent)][0]
        return done.stats.tokens_per_second

    first, second = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    plain = {"A": first, "B": second}
    first.submit(load).result()
    speeds: dict[str, list[float]] = {"A": [], "B": [], "A again": []}
    for phase in speeds:
        pool = plain[phase[0]]
        speeds[phase] = [pool.submit(answer).result() for _ in range(repeats)]
    ratio = statistics.median(speeds["A again"]) / statistics.median(speeds["A"])
    print(f"plain worker threads on {backend}: " + ", ".join(
        f"{k} {statistics.median(v):.1f}" for k, v in speeds.items()
    ) + f" tok/s; A again ÷ A {ratio:.2f}")  # fmt: skip
    held.clear()
    first.shutdown()  # their threads end, and their OpenMP pools with them
    second.shutdown()
    run_on_model_thread(load)
    model = {k: [run_on_model_thread(answer) for _ in range(repeats)] for k in speeds}
    ratio = statistics.median(model["A again"]) / statistics.median(model["A"])
    print(f"the model thread on {backend}: " + ", ".join(
        f"{k} {statistics.median(v):.1f}" for k, v in model.items()
    ) + f" tok/s (every phase on one thread); last ÷ first {ratio:.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", nargs="+", default=["F3", "F4", "F5"])
    parser.add_argument("--backend", default="int4")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads-only", action="store_true", help=threads_only.__doc__)
    args = parser.parse_args()
    if args.threads_only:
        threads_only(args.backend, max(3, args.repeats))
        return
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed (apt-get install tmux)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
    for key in args.keys:
        ratios = []
        for _ in range(args.repeats):
            before, after = session(key, args.backend, env)
            ratio = statistics.median(after) / statistics.median(before)
            ratios.append(ratio)
            print(
                f"{key}: before {[round(s, 1) for s in before]} tok/s, "
                f"after {[round(s, 1) for s in after]} tok/s → {ratio:.2f}",
                flush=True,
            )
        print(f"{key} on {args.backend}: after ÷ before, median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
