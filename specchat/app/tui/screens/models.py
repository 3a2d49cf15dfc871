"""F9: the models this machine has (`specchat models`' list: the bundled one, the Hugging Face
cache, ollama's store, LM Studio's folder) — Enter loads the chosen one in place of the current
model, in the background, while the chat stays open."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from specchat.app.session import ModelChoice


def choice_line(choice: ModelChoice) -> Text:
    """A model's entry: ● on the one the chat runs, its name (what --model takes) and where it
    was found; below, dimmed, its family, quantization, size and the runtimes that run it here."""
    mark = "●" if choice.current else " "
    return Text.assemble(f"{mark} {choice.spec}  ·  {choice.where}\n", ("  " + choice.facts, "dim"))


class ModelPickerScreen(ModalScreen[str | None]):
    """Dismissed with the chosen model's name, or None (Esc)."""

    BINDINGS = [Binding("escape", "close", "close")]

    def __init__(self, choices: list[ModelChoice]) -> None:
        super().__init__()
        self.choices = choices

    def compose(self) -> ComposeResult:
        with Vertical(id="models"):
            yield Label("Models — Enter loads it · Esc closes", id="models-title")
            yield OptionList(
                *(Option(choice_line(c), id=c.spec) for c in self.choices), id="model-list"
            )

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_close(self) -> None:
        self.dismiss(None)
