"""Ctrl+G: a decoder's parameters (from its registry Param list) and the sampling settings.

Values are checked against the type of each parameter's default before anything is stored.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

from specchat.app.tui.session import ChatSession
from specchat.decoding.registry import DECODERS
from specchat.errors import SpecchatError


def parse_value(text: str, default: object, name: str) -> object:
    """A typed value for a parameter, shaped like its default; raises ValueError with the reason."""
    text = text.strip()
    if text == "" or text.lower() == "none":
        return None
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "yes")
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        kind = type(default).__name__
        raise ValueError(f"{name} must be a{'n' if kind == 'int' else ''} {kind}") from None
    return text


class DecoderSettingsScreen(ModalScreen):
    BINDINGS = [Binding("escape", "dismiss", "cancel")]

    def __init__(self, decoder: str) -> None:
        super().__init__()
        self.decoder = decoder

    @property
    def session(self) -> ChatSession:
        return self.app.session

    def compose(self) -> ComposeResult:
        with Vertical(id="decoder-settings"):
            yield Label("Decoder settings", id="ds-title")
            yield Select(
                [(name, name) for name in DECODERS],
                value=self.decoder,
                allow_blank=False,
                id="ds-decoder",
            )
            yield VerticalScroll(id="ds-fields")
            with Horizontal(id="ds-buttons"):
                yield Button("Save", variant="primary", id="ds-save")
                yield Button("Cancel", id="ds-cancel")

    async def on_mount(self) -> None:
        await self._fill()

    def _rows(self, name: str) -> list[tuple[str, str, object, str]]:
        """(field id, label, current value, help) for the decoder's params and sampling."""
        settings = self.session.settings
        info = DECODERS[name]
        params = self.session.decoder_params(name)
        rows = [(f"p-{p.name}", p.name, params.get(p.name), p.help) for p in info.params]
        temperature = settings.temperature(name)
        rows += [
            (
                "s-temperature",
                "temperature",
                temperature,
                f"empty: the decoder's default ({info.default_temperature})",
            ),
            ("s-top_k", "top-k", settings.top_k, "0: off (shared by all decoders)"),
            ("s-top_p", "top-p", settings.top_p, "1.0: off (shared)"),
            ("s-seed", "seed", settings.seed, "empty: random (shared)"),
        ]
        return rows

    async def _fill(self) -> None:
        fields = self.query_one("#ds-fields", VerticalScroll)
        await fields.remove_children()
        widgets = []
        description = DECODERS[self.decoder].description
        widgets.append(Label(description, classes="ds-description"))
        for field_id, label, value, help_text in self._rows(self.decoder):
            widgets.append(Label(f"{label} — {help_text}", classes="ds-label"))
            widgets.append(Input("" if value is None else str(value), id=field_id))
        await fields.mount_all(widgets)

    @on(Select.Changed, "#ds-decoder")
    async def _decoder_changed(self, event: Select.Changed) -> None:
        if event.value != self.decoder:
            self.decoder = str(event.value)
            await self._fill()

    @on(Button.Pressed, "#ds-cancel")
    def _cancel(self) -> None:
        self.dismiss()

    @on(Button.Pressed, "#ds-save")
    @on(Input.Submitted)
    def _save(self) -> None:
        info = DECODERS[self.decoder]
        values: dict[str, object] = {}
        try:
            for param in info.params:
                raw = self.query_one(f"#p-{param.name}", Input).value
                values[param.name] = param.parse(raw, info.name)
            temperature = parse_value(
                self.query_one("#s-temperature", Input).value, 0.0, "temperature"
            )
            top_k = parse_value(self.query_one("#s-top_k", Input).value, 0, "top-k")
            top_p = parse_value(self.query_one("#s-top_p", Input).value, 1.0, "top-p")
            seed = parse_value(self.query_one("#s-seed", Input).value, 0, "seed")
            if temperature is not None and temperature < 0:
                raise ValueError("temperature must be ≥ 0")
            if top_p is not None and not 0 < top_p <= 1:
                raise ValueError("top-p must be in (0, 1]")
            if top_k is not None and top_k < 0:
                raise ValueError("top-k must be ≥ 0")
            info.check(values)
        except (ValueError, SpecchatError) as exc:
            self.notify(str(exc), severity="error")
            return
        if temperature is not None:
            values["temperature"] = float(temperature)
        error = self.session.set_decoder_settings(
            self.decoder,
            values,
            top_k=0 if top_k is None else int(top_k),
            top_p=1.0 if top_p is None else float(top_p),
            seed=None if seed is None else int(seed),
        )
        if error:
            self.notify(error, severity="error")
        self.notify(f"{self.decoder} settings saved")
        self.dismiss()
