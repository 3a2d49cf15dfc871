"""A stored chat as a document: Markdown (the TUI's export and copy, `specchat chats export`) and
JSON (`specchat chats show --json`, `export --format json`) for scripts. One place for both, so
the TUI and the CLI write the same thing."""

from __future__ import annotations

from specchat.history import StoredMessage


def branch_marker(message: StoredMessage) -> str:
    """ "‹2/3›" on a message with siblings (the second of three alternatives); "" without."""
    index, count = message.branch
    return f"‹{index}/{count}›" if count > 1 else ""


def chat_markdown(title: str, messages: list[StoredMessage], system: str | None = None) -> str:
    """The chat's transcript (its current branch) as a Markdown document, its system prompt
    first."""
    lines = [f"# {title}", ""]
    if system:
        lines += ["## System prompt", "", system.rstrip(), ""]
    for message in messages:
        heading = (
            "You" if message.role == "user" else f"Assistant ({message.written_by_label or '?'})"
        )
        lines += [f"## {heading}", "", message.content.rstrip(), ""]
        if message.finish_reason == "cancelled":
            lines += ["*(stopped)*", ""]
    return "\n".join(lines)


def message_dict(message: StoredMessage) -> dict[str, object]:
    """One message with everything the store keeps of it."""
    return {
        "id": message.id,
        "parent_id": message.parent_id,
        "role": message.role,
        "content": message.content,
        "decoder": message.decoder,
        "finish_reason": message.finish_reason,
        "branch": list(message.branch),
        "runs": [list(span) for span in message.runs],
        "stats": message.stats.as_dict() if message.stats is not None else None,
        "elapsed_seconds": message.elapsed_seconds,
        "params": message.params,
        "attached": [{"name": name, "chars": chars} for name, chars in message.attached],
    }


def chat_dict(
    chat_id: int, title: str, messages: list[StoredMessage], system: str | None = None
) -> dict[str, object]:
    return {
        "id": chat_id,
        "title": title,
        "system_prompt": system,
        "messages": [message_dict(m) for m in messages],
    }
