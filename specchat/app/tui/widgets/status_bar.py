"""The live status line under the transcript (see `figures.status_text` for what it shows)."""

from __future__ import annotations

from textual.widgets import Static

from specchat.app.tui.figures import Figures, status_text


class StatusBar(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.figures = Figures()
        self.model = "loading model…"
        self.messaging = True  # a message shows, not figures

    def show(self, figures: Figures | None = None, model: str | None = None) -> None:
        if figures is not None:
            self.figures = figures
        if model is not None:
            self.model = model
        self.messaging = False
        # two lines whatever they say (chat.tcss): a repaint, never a layout of the screen
        self.update(status_text(self.figures, self.model), layout=False)

    def message(self, text: str) -> None:
        """A line instead of figures (loading progress, errors)."""
        self.messaging = True
        self.update(text, layout=False)

    def follow_model(self, model: str) -> None:
        """The model's part, where it changed and figures show (a message stays until figures
        replace it)."""
        if model != self.model and not self.messaging:
            self.show(model=model)
