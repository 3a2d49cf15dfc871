"""The Textual chat app. `open_chat` is what plain `specchat` runs."""

from __future__ import annotations

import sys

from specchat.options import RunConfig


def open_chat(settings: RunConfig, config: RunConfig, settings_error: str | None = None) -> None:
    """The TUI in a terminal; the line-mode chat when stdin or stdout is not a TTY (pipes, CI).
    `settings` is what the settings file holds (the TUI saves changes to it), `config` this run's
    configuration (the flags applied: --allow-pickle and the like hold for this run only)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        from specchat.app.repl import run_repl

        if settings_error:
            print(f"specchat: warning: {settings_error}", file=sys.stderr)
        run_repl(config)
        return
    from specchat.app.tui.app import SpecchatApp

    SpecchatApp(settings=settings, config=config, settings_error=settings_error).run()
