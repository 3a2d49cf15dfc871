"""The saved chats as a draft source: every chat in the store, tokenized in the model's chat template
and indexed for suffix matching, following the store as it changes, never in the way.

Two parts answer a lookup, the better-scored continuation winning:
- the built part, a `TokenSuffixArray` over the chats as they were when it was built, saved under
  the cache dir and memory-mapped at the next start (12 bytes a token; loading costs ~nothing);
- the recent part, a `SharedTree` (ArcticInference's suffix tree) with what changed since: each
  changed chat's new tail, with `DEPTH` tokens before it so that a match across the join holds.
A worker thread does everything slow — loading or rebuilding the built part (a rebuild reuses the
saved tokens of unchanged chats and tokenizes only the others), then tokenizing each chat the store
reports changed — so start-up and the first token never wait: until it is ready a lookup finds
nothing, and the drafter has this conversation's own sources. The built part is rebuilt at start
when the store lost messages it holds (a deleted chat drops out then) or many chats changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from specchat.backends.base import AnyBackend, Backend, ChatMessage, is_server
from specchat.decoding.registry import decoder_class
from specchat.decoding.sources import Continuation
from specchat.decoding.suffix_array import DEPTH as ARRAY_DEPTH
from specchat.decoding.suffix_array import TokenSuffixArray
from specchat.decoding.suffix_tree import DEPTH, SharedTree
from specchat.errors import SpecchatError
from specchat.history import HistoryStore, StoredMessage
from specchat.locations import cache_dir
from specchat.options import RunConfig
from specchat.prompting import chat_prompt_ids

_VERSION = 1
_MAX_RECENT_CHATS = 32  # changed chats kept in the recent part at start; more: rebuild
_BUILD = object()
_STOP = object()


def model_key(backend: Backend) -> str:
    """Which tokenizer the index's token ids belong to."""
    return f"{backend.name}|{backend.model_name}|{backend.vocab_size}"


def default_cache_folder(store_path: Path, key: str) -> Path:
    digest = hashlib.sha1(f"{store_path.resolve()}|{key}".encode()).hexdigest()[:16]
    return cache_dir() / "saved-chats" / digest


