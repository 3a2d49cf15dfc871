"""F12 (or Tab after a bare @): pick a file to attach, from the folder the chat was started in.
Enter on a file dismisses with its path as `@path` would name it (relative where it can be);
Esc closes. The file's text joins the question when it is sent, as a typed `@path` does."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DirectoryTree, Label


class _Visible(DirectoryTree):
    """The tree without hidden files and folders (.git, .venv): what a person attaches."""

    def filter_paths(self, paths):
        return [path for path in paths if not path.name.startswith(".")]


class FilePickerScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "close", "close")]

    def __init__(self, folder: Path | None = None) -> None:
        super().__init__()
        self.folder = folder or Path.cwd()

    def compose(self) -> ComposeResult:
        with Vertical(id="file-picker"):
            yield Label(
                f"Attach a file from {self.folder} — Enter attaches · Esc closes",
                id="file-picker-title",
            )
            yield _Visible(self.folder, id="file-tree")

    def on_mount(self) -> None:
        self.query_one(DirectoryTree).focus()

    def on_directory_tree_file_selected(self, event: DirectoryTree.FileSelected) -> None:
        path = Path(event.path)
        try:
            self.dismiss(str(path.relative_to(self.folder)))
        except ValueError:
            self.dismiss(str(path))

    def action_close(self) -> None:
        self.dismiss(None)
