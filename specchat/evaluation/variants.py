"""A decoder with some of its parameters set, spelled `name:param=value[,param=value]`.

This is how one decoder races against itself: `pld` sizing each draft by its learned, cost-aware
policy next to `pld:fixed_draft=10`, which always drafts 10 tokens as llama-cpp-python's prompt
lookup does — so a user sees what the cost model buys. `specchat compare -d` and the TUI's race
picker read the same spelling; a plain name is the decoder with its usual parameters.

`server@URL` is a remote OpenAI-compatible server running its own method (`server`), so the race
picker can set a server's own speculation beside the local decoders: `server@127.0.0.1:8080`
stands for http://127.0.0.1:8080/v1, and a label spells its server back the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from specchat.backends.remote import SERVER_PREFIX, server_spelling, server_url
from specchat.decoding.registry import DECODERS, baseline_name, decoder_class
from specchat.errors import SpecchatError

# llama-cpp-python's LlamaPromptLookupDecoding drafts num_pred_tokens=10 at every step
LIBRARY_FIXED_DRAFT = 10


@dataclass(frozen=True)
class DecoderVariant:
    """A registry decoder and the parameters its spelling sets (as written, checked)."""

    name: str
    params: tuple[tuple[str, str], ...] = ()
    server: str | None = None  # a remote server's base URL (…/v1): its own method runs there

    @property
    def label(self) -> str:
        """The spelling: what a race row and pane are called."""
        if self.server is not None:
            return SERVER_PREFIX + server_spelling(self.server)
        if not self.params:
            return self.name
        return f"{self.name}:" + ",".join(f"{key}={value}" for key, value in self.params)

    def values(self) -> dict[str, object]:
        """The parameters the spelling sets, typed."""
        cls = decoder_class(self.name)
        return {key: cls.param(key).parse(value, cls.name) for key, value in self.params}

    def with_params(self, base: Mapping[str, object]) -> dict[str, object]:
        """`base` (defaults, settings, --param) with this variant's own parameters on top."""
        return {**base, **self.values()}


def parse_variant(spec: str) -> DecoderVariant:
    """`pld`, `pld:fixed_draft=10`, `lookahead:window=5,ngram=4`; a one-line SpecchatError for
    an unknown decoder, an unknown parameter or a bad value, before anything is loaded."""
    if spec.strip().startswith(SERVER_PREFIX):
        return DecoderVariant(server_name(), server=server_url(spec.strip()[len(SERVER_PREFIX) :]))
    name, sep, rest = spec.strip().partition(":")
    cls = decoder_class(name.strip())
    params: list[tuple[str, str]] = []
    if sep:
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            key = key.strip().replace("-", "_")
            if not eq or not key:
                raise SpecchatError(
                    f"decoder {spec!r}: write name:param=value[,param=value], e.g. "
                    f"{cls.name}:fixed_draft={LIBRARY_FIXED_DRAFT}"
                )
            cls.param(key).parse(value.strip(), cls.name)
            params.append((key, value.strip()))
    return DecoderVariant(cls.name, tuple(params))


def fixed_draft_variants() -> list[DecoderVariant]:
    """Each speculative decoder drafting a fixed LIBRARY_FIXED_DRAFT tokens (no policy): what
    the race picker offers beside the decoders themselves."""
    return [
        DecoderVariant(cls.name, (("fixed_draft", str(LIBRARY_FIXED_DRAFT)),))
        for cls in DECODERS.values()
        if cls.speculative and any(p.name == "fixed_draft" for p in cls.params)
    ]


def server_name() -> str:
    """The registry's name for a remote server's own method."""
    return next(cls.name for cls in DECODERS.values() if cls.needs_server)


def line_up(variants: Iterable[DecoderVariant], with_baseline: bool = True) -> list[DecoderVariant]:
    """A race's lanes, each once: the baseline first where it joins (it judges the others),
    then `variants` as given (`compare`, `bench`)."""
    first = [DecoderVariant(baseline_name())] if with_baseline else []
    return list({v.label: v for v in [*first, *variants]}.values())