class SavedChatsIndex:
    """Every saved chat, for drafting. Lookups may come from any thread (the engine's); updates
    happen on the index's own worker thread. `start` it, and register `chat_changed` with the
    store (`HistoryStore.add_listener`)."""

    def __init__(
        self,
        store_path: Path,
        backend: Backend,
        *,
        cache_folder: Path | None = None,
        persist: bool = True,
        persist_min_tokens: int = 50_000,
    ) -> None:
        self.store_path = store_path
        self._backend = backend
        self._key = model_key(backend)
        self.cache_folder = cache_folder or default_cache_folder(store_path, self._key)
        # smaller stores are rebuilt in well under a second: not worth a folder in the cache
        self.persist = persist
        self.persist_min_tokens = persist_min_tokens
        self._built: TokenSuffixArray | None = None
        self._spans: dict[int, tuple[int, int]] = {}  # chat -> its tokens in the built text
        self._covered: dict[int, list[int]] = {}  # chat -> message ids the built part holds
        self._recent = SharedTree()
        self._lock = threading.Lock()  # the recent part is not thread-safe
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self.ready_seconds: float | None = None  # from start to a usable built part
        self.loaded = False  # the built part came from the disk cache

    # -- control ---------------------------------------------------------------------------
    def start(self) -> SavedChatsIndex:
        """Load or build in the background; returns at once."""
        self._started = time.perf_counter()
        self._queue.put(_BUILD)
        self._thread = threading.Thread(target=self._run, name="saved-chats index", daemon=True)
        self._thread.start()
        return self

    def chat_changed(self, chat_id: int) -> None:
        """A store listener: chat `chat_id` gained or lost messages (callable from any thread)."""
        self._queue.put(chat_id)

    def wait_idle(self) -> None:
        """Block until everything asked so far is done (benchmarks and tests; the chat never
        waits)."""
        self._queue.join()

    def close(self, wait: bool = False) -> None:
        """Stop the worker (after what is queued); with `wait`, return once it has stopped."""
        self._queue.put(_STOP)
        if wait and self._thread is not None:
            self._thread.join()

    @property
    def ready(self) -> bool:
        return self._built is not None

    @property
    def nbytes(self) -> int:
        """Memory of the built part (the recent part is small by construction)."""
        return self._built.nbytes if self._built is not None else 0

    @property
    def n_tokens(self) -> int:
        built = self._built
        return (built.n_tokens if built is not None else 0) + self._recent.n_tokens

    # -- lookups -------------------------------------------------------------------------------
    def continuation(
        self, context: Sequence[int], limit: int, factor: float = 1.0, min_prob: float = 0.1
    ) -> Continuation | None:
        built = self._built
        best = built.continuation(context, limit, min_prob, factor) if built is not None else None
        with self._lock:
            recent = self._recent.continuation(context, limit, factor, min_prob)
        if recent is not None and (best is None or recent.score > best.score):
            return recent
        return best

    # -- the worker ------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            store = HistoryStore(self.store_path)  # its own connection, in this thread
        except SpecchatError:  # the chat says what is wrong with the store; no saved chats
            while self._queue.get() is not _STOP:
                self._queue.task_done()
            self._queue.task_done()
            return
        try:
            while True:
                item = self._queue.get()
                try:
                    if item is _STOP:
                        return
                    if item is _BUILD:
                        self._load_or_build(store)
                    else:
                        self._update(store, item)
                except Exception:  # drafting without saved chats beats a crash
                    pass
                finally:
                    self._queue.task_done()
        finally:
            store.close()

    def _load_or_build(self, store: HistoryStore) -> None:
        listing = store.message_ids()
        cached = self._load_cache()
        if cached is not None:
            built, spans, covered = cached
            lost = any(listing.get(chat, [])[: len(ids)] != ids for chat, ids in covered.items())
            changed = [chat for chat, ids in listing.items() if covered.get(chat) != ids]
            if not lost and len(changed) <= _MAX_RECENT_CHATS:
                self._built, self._spans, self._covered = built, spans, covered
                self.loaded = True
                self.ready_seconds = time.perf_counter() - self._started
                for chat in changed:
                    self._update(store, chat)
                return
        self._rebuild(store, listing, cached)
        self.ready_seconds = time.perf_counter() - self._started

    def _rebuild(self, store: HistoryStore, listing: dict[int, list[int]], cached) -> None:
        sequences: list[list[int]] = []
        chats = sorted(listing)
        for chat in chats:
            if cached is not None and cached[2].get(chat) == listing[chat]:
                start, end = cached[1][chat]
                sequences.append((cached[0].text[start:end] - 1).tolist())
            else:
                sequences.append(self._tokens(store.messages(chat)))
        built = TokenSuffixArray.build(sequences)
        spans = dict(zip(chats, TokenSuffixArray.spans(sequences)))
        if self.persist and built.n_tokens >= self.persist_min_tokens:
            self._save_cache(built, spans, listing)
        with self._lock:
            self._built, self._spans, self._covered = built, spans, listing
            self._recent = SharedTree()

    def _update(self, store: HistoryStore, chat: int) -> None:
        """Index what chat `chat` holds beyond the built part (or forget it: nothing beyond)."""
        messages = store.messages(chat)
        if self._covered.get(chat) == [m.id for m in messages]:
            tail: list[int] = []
        else:
            tokens = self._tokens(messages) if messages else []
            built_tokens: list[int] = []
            if self._built is not None and chat in self._spans:
                start, end = self._spans[chat]
                built_tokens = (self._built.text[start:end] - 1).tolist()
            shared = _common_prefix(tokens, built_tokens)
            tail = tokens[max(0, shared - DEPTH) :] if shared < len(tokens) else []
        with self._lock:
            if tail:
                self._recent.add(chat, tail)
            else:
                self._recent.remove(chat)

    def _tokens(self, messages: list[StoredMessage]) -> list[int]:
        """A chat as the model saw it: its messages in the chat template."""
        chat = [ChatMessage(m.role, m.content) for m in messages]
        try:
            return chat_prompt_ids(self._backend, chat)
        except Exception:  # a template that refuses this sequence of roles: message by message
            ids: list[int] = []
            for message in chat:
                try:
                    ids += chat_prompt_ids(self._backend, [message])
                except Exception:
                    ids += self._backend.tokenize(message.content)
            return ids

    # -- the disk cache ------------------------------------------------------------------------
    def _load_cache(
        self,
    ) -> tuple[TokenSuffixArray, dict[int, tuple[int, int]], dict[int, list[int]]] | None:
        folder = self.cache_folder
        try:
            meta = json.loads((folder / "meta.json").read_text())
            if (meta.get("version"), meta.get("model"), meta.get("depth")) != (
                _VERSION,
                self._key,
                ARRAY_DEPTH,
            ):
                return None
            built = TokenSuffixArray.load(folder)
            spans = {int(c): (int(v[0]), int(v[1])) for c, v in meta["chats"].items()}
            covered = {int(c): [int(i) for i in v[2]] for c, v in meta["chats"].items()}
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None
        return built, spans, covered

    def _save_cache(
        self,
        built: TokenSuffixArray,
        spans: dict[int, tuple[int, int]],
        covered: dict[int, list[int]],
    ) -> None:
        """Write a new folder, then swap it in: a crash never leaves half an index."""
        folder = self.cache_folder
        tmp = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
        old = folder.with_name(f"{folder.name}.{os.getpid()}.old")
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            built.save(tmp)
            meta = {
                "version": _VERSION,
                "model": self._key,
                "depth": ARRAY_DEPTH,
                "store": str(self.store_path),
                "chats": {str(c): [*spans[c], covered[c]] for c in covered},
            }
            (tmp / "meta.json").write_text(json.dumps(meta))
            if folder.exists():
                folder.rename(old)
            tmp.rename(folder)
        except OSError:
            pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def open_saved_chats(store: HistoryStore, backend: Backend) -> SavedChatsIndex:
    """The index of `store` for `backend`'s tokenizer, loading in the background and following
    the store's writes from now on."""
    index = SavedChatsIndex(store.path, backend).start()
    store.add_listener(index.chat_changed)
    return index


def saved_chats_for(
    store: HistoryStore | None, backend: AnyBackend, config: RunConfig, decoders: Iterable[str]
) -> SavedChatsIndex | None:
    """The saved chats' index for a run, or None: opened where the settings allow drafting from
    saved chats and one of `decoders` (`ask`'s one; every decoder the chat can switch to) reads
    them and can run on this machine, on a model specchat decodes (a server drafts for itself).
    One rule for `ask` and the chat."""
    if store is None or not config.draft_from_saved_chats or is_server(backend):
        return None
    readers = [decoder_class(name) for name in decoders]
    if not any(c.reads_saved_chats and c.unavailable_anywhere() is None for c in readers):
        return None
    return open_saved_chats(store, backend)
