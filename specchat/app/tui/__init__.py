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
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
) -> None:
    """The TUI in a terminal; the line-mode chat when stdin or stdout is not a TTY (pipes, CI).
    `allow_pickle` and `trust_remote_code` hold for this run only: they are never saved."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        from specchat.app.repl import run_repl

        run_repl(
            model=model,
            backend=backend,
            device=device or "cpu",
            base_url=base_url,
            api_key_env=api_key_env,
            allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code,
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
        allow_pickle=allow_pickle,
        trust_remote_code=trust_remote_code,
    ).run()
