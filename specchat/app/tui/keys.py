"""Every key of the chat, declared once: the bindings of the chat screen, its messages and its
prompt are made from these, and so are the footer's labels, F1's list and the command palette.
The decoders' keys come from the decoder registry (`decoder_keys`)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding

from specchat.decoding.registry import DECODERS


@dataclass(frozen=True)
class Key:
    keys: str  # Textual's key names, comma-separated
    action: str
    label: str  # the footer's word for it
    help: str  # what F1 says it does
    shows: str = ""  # how F1 writes the key (default: from `keys`)
    footer: bool = False
    priority: bool = True
    palette: str = ""  # the command palette's title ("": not in the palette)
    bound: bool = True  # False: the widget reads the key itself (the prompt's Enter), or Textual

    def matches(self, key: str) -> bool:
        return key in self.keys.split(",")

    @property
    def display(self) -> str:
        return self.shows or " / ".join(_spell(k) for k in self.keys.split(","))

    def binding(self) -> Binding:
        function_key = self.keys[:1] == "f" and self.keys[1:].isdigit()
        return Binding(
            self.keys,
            self.action,
            self.label,
            key_display=self.keys.upper() if function_key else None,
            show=self.footer,
            priority=self.priority,
        )


def _spell(key: str) -> str:
    special = {"escape": "Esc", "enter": "Enter", "question_mark": "?", "up": "↑", "down": "↓"}
    if key in special:
        return special[key]
    return "+".join(part.capitalize() if len(part) > 1 else part.upper() for part in key.split("+"))


# typed into the prompt
PROMPT_KEYS = (
    Key("enter", "submit", "send", "send", priority=False, bound=False),
    Key(
        "ctrl+j,shift+enter",
        "newline",
        "newline",
        "new line in the message",
        priority=False,
        bound=False,  # handled with the key itself, in order with the typed characters
    ),
    Key(
        "up",
        "edit_last",
        "edit last",
        "edit the last question: sending it starts a new branch",
        shows="↑ (empty prompt)",
        priority=False,
        palette="Edit the last question",
        bound=False,
    ),
    Key(
        "tab",
        "complete",
        "complete",
        "after @: complete the file's path (a bare @: pick the file)",
        shows="Tab (after @)",
        priority=False,
        bound=False,  # the prompt reads it; elsewhere Tab moves the focus
    ),
)

# on a focused message (a question or an answer)
MESSAGE_KEYS = (
    Key("up", "screen.focus_message(-1)", "previous", "the previous message", priority=False),
    Key("down", "screen.focus_message(1)", "next", "the next message", priority=False),
    Key(
        "left,[",
        "screen.switch_branch(-1)",
        "‹ branch",
        "switch to the message's previous version, marked ‹2/3›",
        shows="← / [ (on a message)",
        priority=False,
    ),
    Key(
        "right,]",
        "screen.switch_branch(1)",
        "branch ›",
        "switch to the message's next version",
        shows="→ / ] (on a message)",
        priority=False,
    ),
    Key("c", "screen.copy_message", "copy", "copy the message", "c (on a message)", priority=False),
    Key(
        "y",
        "screen.copy_code",
        "copy code",
        "copy the message's code block (again: the next block)",
        "y (on a message)",
        priority=False,
    ),
)
ANSWER_KEYS = (
    Key(
        "d",
        "screen.show_drafts",
        "drafts",
        "the answer's drafts: each step's drafted, accepted and rejected tokens, source, draft "
        "length, pass cost; tokens per step; the oracle",
        "d (on an answer)",
        priority=False,
    ),
)
QUESTION_KEYS = (
    Key(
        "e,enter",
        "screen.edit_message",
        "edit",
        "edit that question: sending it starts a new branch",
        "e / Enter (on a question)",
        priority=False,
    ),
    Key(
        "o",
        "screen.toggle_attachments",
        "files",
        "show the question's attached files, or fold them again",
        "o (on a question)",
        priority=False,
    ),
)

# anywhere in the chat
CHAT_KEYS = (
    Key(
        "escape",
        "cancel",
        "stop",
        "stop the answer now (what was generated stays, marked stopped); cancel an edit",
        footer=True,
        palette="Stop the answer",
    ),
    Key(
        "ctrl+c",
        "interrupt",
        "stop",
        "while an answer runs: stop it, as Esc does (otherwise: copy the selection)",
        shows="Ctrl+C",
    ),
    Key(
        "ctrl+r",
        "regenerate",
        "regenerate",
        "regenerate the last answer as a new version (‹2/2›); the old one stays",
        palette="Regenerate the last answer",
    ),
    Key(
        "ctrl+t",
        "toggle_colour",
        "colours",
        "run colours on/off (answers are Markdown either way)",
        footer=True,
        palette="Toggle run colours",
    ),
    Key(
        "ctrl+f",
        "toggle_colour_by",
        "by source",
        "colour runs by tokens per step or by where their drafts came from",
        palette="Colour runs by length or source",
    ),
    Key(
        "",
        "show_drafts",
        "drafts",
        "the drafts of the focused answer, else of the last one",
        palette="Show an answer's drafts",
    ),
    Key(
        "ctrl+o",
        "copy_answer",
        "copy answer",
        "copy the last answer",
        palette="Copy the last answer",
    ),
    Key(
        "ctrl+s",
        "export",
        "export",
        "export the chat to a Markdown file",
        palette="Export the chat to Markdown",
    ),
    Key(
        "ctrl+g",
        "decoder_settings",
        "settings",
        "decoder settings: parameters, temperature, top-k, top-p, seed",
        palette="Decoder settings",
    ),
    Key(
        "ctrl+b",
        "race",
        "race",
        "race: one prompt through 2–4 decoders or variants (pld:fixed_draft=10), replayed",
        footer=True,
        palette="Race decoders",
    ),
    Key(
        "ctrl+l",
        "chats",
        "chats",
        "the chats: open, rename (r), delete (d, asks first)",
        palette="Chats",
    ),
    Key("ctrl+n", "new_chat", "new chat", "a new chat", palette="New chat"),
    Key(
        "f12",
        "attach_file",
        "attach",
        "attach a file: pick it, and its text joins your question (or type @path in it)",
        palette="Attach a file",
    ),
    Key(
        "",
        "system_prompt",
        "system prompt",
        "this chat's system prompt: set, change or clear it (kept with the chat)",
        palette="System prompt of this chat",
    ),
    Key(
        "",
        "default_system_prompt",
        "default system prompt",
        "the system prompt new chats start with (settings.toml's system_prompt)",
        palette="Default system prompt (new chats)",
    ),
    Key(
        "f9",
        "pick_model",
        "model",
        "switch the model: those this machine has (specchat models), loaded in the background",
        palette="Switch model",
    ),
    Key(
        "",
        "copy_chat",
        "copy chat",
        "copy the whole chat as Markdown",
        palette="Copy the whole chat",
    ),
    Key(
        "ctrl+k",
        "search",
        "search",
        "search all chats; Enter opens the chat at the message",
        palette="Search all chats",
    ),
    Key(
        "ctrl+up",
        "focus_message(-1)",
        "messages",
        "focus the messages; ↑/↓ move between them, Esc back to the prompt",
        shows="Ctrl+↑ / Shift+Tab",
    ),
    Key("question_mark", "app.help", "help", "this help", priority=False),
)

# the app's own
APP_KEYS = (
    Key("f1", "app.help", "help", "this help", footer=True, palette="Help"),
    Key("ctrl+p", "command_palette", "commands", "command palette (every action, themes)"),
    Key("ctrl+q", "quit", "quit", "quit", priority=False, bound=False),
)


def decoder_keys() -> list[Key]:
    """A key per decoder in the registry, switching to it; a remote server's own method has no
    footer label (the status line names it)."""
    return [
        Key(
            info.key,
            f"decoder('{info.name}')",
            info.name,
            f"decoder {info.name}: {info.description}",
            footer=not info.needs_server,
            palette=f"Decoder: {info.name}",
        )
        for info in DECODERS.values()
    ]


def bindings(keys) -> list[Binding]:
    return [key.binding() for key in keys if key.bound and key.keys]


def help_rows() -> list[tuple[str, str]]:
    """(key, what it does) for F1: the prompt's keys, the chat's, a focused message's, the
    app's."""
    keys = (*PROMPT_KEYS, *CHAT_KEYS, *QUESTION_KEYS, *ANSWER_KEYS, *MESSAGE_KEYS[2:], *APP_KEYS)
    return [(key.display, key.help) for key in keys if key.keys]
