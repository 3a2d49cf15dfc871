"""A run's configuration resolved for its decoders: each one's parameters (defaults, settings,
`--param`, `--draft`) and the sampling it runs with.

It sits above both the decoders (whose declarations check the values) and the run options
(`options.RunConfig`): decoding itself never reads a run's configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from specchat.backends.base import Backend
from specchat.decoding.registry import DECODERS, decoder_class, default_decoder, scoped_params
from specchat.decoding.sampling import SamplingParams
from specchat.errors import SpecchatError
from specchat.options import RunConfig


def run_params(
    names: list[str], config: RunConfig, raw: Mapping[str, object] | None = None
) -> dict[str, dict[str, object]]:
    """Each decoder's parameters in a run: its defaults, the settings' [decoders.NAME], then
    `--param` (`raw`), and --draft for a decoder that drafts with a model; checked against each
    declaration, so a bad value is one line before any model loads."""
    per = scoped_params(names, raw or {})
    result = {}
    for name in names:
        cls = decoder_class(name)
        values = {**config.decoder_params(name), **per[name]}
        if config.draft and cls.needs_draft_model and "draft" not in per[name]:
            values["draft"] = config.draft
        result[name] = cls.validate(values)
    return result


def with_params(config: RunConfig, raw: Mapping[str, object]) -> RunConfig:
    """The chat's `--param`: a bare `name=value` goes to every decoder that takes it (the chat
    can switch to any), `decoder.name=value` to that one; checked before the model loads and
    kept for this run only (never written to settings.toml)."""
    if not raw:
        return config
    names = list(DECODERS)
    per = scoped_params(names, raw)
    decoders = {**config.decoders}
    for name, values in per.items():
        if values:
            decoders[name] = {**decoders.get(name, {}), **values}
    changed = replace(config, decoders=decoders)
    run_params(names, changed)  # one line for a value a decoder refuses
    return changed


def sampling_for(name: str | None, config: RunConfig) -> SamplingParams:
    """The sampling decoder `name` runs with: its temperature from --temperature or the
    settings, else the decoder's own default; top-k, top-p and seed from the run. With no decoder
    (a race of several), the temperature given or greedy."""
    cls = decoder_class(name) if name is not None else None
    temperature = config.temperature_for(name) if name is not None else config.temperature
    if cls is not None and temperature and not cls.takes_temperature:
        if config.temperature is None:  # not a flag: the settings file's [decoders.NAME] table
            raise SpecchatError(
                f"{name} never samples, but settings.toml's [decoders.{name}] sets "
                f"temperature = {temperature}: remove that line"
            )
        raise SpecchatError(f"{name} never samples: drop --temperature")
    default = cls.default_temperature if cls is not None else 0.0
    chosen = default if temperature is None else temperature
    return SamplingParams(
        temperature=chosen, top_k=config.top_k, top_p=config.top_p, seed=config.seed
    )


def chosen_decoder(config: RunConfig, backend: Backend | None = None) -> str:
    """The decoder a run answers with: the one the flag or the settings chose, else `backend`'s
    default (`registry.default_decoder`: suffix where its trees are built, a draft model's where
    a default draft exists, a remote server's own method). One rule for `ask`, the line-mode
    chat and the chat."""
    return config.decoder or default_decoder(backend)
