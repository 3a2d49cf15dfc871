"""Every option of a run, declared once.

A run option — the model and its runtime, the answer's length and sampling, a remote server, how
the chat looks — is one field of `RunConfig`: its type and default are the field's, its help,
flags, bounds and the commands that take it are the `option(...)` beside it. Everything else reads
that declaration: the typer flags of every command (`cli_parameters`), the fields of settings.toml
(`specchat.settings`), the settings dialog's sampling fields, and the checks (`RunOption.parse`).

`resolve(settings, flags, command)` is the one way every entry point — the chat, the line-mode
chat, `ask`, `compare`, `bench` — turns the settings file, the environment (SPECCHAT_THREADS=1
sets `threads`) and the command line into a run's configuration, so settings.toml means the same
everywhere and a flag always wins.
"""

from __future__ import annotations

import inspect
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cache
from typing import Annotated, Any

from specchat.backends.registry import INT4, LOCAL_RUNTIMES, RUNTIMES, SERVER, TRANSFORMERS
from specchat.cpu import LEVELS as CPU_LEVELS
from specchat.decoding.params import Param
from specchat.devices import AUTO, DEVICES
from specchat.errors import SpecchatError

CHAT, ASK, COMPARE, BENCH = "chat", "ask", "compare", "bench"
RUNS = frozenset({CHAT, ASK, COMPARE, BENCH})
MODELS = "models"  # `specchat models`: where models are found, and what runs them at which level
COLOUR_MODES = ("length", "source")  # runs coloured by tokens per step, or by draft source
DEFAULT_THEME = "specchat-safe"
SAMPLING = "sampling"  # the settings file's table for the sampling options
ENV_PREFIX = "SPECCHAT_"  # SPECCHAT_THREADS=1 sets `threads` (between settings.toml and flags)


def _server_url(value: str) -> str:
    from specchat.backends.remote import server_url

    return server_url(value)


@dataclass(frozen=True)
class OptionInfo:
    """What a field of `RunConfig` needs besides its type and default to be an option."""

    help: str
    flags: tuple[str, ...] = ()  # CLI spellings; none given: --the-name
    commands: frozenset[str] = RUNS  # the commands that take it as a flag
    saved: bool = True  # a field of settings.toml
    section: str = ""  # the settings file's table ("" = top level)
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None  # an exclusive lower bound
    choices: tuple[str, ...] = ()
    # where one command measures differently (only for options the settings file does not hold)
    command_defaults: Mapping[str, object] = field(default_factory=dict)
    convert: Callable[[str], str] | None = None  # normalises a text value, or raises SpecchatError
    legacy_unset: object = None  # what older settings files wrote for "not set"


