"""Where specchat keeps files: platformdirs locations, each overridable by an environment variable.

Tests point these at temporary folders so they never touch a user's real settings or chats.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from specchat.errors import FolderError

APP_NAME = "specchat"


def _dir(env_var: str, default: str) -> Path:
    """The folder, made if missing; one that cannot be made is the user's to fix (a variable
    pointing under a file, a folder without permission): one line naming it and the variable.
    (A folder that exists but is read-only is not refused here: a read-only settings folder
    still serves; each write says for itself what it could not keep.)"""
    path = Path(os.environ.get(env_var) or default)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FolderError(
            f"cannot use {path} as a folder ({exc.strerror or exc}); set {env_var} to one you can write to"
        ) from None
    return path


def cache_dir() -> Path:
    """Converted weights and measured block costs: safe to delete, rebuilt on demand."""
    return _dir("SPECCHAT_CACHE_DIR", platformdirs.user_cache_dir(APP_NAME))


def config_dir() -> Path:
    """settings.toml."""
    return _dir("SPECCHAT_CONFIG_DIR", platformdirs.user_config_dir(APP_NAME))


def data_dir() -> Path:
    """The chat history database."""
    return _dir("SPECCHAT_DATA_DIR", platformdirs.user_data_dir(APP_NAME))


def exports_dir() -> Path:
    """Chats exported as Markdown (Ctrl+S in the chat)."""
    path = data_dir() / "exports"
    path.mkdir(parents=True, exist_ok=True)
    return path
