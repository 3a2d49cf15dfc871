"""`specchat chats`: the stored chats from the command line, like `llm logs` — list, show, search,
export, delete; `--json` for scripts. An unknown chat id is a SpecchatError (one line, exit 2)."""

from __future__ import annotations

import datetime as dt
import json

from specchat.app.chat_export import branch_marker, chat_dict, chat_markdown
from specchat.errors import SpecchatError
from specchat.history import HistoryStore, StoredMessage


def _when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")


def _title(store: HistoryStore, chat_id: int) -> str:
    title = store.chat_title(chat_id)
    if title is None:
        raise SpecchatError(f"no chat {chat_id} (`specchat chats list` shows them)")
    return title


def list_chats(store: HistoryStore, as_json: bool, limit: int | None = None) -> str:
    chats = store.list_chats()[:limit]
    if as_json:
        rows = [
            {"id": c.id, "title": c.title, "updated": c.updated, "messages": c.messages}
            for c in chats
        ]
        return json.dumps(rows, ensure_ascii=False, indent=2)
    if not chats:
        return "no chats yet"
    width = max(len(str(c.id)) for c in chats)
    return "\n".join(
        f"{c.id:>{width}}  {_when(c.updated)}  {c.messages:>4} msgs  {c.title}" for c in chats
    )


def _heading(message: StoredMessage) -> str:
    who = "you" if message.role == "user" else f"assistant · {message.written_by_label or '?'}"
    if message.finish_reason == "cancelled":
        who += " · stopped"
    if message.attached:
        who += " · attached " + ", ".join(name for name, _ in message.attached)
    marker = branch_marker(message)
    return f"── {who}  #{message.id}" + (f"  {marker}" if marker else "")


def show_chat(store: HistoryStore, chat_id: int, as_json: bool) -> str:
    """The chat's current branch; a marker ‹i/n› where a message has alternatives."""
    title = _title(store, chat_id)
    messages = store.messages(chat_id)
    system = store.system_prompt(chat_id)
    if as_json:
        return json.dumps(chat_dict(chat_id, title, messages, system), ensure_ascii=False, indent=2)
    lines = [f"chat {chat_id}: {title}", ""]
    if system:
        lines += ["── system prompt", system.rstrip(), ""]
    for message in messages:
        lines += [_heading(message), message.content.rstrip(), ""]
    return "\n".join(lines).rstrip()


def search_chats(store: HistoryStore, text: str, as_json: bool, limit: int = 50) -> str:
    if not text.strip():
        raise SpecchatError("search: give some words to look for")
    hits = store.search(text, limit)
    if as_json:
        rows = [
            {
                "chat_id": h.chat_id,
                "message_id": h.message_id,
                "title": h.title,
                "role": h.role,
                "snippet": h.snippet,
            }
            for h in hits
        ]
        return json.dumps(rows, ensure_ascii=False, indent=2)
    if not hits:
        return f"nothing found for {text!r}"
    return "\n".join(
        f"{h.chat_id}#{h.message_id}  {h.title}  ({h.role}): {' '.join(h.snippet.split())}"
        for h in hits
    )


EXPORT_FORMATS = ("markdown", "json")


def export_chat(store: HistoryStore, chat_id: int, fmt: str) -> str:
    if fmt not in EXPORT_FORMATS:
        raise SpecchatError(f"--format takes {' or '.join(EXPORT_FORMATS)}, not {fmt!r}")
    title = _title(store, chat_id)
    messages = store.messages(chat_id)
    system = store.system_prompt(chat_id)
    if fmt == "json":
        return json.dumps(chat_dict(chat_id, title, messages, system), ensure_ascii=False, indent=2)
    return chat_markdown(title, messages, system)


def delete_chat(store: HistoryStore, chat_id: int, as_json: bool) -> str:
    title = _title(store, chat_id)
    store.delete_chat(chat_id)
    if as_json:
        return json.dumps({"deleted": chat_id, "title": title}, ensure_ascii=False)
    return f"deleted chat {chat_id}: {title}"
