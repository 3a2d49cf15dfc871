"""`specchat pull REPO[:QUANT|:FILE]`: the one command that uses the network of its own accord.

It fetches a model's files from the Hugging Face Hub into the Hugging Face cache, where other
tools see them too and `--model REPO[:QUANT]` then finds them (`hf_files.choose_files` picks the
same files in both). The hub library shows a progress bar per file and resumes a download that
was cut off. Unreachable (offline, or a firewall): one line that says so, before any retrying.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

from specchat.errors import SpecchatError
from specchat.hf_files import ModelName, choose_files, hf_cache_dir

_CONNECT_SECONDS = 5.0


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def check_reachable(endpoint: str) -> None:
    """One line where the hub cannot be reached (the library would retry for half a minute)."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        raise SpecchatError("HF_HUB_OFFLINE is set: unset it to pull")
    url = urlparse(endpoint)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=_CONNECT_SECONDS).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise SpecchatError(
            f"cannot reach {host}:{port} ({reason}): pull needs the network; a model already "
            "here runs without it (specchat models)"
        ) from None


def pull(spec: str, say: Callable[[str], None]) -> list[Path]:
    """Download the files `spec` names into the Hugging Face cache; their paths there."""
    name = ModelName.parse(spec)
    endpoint = hub_endpoint()
    check_reachable(endpoint)
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    try:
        files = HfApi(endpoint=endpoint).list_repo_files(name.repo)
    except RepositoryNotFoundError:
        raise SpecchatError(f"no repo {name.repo} on {endpoint} (or it is private)") from None
    except (HfHubHTTPError, OSError) as exc:
        raise SpecchatError(f"cannot list {name.repo}: {str(exc).splitlines()[0]}") from None
    chosen = choose_files(files, name)
    say(f"pulling {', '.join(chosen)} from {name.repo} into {hf_cache_dir()}")
    paths = []
    for file in chosen:
        try:
            local = hf_hub_download(name.repo, file, cache_dir=hf_cache_dir(), endpoint=endpoint)
        except (HfHubHTTPError, OSError) as exc:
            raise SpecchatError(f"cannot download {file}: {str(exc).splitlines()[0]}") from None
        paths.append(Path(local))
    return paths
