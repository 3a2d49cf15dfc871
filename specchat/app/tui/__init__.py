"""The Textual chat app. `open_chat` is what plain `specchat` runs."""

from __future__ import annotations

import sys


def open_chat(
    *,
    model: str | None,
    backend: str | None,
    device: str | None,
    draft: str | None = None,
    base_url: str | None = None,
    api_key_env: str | None = None,
    race_servers: list[str] | None = None,
) -> None:
    """The TUI in a terminal; the line-mode chat when stdin or stdout is not a TTY (pipes, CI)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        from specchat.app.repl import run_repl

        run_repl(
            model=model,
            backend=backend,
            device=device or "cpu",
            base_url=base_url,
            api_key_env=api_key_env,
        )
        return
    from specchat.app.tui.app import SpecchatApp

    SpecchatApp(
        model=model,
        backend_name=backend,
        device=device,
        draft=draft,
        base_url=base_url,
        api_key_env=api_key_env,
        race_servers=race_servers,
    ).run()