def option(default: Any, help: str, **info: Any) -> Any:
    """A `RunConfig` field that is a run option (see `OptionInfo` for the keywords)."""
    meta = {"option": OptionInfo(help, **info)}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class RunConfig:
    """One run's configuration: every option, with the settings file's values and the flags
    applied by `resolve`. Also what the settings file holds (its saved fields, and `decoders`)."""

    model: str | None = option(
        None,
        "bundled (default), a .gguf path, an HF dir or id, or a name `specchat models` lists "
        "(ollama's qwen2.5:1.5b, an LM Studio file)",
        flags=("--model", "-m"),
    )
    model_folders: list[str] = option(
        [],
        "a folder of GGUF files (any depth) that `specchat models` lists and --model takes by "
        "their path in it (repeatable)",
        flags=("--model-folder",),
        commands=RUNS | {MODELS},
    )
    backend: str | None = option(
        None,
        f"{', '.join(LOCAL_RUNTIMES)} or {SERVER.name} (a remote server); default: the fastest "
        "runtime for the model and decoder",
        choices=tuple(RUNTIMES),
    )
    device: str = option(
        AUTO, "auto (a GPU where the model's runtime sees one, else the CPU), cpu or cuda",
        choices=DEVICES,
    )  # fmt: skip
    threads: int | None = option(
        None,
        "CPU threads (default: the physical cores; at most the CPUs)",
        minimum=1,
        maximum=1024,
        legacy_unset=0,
    )
    cpu: str | None = option(
        None,
        f"cap the instruction set of the {INT4} runtime's kernels and of torch: "
        f"{', '.join(reversed(CPU_LEVELS))} (default: what the CPU has)",
        choices=CPU_LEVELS,
        commands=RUNS | {MODELS},
    )
    n_ctx: int = option(
        4096, "context window in tokens", flags=("--n-ctx",), minimum=16, maximum=1 << 20
    )
    dtype: str = option(
        "float32",
        f"{TRANSFORMERS} backend: the weights' type",
        choices=("float32", "bfloat16", "float16"),
    )
    draft: str | None = option(
        None, "the draft model of the draft decoder (the same as --param draft=SPEC)", saved=False
    )
    base_url: str | None = option(
        None, f"{SERVER.name} backend: the server, e.g. http://127.0.0.1:8080/v1"
    )
    api_key_env: str | None = option(
        None, f"{SERVER.name} backend: the environment variable holding the API key"
    )
    timeout: float = option(
        60.0,
        f"{SERVER.name} backend: seconds the server may stay silent",
        above=0.0,
        maximum=86400.0,
    )
    race_servers: list[str] = option(
        [],
        "a server raced with its own method beside the local decoders, e.g. 127.0.0.1:8080 "
        "(repeatable)",
        flags=("--race-server",),
        commands=frozenset({CHAT, COMPARE}),
        convert=_server_url,
    )
    decoder: str | None = option(
        None,
        "the decoder (default: suffix; draft where a default draft exists, pld where suffix cannot run; on a remote server its own method)",
        flags=("--decoder", "-d"),
        commands=frozenset({CHAT, ASK}),
    )
    race: list[str] = option(
        [],
        "a decoder to race, a variant of one (pld:fixed_draft=10) or a server with its own "
        "method (server@HOST:PORT) (repeatable)",
        flags=("--decoder", "-d"),
        commands=frozenset({COMPARE, BENCH}),
        saved=False,
    )
    llama_server: str | None = option(
        None,
        "llama.cpp's llama-server binary, for bench's peers (default: the one "
        "scripts/llama-server built)",
        commands=frozenset({BENCH}),
    )
    system_prompt: str | None = option(
        None,
        "the system prompt of ask and of new chats (a chat keeps its own: the palette's "
        "'System prompt of this chat')",
        flags=("--system",),
        commands=frozenset({CHAT, ASK}),
    )
    max_tokens: int = option(512, "answer length limit (per turn)", minimum=1, maximum=1 << 20)
    repeats: int = option(
        3,
        "runs per decoder; figures are medians",
        commands=frozenset({COMPARE, BENCH}),
        saved=False,
        minimum=1,
        maximum=1000,
        command_defaults={BENCH: 1},
    )
    temperature: float | None = option(
        None,
        "the decoder's sampling temperature (default: its own)",
        saved=False,
        minimum=0.0,
        maximum=100.0,
    )
    top_k: int = option(0, "sample from the k likeliest tokens (0: off)", section=SAMPLING,
                        minimum=0, maximum=1 << 20)  # fmt: skip
    top_p: float = option(
        1.0, "sample from the likeliest tokens up to this mass (1: off)", section=SAMPLING,
        above=0.0, maximum=1.0,
    )  # fmt: skip
    seed: int | None = option(
        None, "sampling seed (default: random)", section=SAMPLING, minimum=0,
        maximum=(1 << 63) - 1, legacy_unset=-1,
    )  # fmt: skip
    colour_by: str = option(
        "length",
        "colour runs by tokens per step (length) or by where the drafts came from (source)",
        commands=frozenset({ASK}),
        choices=COLOUR_MODES,
    )
    colour_runs: bool = option(True, "colour multi-token runs", commands=frozenset())
    theme: str = option(DEFAULT_THEME, "the chat's theme", commands=frozenset())
    end_loops: bool = option(
        True,
        "end an answer that repeats one span over and over, keeping its text (finish: repeating)",
        flags=("--end-loops/--no-end-loops",),
        commands=frozenset({CHAT, ASK}),
    )
    draft_from_saved_chats: bool = option(
        True, "the saved chats are a draft source (suffix)", commands=frozenset()
    )
    allow_pickle: bool = option(
        False,
        "hf backend: load pickle (.bin) weights, which can run code; only ones you trust",
        saved=False,
    )
    trust_remote_code: bool = option(
        False, "hf backend: run Python code shipped with the model", saved=False
    )
    # per decoder: its registry parameters and an optional "temperature" (settings.toml's
    # [decoders.NAME] tables); not an option of its own
    decoders: dict[str, dict[str, object]] = field(default_factory=dict)

    def decoder_params(self, name: str) -> dict[str, object]:
        """The registry parameters the settings give decoder `name` (its temperature aside)."""
        values = self.decoders.get(name, {})
        return {k: v for k, v in values.items() if k != "temperature"}

    def temperature_for(self, name: str) -> float | None:
        """The temperature of this run for decoder `name`: --temperature, else the settings'."""
        if self.temperature is not None:
            return self.temperature
        value = self.decoders.get(name, {}).get("temperature")
        return None if value is None else float(value)


