"""The one list of decoders: the CLI, the TUI's keys and the benchmark all read it.

Each entry names a decoder, says what it does, lists its parameters with defaults, and builds it.
A decoder that cannot run on the loaded backend says why through `unavailable`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from specchat.backends.base import Backend
from specchat.decoding.base import Decoder
from specchat.decoding.beam import BeamSearchDecoder
from specchat.decoding.draft_model import DraftModelDecoder, default_draft_reason
from specchat.decoding.lookahead import LookaheadDecoder
from specchat.decoding.payoff import PayoffGuard
from specchat.decoding.plain import PlainDecoder
from specchat.decoding.prompt_lookup import PromptLookupDecoder
from specchat.decoding.sampling import SamplingParams
from specchat.errors import SpecchatError


@dataclass(frozen=True)
class Param:
    name: str
    default: float | int | str | None
    help: str


@dataclass(frozen=True)
class DecoderInfo:
    name: str
    key: str  # TUI key that switches to it
    description: str
    build: Callable[..., Decoder]
    params: tuple[Param, ...] = ()
    greedy_family: bool = True  # reproduces greedy exactly when the sampler is greedy
    default_temperature: float = 0.0
    # why it cannot run on a backend with these parameters (None: it can)
    unavailable: Callable[[Backend, dict], str | None] = field(default=lambda backend, params: None)

    def defaults(self) -> dict[str, object]:
        return {p.name: p.default for p in self.params}

    def create(self, **overrides: object) -> Decoder:
        unknown = set(overrides) - {p.name for p in self.params}
        if unknown:
            raise SpecchatError(
                f"decoder {self.name!r} has no parameter {sorted(unknown)[0]!r} "
                f"(it takes: {', '.join(p.name for p in self.params) or 'none'})"
            )
        values = {**self.defaults(), **overrides}
        return self.build(**values)


DECODERS: dict[str, DecoderInfo] = {}


def register(info: DecoderInfo) -> None:
    DECODERS[info.name] = info


register(
    DecoderInfo(
        name="greedy",
        key="f2",
        description="plain greedy decoding: one pass, one token (the baseline)",
        build=lambda: PlainDecoder("greedy"),
    )
)
register(
    DecoderInfo(
        name="sample",
        key="f3",
        description="plain sampling with temperature, top-k, top-p and a seed",
        build=lambda: PlainDecoder("sample"),
        greedy_family=False,
        default_temperature=0.8,
    )
)
register(
    DecoderInfo(
        name="beam",
        key="f4",
        description="beam search; streams the prefix all beams share",
        build=lambda num_beams, length_penalty: BeamSearchDecoder(num_beams, length_penalty),
        params=(
            Param("num_beams", 4, "beams kept at each step"),
            Param("length_penalty", 1.0, "score / length**penalty; > 0 favours longer answers"),
        ),
        greedy_family=False,
    )
)

register(
    DecoderInfo(
        name="pld",
        key="f5",
        description="prompt lookup: drafts what followed the latest earlier match of the context's tail",
        build=lambda max_ngram, min_ngram, num_pred_tokens: PayoffGuard(
            PromptLookupDecoder(max_ngram, min_ngram, num_pred_tokens)
        ),
        params=(
            Param("max_ngram", 3, "longest n-gram matched against the context"),
            Param("min_ngram", 1, "shortest n-gram matched"),
            Param("num_pred_tokens", 10, "most tokens drafted in one step"),
        ),
    )
)

register(
    DecoderInfo(
        name="lookahead",
        key="f6",
        description="lookahead: Jacobi window + n-gram pool, verified in the same tree-shaped pass",
        build=lambda window, ngram, candidates, max_cost_ratio, seed_from_prompt: PayoffGuard(
            LookaheadDecoder(window, ngram, candidates, max_cost_ratio, seed_from_prompt)
        ),
        params=(
            Param("window", 5, "W: Jacobi window columns"),
            Param("ngram", 4, "N: n-gram length (window levels = N-1)"),
            Param("candidates", 5, "G: pool n-grams verified per step (and kept per key)"),
            Param(
                "max_cost_ratio", 2.0, "largest pass cost, in single-token passes, W/G shrink to"
            ),
            Param("seed_from_prompt", True, "seed the pool with the context's own n-grams"),
        ),
    )
)

register(
    DecoderInfo(
        name="draft",
        key="f7",
        description="draft model: a small model with the same vocabulary drafts K tokens",
        build=lambda draft, draft_backend, draft_device, k, k_max, threshold: PayoffGuard(
            DraftModelDecoder(draft, draft_backend, draft_device, k, k_max, threshold)
        ),
        params=(
            Param(
                "draft",
                None,
                "draft model spec (default: the bundled GGUF for an hf target); self:L = the "
                "target's first L layers (self-speculation, hf backend)",
            ),
            Param("draft_backend", None, "llama or hf (default: by the draft's format)"),
            Param("draft_device", "cpu", "cpu or cuda"),
            Param("k", 4, "initial draft length (adapts: +2 on full acceptance, -1 on a miss)"),
            Param("k_max", 12, "longest draft"),
            Param("threshold", 0.3, "stop drafting when the draft's top probability is lower"),
        ),
        unavailable=lambda backend, params: (
            None if params.get("draft") else default_draft_reason(backend)
        ),
    )
)


def get_decoder_info(name: str) -> DecoderInfo:
    try:
        return DECODERS[name]
    except KeyError:
        raise SpecchatError(
            f"unknown decoder {name!r}: choose one of {', '.join(DECODERS)}"
        ) from None


def build_decoder(name: str, params: dict[str, object], backend: Backend) -> Decoder:
    """A decoder from its registry name and user parameters, refused with the reason when it
    cannot run on `backend`."""
    info = get_decoder_info(name)
    reason = info.unavailable(backend, params)
    if reason:
        raise SpecchatError(f"decoder {name!r} is unavailable: {reason}")
    return info.create(**params)


def sampling_for(name: str, temperature: float | None, base: SamplingParams) -> SamplingParams:
    """The sampling settings a decoder runs with: its default temperature unless one is given."""
    info = get_decoder_info(name)
    if name == "greedy" and temperature:
        raise SpecchatError("greedy never samples: use --decoder sample for a temperature")
    if name == "beam" and temperature:
        raise SpecchatError("beam search here is deterministic: drop --temperature")
    chosen = info.default_temperature if temperature is None else temperature
    if chosen < 0:
        raise SpecchatError("--temperature must be ≥ 0")
    if not 0 < base.top_p <= 1:
        raise SpecchatError("--top-p must be in (0, 1]")
    if base.top_k < 0:
        raise SpecchatError("--top-k must be ≥ 0")
    return SamplingParams(temperature=chosen, top_k=base.top_k, top_p=base.top_p, seed=base.seed)
