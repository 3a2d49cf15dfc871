"""The one list of decoders: the CLI, the TUI's keys, settings and the benchmark all read it.

Each decoder class declares itself (name, key, description, typed parameters, what kind it is);
adding a decoder is writing its class and one `register` line. No decoder name appears anywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping

from specchat.backends.base import Backend
from specchat.decoding.base import Decoder
from specchat.decoding.beam import BeamSearchDecoder
from specchat.decoding.draft_model import DraftModelDecoder
from specchat.decoding.lookahead import LookaheadDecoder
from specchat.decoding.plain import GreedyDecoder, SampleDecoder
from specchat.decoding.prompt_lookup import PromptLookupDecoder
from specchat.decoding.sampling import SamplingParams
from specchat.decoding.server import ServerDecoder
from specchat.decoding.suffix import SuffixDecoder
from specchat.errors import SpecchatError
from specchat.models import LoadOptions, default_draft_reason, load_draft

DECODERS: dict[str, type[Decoder]] = {}


def register(cls: type[Decoder]) -> type[Decoder]:
    """Add a decoder class to the registry (usable as a class decorator)."""
    DECODERS[cls.name] = cls
    return cls


for _cls in (
    GreedyDecoder,
    SampleDecoder,
    BeamSearchDecoder,
    PromptLookupDecoder,
    LookaheadDecoder,
    DraftModelDecoder,
    SuffixDecoder,
    ServerDecoder,
):
    register(_cls)


def decoder_class(name: str) -> type[Decoder]:
    try:
        return DECODERS[name]
    except KeyError:
        raise SpecchatError(
            f"unknown decoder {name!r}: choose one of {', '.join(DECODERS)}"
        ) from None


def baseline_name() -> str:
    """The decoder every speedup is measured against."""
    return next(cls.name for cls in DECODERS.values() if cls.baseline)


def default_race(backend: Backend | None = None) -> list[str]:
    """What `compare`, `bench` and the race screen run when not told: the baseline and every
    speculative decoder that needs nothing more than the model; on a remote server, the server's
    own method."""
    if backend is not None and not getattr(backend, "has_logits", True):
        return [n for n, cls in DECODERS.items() if cls.needs_server]
    return [baseline_name()] + [
        cls.name for cls in DECODERS.values() if cls.speculative and not cls.needs_draft_model
    ]


def default_decoder(backend: Backend) -> str:
    """The decoder an answer runs with when none is chosen or the chosen one cannot run: the
    baseline, or on a backend that cannot run it (a remote server) the first one that can."""
    base = baseline_name()
    if unavailable_reason(base, backend) is None:
        return base
    return next((n for n in DECODERS if unavailable_reason(n, backend) is None), base)


def unavailable_reason(
    name: str, backend: Backend, values: Mapping[str, object] | None = None
) -> str | None:
    """Why decoder `name` cannot run on `backend` with these parameters (None: it can)."""
    cls = decoder_class(name)
    values = values or {}
    reason = cls.unavailable(backend, values)
    if reason is None and cls.needs_draft_model and not values.get("draft"):
        reason = default_draft_reason(backend)
    return reason


def build_decoder(name: str, values: Mapping[str, object], backend: Backend) -> Decoder:
    """A decoder from its registry name and user parameters (text or typed), checked; refused
    with the reason when it cannot run on `backend`. A draft model is loaded here and handed in."""
    cls = decoder_class(name)
    checked = cls.validate(values)
    reason = unavailable_reason(name, backend, checked)
    if reason:
        raise SpecchatError(f"decoder {name!r} is unavailable: {reason}")
    if cls.needs_draft_model:
        options = LoadOptions(backend=checked["draft_backend"], device=checked["draft_device"])
        draft = load_draft(checked["draft"], options, backend)
        return cls(draft_model=draft, **checked)
    return cls(**checked)


def scoped_params(names: list[str], raw: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """`decoder.param=value` goes to that decoder; a bare `param=value` to every decoder in
    `names` that takes it."""
    per: dict[str, dict[str, object]] = {name: {} for name in names}
    for key, value in raw.items():
        scope, _, param = key.rpartition(".")
        if scope and scope not in per:
            raise SpecchatError(f"--param {key}: {scope!r} is not one of the chosen decoders")
        takers = [n for n in names if any(p.name == param for p in DECODERS[n].params)]
        targets = [scope] if scope else takers
        if not targets:
            if len(names) == 1:
                decoder_class(names[0]).param(param)  # says what it takes
            raise SpecchatError(f"--param {key}: no chosen decoder takes {param!r}")
        for name in targets:
            per[name][param] = value
    return per


def checked_params(names: list[str], raw: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """`scoped_params` with every decoder's values checked against its declaration (types,
    ranges, choices, rules between parameters): what a command runs before it loads a model, so
    an out-of-range `-p` of any decoder is one line at once instead of after the load."""
    per = scoped_params(names, raw)
    for name in names:
        decoder_class(name).validate(per[name])
    return per


def sampling_for(
    name: str | None, temperature: float | None, base: SamplingParams
) -> SamplingParams:
    """The sampling settings a decoder runs with: its default temperature unless one is given.
    With no decoder (a race of several), the temperature given or greedy."""
    cls = decoder_class(name) if name is not None else None
    if cls is not None and temperature and not cls.takes_temperature:
        raise SpecchatError(f"{name} never samples: drop --temperature")
    default = cls.default_temperature if cls is not None else 0.0
    chosen = default if temperature is None else temperature
    if chosen < 0:
        raise SpecchatError("--temperature must be ≥ 0")
    if not 0 < base.top_p <= 1:
        raise SpecchatError("--top-p must be in (0, 1]")
    if base.top_k < 0:
        raise SpecchatError("--top-k must be ≥ 0")
    return SamplingParams(temperature=chosen, top_k=base.top_k, top_p=base.top_p, seed=base.seed)
