"""The raw bytes behind each token id of a Hugging Face tokenizer.

The engine detokenizes incrementally over bytes (a token may end inside a UTF-8 character), so it
needs each token's exact bytes, which `tokenizer.decode` hides: it replaces partial characters with
U+FFFD and strips or adds spaces. Vocabulary strings are encoded one of two ways, and we undo them:

- byte-level BPE (GPT-2, SmolLM, Llama 3, Qwen): every byte is spelled as one printable character
  from GPT-2's bytes<->unicode table ("Ġ" is a space, "Ċ" a newline);
- SentencePiece (Llama 2, Mistral, Gemma): "▁" is a space and "<0x0A>" byte tokens carry the bytes
  of characters missing from the vocabulary; everything else is UTF-8 text.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

_SENTENCEPIECE_SPACE = "\u2581"
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@cache
def byte_decoder() -> dict[str, int]:
    """GPT-2's table from the printable stand-in character back to the byte it spells."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    byte_values = printable[:]
    codepoints = printable[:]
    shift = 0
    for byte in range(256):
        if byte not in printable:
            byte_values.append(byte)
            codepoints.append(256 + shift)
            shift += 1
    return {chr(codepoint): byte for byte, codepoint in zip(byte_values, codepoints, strict=True)}


def byte_level_bytes(piece: str) -> bytes:
    """Bytes of a byte-level BPE vocabulary string; characters outside the table stay UTF-8."""
    table = byte_decoder()
    out = bytearray()
    for char in piece:
        byte = table.get(char)
        if byte is None:
            out += char.encode("utf-8")
        else:
            out.append(byte)
    return bytes(out)


def sentencepiece_bytes(piece: str) -> bytes:
    """Bytes of a SentencePiece vocabulary string: byte tokens, "▁" as a space, else UTF-8."""
    match = _BYTE_TOKEN.match(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    return piece.replace(_SENTENCEPIECE_SPACE, " ").encode("utf-8")


def vocabulary_style(tokenizer: Any) -> str:
    """ "byte_level", "sentencepiece" or "text": how this tokenizer spells bytes in its vocabulary.

    Fast tokenizers say it in their decoder; slow SentencePiece tokenizers have an `sp_model`.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        kinds = _component_types(spec.get("decoder")) | _component_types(spec.get("pre_tokenizer"))
        if "ByteLevel" in kinds:
            return "byte_level"
        if kinds & {"Metaspace", "ByteFallback", "Replace"}:
            return "sentencepiece"
        return "text"
    if getattr(tokenizer, "sp_model", None) is not None:
        return "sentencepiece"
    if hasattr(tokenizer, "byte_decoder"):
        return "byte_level"
    return "text"


def _component_types(component: dict[str, Any] | None) -> set[str]:
    if not component:
        return set()
    found = {component.get("type", "")}
    for child in component.get("decoders", []) or component.get("pretokenizers", []) or []:
        found |= _component_types(child)
    return found


def token_bytes_table(tokenizer: Any, size: int) -> list[bytes]:
    """Bytes of every id below `size` (the logits width, which may exceed the vocabulary).

    Added tokens (control tokens such as <|im_end|>) are their content as UTF-8; ids the
    tokenizer does not know are empty.
    """
    style = vocabulary_style(tokenizer)
    added = {index: token.content for index, token in tokenizer.added_tokens_decoder.items()}
    pieces = tokenizer.convert_ids_to_tokens(list(range(min(size, len(tokenizer)))))
    table: list[bytes] = []
    for index in range(size):
        piece = pieces[index] if index < len(pieces) else None
        if index in added:
            table.append(added[index].encode("utf-8"))
        elif piece is None:
            table.append(b"")
        elif style == "byte_level":
            table.append(byte_level_bytes(piece))
        elif style == "sentencepiece":
            table.append(sentencepiece_bytes(piece))
        else:
            table.append(tokenizer.decode([index]).encode("utf-8"))
    return table
