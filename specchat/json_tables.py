"""Small JSON files that map keys to entries (pass costs, exactness, learned draft rates, files
opened apart), shared by the processes of one user: read whole, an entry put, written whole to a
temporary file renamed over the old, so a reader sees the old file or the new one, never half of
one. An unreadable file reads as empty: these are caches and learned state, rebuilt on use."""

from __future__ import annotations

import json
import os
from pathlib import Path


def read_table(path: Path) -> dict:
    """The file's mapping ({} when it is missing, unreadable or not a JSON object)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def put_entry(path: Path, key: str, value: object, *, indent: int | None = 1) -> None:
    """Set `key` to `value` in the file (the other entries kept), atomically; raises OSError
    when it cannot be written (the temporary file is removed)."""
    data = read_table(path)
    data[key] = value
    write_table(path, data, indent=indent)


def write_table(path: Path, data: dict, *, indent: int | None = 1) -> None:
    """Write the whole mapping, atomically (raises OSError as `put_entry` does)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=indent))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
