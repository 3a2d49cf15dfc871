"""Ctrl+G: a decoder's parameters (from its registry Param list) and the sampling settings.
Saving dismisses it with the decoder's name, so the chat can apply them.

Values are checked by their declarations (the decoder's `Param`s, the run options of `options.py`)
before anything is stored.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

from specchat.app.session import ChatSession
from specchat.decoding.registry import DECODERS
from specchat.errors import SpecchatError
from specchat.options import run_options

# the sampling options the dialog shows beside the decoder's parameters (options.py declares them)
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "seed")


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
        config = self.session.config
        info = DECODERS[name]
        params = self.session.decoder_params(name)
        rows = [(f"p-{p.name}", p.name, params.get(p.name), p.help) for p in info.params]
        options = run_options()
        for field in SAMPLING_FIELDS:
            if field == "temperature" and not info.takes_temperature:
                continue  # greedy and beam never sample: nothing to set
            if field == "temperature":
                value = config.temperature_for(name)
                text = (
                    f"sampling temperature; empty: the decoder's own ({info.default_temperature})"
                )
            else:
                value = getattr(config, field)
                text = options[field].info.help + " (shared by all decoders)"
            rows.append((f"s-{field}", field, value, text))
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
            info.check(values)
            sampling = {}
            for field in SAMPLING_FIELDS:
                option = run_options()[field]
                shown = list(self.query(f"#s-{field}").results(Input))
                text = shown[0].value if shown else ""
                empty = text.strip() == ""
                sampling[field] = option.default if empty else option.parse(text, field)
        except SpecchatError as exc:
            self.notify(str(exc), severity="error")
            return
        temperature = sampling.pop("temperature")
        if temperature is not None:
            values["temperature"] = temperature
        error = self.session.set_decoder_settings(self.decoder, values, **sampling)
        if error:
            self.notify(error, severity="error")
        self.notify(f"{self.decoder} settings saved")
        self.dismiss(self.decoder)
