"""The one list of decoders: the CLI, the TUI's keys, settings and the benchmark all read it.

Each decoder class declares itself (name, key, description, typed parameters, what kind it is);
adding a decoder is writing its class and one `register` line. No decoder name appears anywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from specchat.backends.base import Backend, is_server
from specchat.backends.registry import SERVER
from specchat.bundled import default_draft_reason, is_bundled
from specchat.decoding.base import Decoder
from specchat.decoding.beam import BeamSearchDecoder
from specchat.decoding.draft_model import DraftModelDecoder
from specchat.decoding.draft_policy import break_even_acceptance
from specchat.decoding.lookahead import LookaheadDecoder
from specchat.decoding.plain import GreedyDecoder, SampleDecoder
from specchat.decoding.prompt_lookup import PromptLookupDecoder
from specchat.decoding.server import ServerDecoder
from specchat.decoding.suffix import SuffixDecoder
from specchat.errors import SpecchatError

DECODERS: dict[str, type[Decoder]] = {}
# How a decoder that drafts with a model gets it: (spec, runtime, device, target) -> the draft,
# loaded beside the target (`models.load_draft`); decoding never loads a model itself.
DraftLoader = Callable[[str | None, str | None, str, Backend], Backend]


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
    speculative decoder that needs nothing more than the model, and the backend's default where
    that is another (a draft model's, on transformers); on a remote server, the server's own
    method."""
    if backend is not None and is_server(backend):
        return [n for n, cls in DECODERS.items() if cls.needs_server]
    race = [baseline_name()] + [
        cls.name for cls in DECODERS.values() if cls.speculative and not cls.needs_draft_model
    ]
    default = default_decoder(backend)
    return race if default in race else [*race, default]


def default_decoder(backend: Backend | None = None) -> str:
    """The decoder an answer runs with when none is chosen or the chosen one cannot run: the
    available one of the highest `default_rank` — speculative and exact, so the first answer
    that copies anything is coloured (suffix where its trees are built, else pld) — or on a
    backend that runs none of them (a remote server) the first one that can. Without a backend,
    the one it would be on a model specchat runs."""
    ranked = sorted(DECODERS.values(), key=lambda cls: -cls.default_rank)
    for cls in ranked:
        if not cls.default_rank:
            break
        if backend is None:  # no draft model is a default before the model is known
            if cls.unavailable_anywhere() is None and not cls.needs_draft_model:
                return cls.name
        elif cls.needs_draft_model and not is_bundled(backend) and not found_draft_pays(backend):
            continue  # a server has no drafts, and a found draft too dear is only offered
        elif unavailable_reason(cls.name, backend) is None:
            return cls.name
    base = baseline_name()
    if backend is None or unavailable_reason(base, backend) is None:
        return base
    return next((n for n in DECODERS if unavailable_reason(n, backend) is None), base)


# A draft found among the user's models is the default where it would gain at this acceptance:
# what a draft of the target's family reaches on most text (the draft decoder's prior is 0.8).
# Then the policy learns the pair's own acceptance from the first answer, and drafts with the
# model only while that pays; below it the answer runs as `suffix` would.
FOUND_DRAFT_ACCEPTANCE = 0.6


def found_draft_pays(backend: Backend) -> bool:
    """Whether the draft that `draft` finds for this GGUF (`models.smaller_sibling`) would pay
    at `FOUND_DRAFT_ACCEPTANCE`, by the target's measured pass costs and the draft's size: a
    pass reads every weight once, so a draft's pass costs about its file's share of the
    target's (135M Q4_1 for an F32 copy of it: 0.18 by size, 0.22 measured)."""
    find = getattr(backend, "find_draft", None)
    path = getattr(backend, "model_path", None)
    found = find() if find is not None and path else None
    if found is None:
        return False
    try:
        share = found.stat().st_size / max(1, Path(path).stat().st_size)
    except OSError:  # moved since it was listed: `draft` says so if asked
        return False
    return break_even_acceptance(backend, share) <= FOUND_DRAFT_ACCEPTANCE


def speculates(name: str | None) -> bool:
    """Whether decoder `name` (None: the default) drafts: the runtime is then chosen for cheap
    blocks rather than the cheapest single pass."""
    return decoder_class(name or default_decoder()).speculative


def unavailable_reason(
    name: str, backend: Backend, values: Mapping[str, object] | None = None
) -> str | None:
    """Why decoder `name` cannot run on `backend` with these parameters (None: it can)."""
    cls = decoder_class(name)
    values = values or {}
    local = not is_server(backend)
    if cls.needs_logits and not local:
        return "it needs the model's logits, which this backend does not expose"
    if cls.needs_server and local:
        return f"it is a remote server's own method: use --backend {SERVER.name} --base-url URL"
    reason = cls.unavailable(backend, values)
    if reason is None and cls.needs_draft_model and not values.get("draft"):
        reason = default_draft_reason(backend)
    return reason


def build_decoder(
    name: str,
    values: Mapping[str, object],
    backend: Backend,
    drafts: DraftLoader | None = None,
) -> Decoder:
    """A decoder from its registry name and user parameters (text or typed), checked; refused
    with the reason when it cannot run on `backend`. A decoder that drafts with a model is
    handed the one `drafts` loads (`answers.make_decoder` passes the loader)."""
    cls = decoder_class(name)
    checked = cls.validate(values)
    reason = unavailable_reason(name, backend, checked)
    if reason:
        raise SpecchatError(f"decoder {name!r} is unavailable: {reason}")
    if cls.needs_draft_model:
        if drafts is None:
            raise SpecchatError(f"decoder {name!r} needs a draft model and none can be loaded here")
        draft = drafts(checked["draft"], checked["draft_backend"], checked["draft_device"], backend)
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
