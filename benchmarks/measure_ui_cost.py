"""The chat's cost to the engine, measured the way a person meets it: tokens/s of an answer in the
real `specchat` chat running in a terminal (tmux, 120×40) against `specchat ask` on the same
prompt, decoder and settings — each a fresh process, interleaved, median of the repeats.

    .venv/bin/python benchmarks/measure_ui_cost.py                  # greedy, 256 tokens, 3 repeats
    .venv/bin/python benchmarks/measure_ui_cost.py --decoder pld --repeats 5
    .venv/bin/python benchmarks/measure_ui_cost.py --chat-threads 1 # the chat with one model thread
    .venv/bin/python benchmarks/measure_ui_cost.py --env GOMP_SPINCOUNT=10000   # both processes
    .venv/bin/python benchmarks/measure_ui_cost.py --backend llama   # both on one runtime

Both figures are the engine's decode tokens/s (tokens ÷ the steps' measured seconds; prefill
excluded): `ask --json` prints it in its done event, the chat stores it with the answer, and this
script reads it from the chat's history database. Run it alone on the machine: other processes on
the cores make every figure lie. Needs tmux.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT = "Write a long story about a dragon who learns to bake bread. Use many details."
SIZE = (120, 40)


def specchat_command() -> list[str]:
    return [sys.executable, "-m", "specchat"]


def headless_run(args: argparse.Namespace, env: dict[str, str]) -> dict:
    """`specchat ask --json` in a fresh process; the stats of its done event."""
    command = specchat_command() + ["ask", PROMPT, "--json", "--max-tokens", str(args.max_tokens)]
    command += ["--decoder", args.decoder]
    if args.backend:
        command += ["--backend", args.backend]
    result = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        raise SystemExit(f"specchat ask failed: {result.stderr.strip()}")
    done = json.loads(result.stdout.strip().splitlines()[-1])
    return done["stats"]


class Terminal:
    """A tmux server of our own (its own socket in a private folder, so it starts with our
    environment and leaves nothing behind) holding one session of the given size."""

    def __init__(self, command: str, size: tuple[int, int]) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="specchat-ui-cost-")
        self.socket = os.path.join(self._folder.name, "tmux")
        self.session = "chat"
        width, height = size
        self._tmux(
            "new-session", "-d", "-s", self.session, "-x", str(width), "-y", str(height), command
        )

    def _tmux(self, *args: str) -> str:
        result = subprocess.run(
            ["tmux", "-S", self.socket, *args], capture_output=True, text=True, check=False
        )
        return result.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.session)

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-t", self.session, "-l", text)

    def press(self, key: str) -> None:
        self._tmux("send-keys", "-t", self.session, key)

    def wait_for(self, condition, limit: float, what: str, every: float = 0.1) -> str:
        """The screen once `condition` holds, looked at `every` seconds (each look is a tmux
        process and a capture: about 3 ms of CPU that the chat's model would otherwise have)."""
        deadline = time.monotonic() + limit
        while True:
            screen = self.screen()
            if condition(screen):
                return screen
            if time.monotonic() > deadline:
                raise SystemExit(f"the chat never showed {what}:\n{screen}")
            time.sleep(every)

    def close(self) -> None:
        self.press("C-q")
        time.sleep(0.5)
        self._tmux("kill-server")
        self._folder.cleanup()


def chat_run(args: argparse.Namespace, env: dict[str, str]) -> tuple[dict, str]:
    """One answer in the real chat in tmux, from a fresh process and a fresh chat store; the
    stats the chat stored with it, and the status line it showed."""
    from specchat.history import DB_FILE, HistoryStore

    home = Path(tempfile.mkdtemp(prefix="specchat-ui-cost-"))
    config, data = home / "config", home / "data"
    config.mkdir()
    settings = [f"max_tokens = {args.max_tokens}", f'decoder = "{args.decoder}"']
    if args.chat_threads:
        settings.append(f"threads = {args.chat_threads}")
    if args.backend:
        settings.append(f'backend = "{args.backend}"')
    (config / "settings.toml").write_text("\n".join(settings) + "\n")
    chat_env = {**env, "SPECCHAT_CONFIG_DIR": str(config), "SPECCHAT_DATA_DIR": str(data)}
    chat_env["TERM"] = "xterm-256color"
    assignments = " ".join(f"{key}={shlex.quote(value)}" for key, value in chat_env.items())
    command = f"env -i {assignments} {shlex.join(specchat_command())}"
    terminal = Terminal(command, SIZE)
    try:
        terminal.wait_for(lambda s: "tok/s" in s and "Ask something" in s, 300, "a loaded model")
        terminal.type(PROMPT)
        for _ in range(40):  # a key can get lost while Textual reads the terminal's replies
            terminal.press("Enter")
            try:
                terminal.wait_for(lambda s: "generating" in s or "ended:" in s, 3, "the answer")
                break
            except SystemExit:
                continue
        # a person does not poll: look rarely while the answer streams, so the measurement
        # takes next to nothing from the cores the chat runs on
        screen = terminal.wait_for(lambda s: "ended:" in s, 1200, "the end of the answer", 1.0)
    finally:
        terminal.close()
    store = HistoryStore(data / DB_FILE)
    chat = store.list_chats()[0]
    answer = store.messages(chat.id)[-1]
    store.close()
    status = next((line.strip() for line in screen.splitlines() if "tok/s" in line), "")
    shutil.rmtree(home, ignore_errors=True)
    return answer.stats.as_dict(), status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decoder", default="greedy")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument(
        "--backend",
        default=None,
        help="the runtime for both (llama, int4, hf); by default each process picks its own by "
        "the kept pass costs, which need not agree",
    )
    parser.add_argument(
        "--chat-threads", type=int, default=None, help="threads = N in the chat's settings"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment variable for both processes (repeatable)",
    )
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed (apt-get install tmux)")
    env = dict(os.environ)
    env.pop("SPECCHAT_CONFIG_DIR", None)
    env.pop("SPECCHAT_DATA_DIR", None)
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--env takes KEY=VALUE, got {item!r}")
        env[key] = value
    ratios, asked, chatted = [], [], []
    for run in range(1, args.repeats + 1):
        with tempfile.TemporaryDirectory(prefix="specchat-ui-cost-ask-") as home:
            ask_env = {**env, "SPECCHAT_CONFIG_DIR": home, "SPECCHAT_DATA_DIR": home}
            ask_stats = headless_run(args, ask_env)
        chat_stats, status = chat_run(args, env)
        asked.append(ask_stats["tokens_per_second"])
        chatted.append(chat_stats["tokens_per_second"])
        ratios.append(chatted[-1] / asked[-1])
        print(
            f"run {run}: ask {asked[-1]:.1f} tok/s ({ask_stats['generated_tokens']} tokens), "
            f"chat {chatted[-1]:.1f} tok/s ({chat_stats['generated_tokens']} tokens) "
            f"→ {ratios[-1]:.3f}   [the chat showed: {status}]",
            flush=True,
        )
    print(
        f"decoder {args.decoder}, backend {args.backend or 'chosen'}, {args.max_tokens} tokens, {args.repeats} interleaved runs: "
        f"ask {statistics.median(asked):.1f} tok/s, chat {statistics.median(chatted):.1f} tok/s, "
        f"chat/ask median {statistics.median(ratios):.3f}"
    )


if __name__ == "__main__":
    main()
