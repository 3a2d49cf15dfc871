"""The contract between the engine and a decoder, and how a decoder describes itself.

Before and after every step the backend has committed every context token but the last, which is
"pending": the next pass evaluates it first (as the root of the block) and so yields the logits of
the token after it. Decoders know nothing of threads, widgets or how a backend lays out its cache.

A decoder class declares what every surface needs to know about it — name, key, description, typed
parameters, what kind of decoder it is — so that the CLI, the TUI, settings and the benchmark read
the class and no decoder name is written anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar

from specchat.backends.base import Backend
from specchat.decoding.params import Param
from specchat.decoding.sampling import Sampler, SamplingParams
from specchat.decoding.sources import NO_SOURCES, DraftSources
from specchat.decoding.step import Step
from specchat.errors import SpecchatError


class Decoder:
    """One decoding method. Subclasses set the class attributes and implement `step`."""

    name: ClassVar[str]
    key: ClassVar[str]  # the TUI key that switches to it
    description: ClassVar[str]
    params: ClassVar[tuple[Param, ...]] = ()
    # parameters it no longer takes: settings that still name them are read without them
    retired: ClassVar[tuple[str, ...]] = ()
    greedy_family: ClassVar[bool] = True  # reproduces greedy exactly when the sampler is greedy
    speculative: ClassVar[bool] = False  # drafts tokens and verifies them in one target pass
    needs_logits: ClassVar[bool] = True  # needs the target's logits (no remote text-only engine)
    default_temperature: ClassVar[float] = 0.0
    takes_temperature: ClassVar[bool] = True  # greedy and beam search refuse one
    baseline: ClassVar[bool] = False  # the decoder every speedup is measured against
    needs_draft_model: ClassVar[bool] = False  # built with a loaded draft (`draft_model=`)
    reads_saved_chats: ClassVar[bool] = False  # drafts from the saved chats' index, when allowed
    needs_server: ClassVar[bool] = False  # a remote server's own method (runs nowhere else)
    # answers run with the available decoder of the highest rank unless one is chosen (0: never)
    default_rank: ClassVar[int] = 0

    def __init__(self, **values: Any) -> None:
        self.values: dict[str, Any] = values

    # -- the declaration ------------------------------------------------------------------
    @classmethod
    def defaults(cls) -> dict[str, object]:
        return {p.name: p.default for p in cls.params}

    @classmethod
    def param(cls, name: str) -> Param:
        for param in cls.params:
            if param.name == name:
                return param
        takes = f"it takes: {', '.join(p.name for p in cls.params) or 'none'}"
        if name in {f.name for f in fields(SamplingParams)}:  # every decoder's, set as a flag
            takes += f"; sampling is set for every decoder with --{name.replace('_', '-')}"
        raise SpecchatError(f"decoder {cls.name!r} has no parameter {name!r} ({takes})")

    @classmethod
    def validate(cls, values: Mapping[str, object]) -> dict[str, object]:
        """All parameters, typed and checked: the defaults with `values` applied."""
        checked = cls.defaults()
        for name, value in values.items():
            if name in cls.retired:
                continue
            checked[name] = cls.param(name).parse(value, cls.name)
        cls.check(checked)
        return checked

    @classmethod
    def create(cls, **values: object) -> Decoder:
        """An instance with `values` checked against the declaration (decoders that need a
        draft model are built by the registry, which loads it)."""
        return cls(**cls.validate(values))

    @classmethod
    def check(cls, values: dict[str, object]) -> None:
        """Rules between parameters (e.g. min ≤ max); raise SpecchatError with one line."""

    @classmethod
    def unavailable_anywhere(cls) -> str | None:
        """Why it cannot run on any model here (a library it needs is missing), else None."""
        return None

    @classmethod
    def unavailable(cls, backend: Backend, values: Mapping[str, object]) -> str | None:
        """Why it cannot run on `backend` with these parameters (None: it can), beyond what the
        kind of backend says (the registry checks that: a server runs only its own method)."""
        return None

    # -- the work -------------------------------------------------------------------------
    def prepare(self, target: Backend) -> None:
        """One-off measurements (block costs) the engine runs before timing starts."""

    def reset(self, context: list[int], sources: DraftSources = NO_SOURCES) -> None:
        """(Re)build internal state (indexes, pools, draft caches) from the committed context;
        `sources` is what the request offers to draft from besides it."""

    def finish(self) -> None:
        """The answer ended (or the decoder was switched away): keep what was learned."""

    def step(self, target: Backend, context: list[int], sampler: Sampler, room: int) -> Step:
        """One target pass; yields at most `room` tokens (what max tokens and the context allow)."""
        raise NotImplementedError