@dataclass(frozen=True)
class RunOption:
    """A `RunConfig` field read as an option: name, type, default and its `OptionInfo`."""

    name: str
    kind: type  # int, float, bool or str (of each item when repeatable)
    optional: bool
    repeatable: bool
    default: object
    info: OptionInfo

    @property
    def flags(self) -> tuple[str, ...]:
        return self.info.flags or ("--" + self.name.replace("_", "-"),)

    @property
    def settings_key(self) -> str:
        return f"{self.info.section}.{self.name}" if self.info.section else self.name

    def default_for(self, command: str) -> object:
        return self.info.command_defaults.get(command, self.default)

    def param(self) -> Param:
        info = self.info
        return Param(
            self.name,
            self.kind,
            self.default,
            info.help,
            minimum=info.minimum,
            maximum=info.maximum,
            above=info.above,
            choices=info.choices,
            optional=self.optional,
        )

    def parse(self, value: object, label: str, *, saved: bool = False) -> object:
        """The checked value of `value` (typed, or text), or a one-line SpecchatError that names
        it as `label` (a flag, or a settings key). `saved`: read from the settings file, where
        an older version's "not set" (`legacy_unset`) still means not set; a flag or variable
        giving that value is checked like any other."""
        if self.repeatable:
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list | tuple):
                raise SpecchatError(f"{label} must be a list, not {value!r}")
            return [self._one(item, label) for item in items]
        if saved and value is not None and value == self.info.legacy_unset and self.optional:
            return None
        if self.kind is str and self.optional and value == "":
            return None
        return self._one(value, label)

    def _one(self, value: object, label: str) -> object:
        parsed = self.param().parse(value, label=label)
        if self.info.convert is not None and parsed is not None:
            try:
                parsed = self.info.convert(str(parsed))
            except SpecchatError as exc:
                raise SpecchatError(f"{label}: {exc}") from None
        return parsed


def _unwrap(annotation: Any) -> tuple[type, bool, bool]:
    """(item type, optional, repeatable) of a field annotation such as `int | None`."""
    optional = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        annotation = args[0]
    if typing.get_origin(annotation) is list:
        return typing.get_args(annotation)[0], optional, True
    return annotation, optional, False


@cache
def run_options() -> dict[str, RunOption]:
    """Every option, by name, in declaration order."""
    hints = typing.get_type_hints(RunConfig)
    found = {}
    for item in fields(RunConfig):
        info = item.metadata.get("option")
        if info is None:
            continue
        kind, optional, repeatable = _unwrap(hints[item.name])
        made = item.default_factory is not MISSING
        default = item.default_factory() if made else item.default
        found[item.name] = RunOption(item.name, kind, optional, repeatable, default, info)
    return found


def options_of(command: str) -> list[RunOption]:
    """The options `command` takes as flags."""
    return [o for o in run_options().values() if command in o.info.commands]


def saved_options() -> list[RunOption]:
    """The options settings.toml holds."""
    return [o for o in run_options().values() if o.info.saved]


def env_name(name: str) -> str:
    """The environment variable that sets option `name` (SPECCHAT_THREADS for threads)."""
    return f"{ENV_PREFIX}{name.upper()}"


def resolve(
    settings: RunConfig,
    flags: Mapping[str, object],
    command: str,
    environ: Mapping[str, str] | None = None,
) -> RunConfig:
    """The configuration of one run of `command`: the settings file's values, the command's own
    defaults where it measures differently, the environment's SPECCHAT_NAME variables, then
    every flag that was given (None: not given); each checked with where it came from named in
    any message."""
    environ = os.environ if environ is None else environ
    options = run_options()
    changes: dict[str, object] = {}
    for name, item in options.items():
        if not item.info.saved and command in item.info.command_defaults:
            changes[name] = item.default_for(command)
        text = environ.get(env_name(name))
        if text is not None and text.strip():
            value = [part.strip() for part in text.split(",")] if item.repeatable else text
            changes[name] = item.parse(value, env_name(name))
    for name, value in flags.items():
        if value is None or (isinstance(value, list | tuple) and not value):
            continue
        item = options[name]
        changes[name] = item.parse(value, item.flags[0])
    return replace(settings, **changes)


def cli_parameters(command: str) -> list[inspect.Parameter]:
    """The typer parameters of `command`'s options: each defaults to None ("not given") so the
    settings file decides what a flag does not."""
    import typer

    parameters = []
    for item in options_of(command):
        kind = list[item.kind] if item.repeatable else item.kind
        default = item.default_for(command)
        shown = "" if default in (None, "", [], False) else f" (default: {default})"
        help_text = item.info.help + shown
        typed = kind if item.kind is bool else kind | None  # a bool is a flag: given or not
        annotation = Annotated[typed, typer.Option(*item.flags, help=help_text)]
        parameters.append(
            inspect.Parameter(
                item.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
            )
        )
    return parameters
