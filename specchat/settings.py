"""The user's settings: `settings.toml` under the config dir holds the saved fields of a
`RunConfig` (`specchat.options` declares them: model, backend, device, sampling, theme, …) and
`[decoders.NAME]` tables of decoder parameters.

`options.resolve` applies the command line on top, the same way for every command. A broken file
never stops the app: `load_settings` returns the defaults together with a one-line message saying
what is wrong, and the app shows it. Writes go to a temporary file that replaces the old one, so a
crash mid-write never leaves half a file.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import tomllib

from specchat.errors import SpecchatError
from specchat.locations import config_dir
from specchat.options import RunConfig, RunOption, saved_options

SETTINGS_FILE = "settings.toml"
_SCALARS = (bool, int, float, str)


def settings_path() -> Path:
    return config_dir() / SETTINGS_FILE


def _table(data: dict, name: str) -> dict:
    table = data.get(name, {})
    if not isinstance(table, dict):
        raise ValueError(f"[{name}] must be a table")
    return table


def _read(option: RunOption, table: dict) -> object:
    """The option's value from its table, checked; its default when absent."""
    if option.name not in table:
        return option.default
    try:
        return option.parse(table[option.name], option.settings_key, saved=True)
    except SpecchatError as exc:
        raise ValueError(str(exc)) from None


def parse_settings(text: str) -> RunConfig:
    """Settings from TOML text; raises ValueError with a readable reason."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML ({exc})") from None
    decoders = data.get("decoders", {})
    if not isinstance(decoders, dict) or not all(isinstance(v, dict) for v in decoders.values()):
        raise ValueError("[decoders.NAME] entries must be tables")
    for name, values in decoders.items():
        for key, value in values.items():
            if not isinstance(value, _SCALARS):
                raise ValueError(f"decoders.{name}.{key} must be a number, string or boolean")
        _check_decoder_values(name, values)
    values = {
        option.name: _read(
            option, _table(data, option.info.section) if option.info.section else data
        )
        for option in saved_options()
    }
    return RunConfig(**values, decoders={name: dict(v) for name, v in decoders.items()})


def load_settings(path: Path | None = None) -> tuple[RunConfig, str | None]:
    """The saved settings, or the defaults and a one-line reason when the file is unusable."""
    path = path or settings_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return RunConfig(), None
    except (OSError, UnicodeDecodeError) as exc:
        return RunConfig(), f"could not read {path}: {exc}; using defaults"
    try:
        return parse_settings(text), None
    except ValueError as exc:
        return RunConfig(), f"{path} is broken: {exc}; using defaults"


def _toml_value(value: object) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else _toml_value(key)


def _check_decoder_values(name: str, values: dict[str, object]) -> None:
    """A known decoder's parameters are checked by its own declaration (a section for a decoder
    this version does not have is kept, unused)."""
    from specchat.decoding.registry import DECODERS
    from specchat.options import run_options

    cls = DECODERS.get(name)
    if cls is None:
        return
    params = {k: v for k, v in values.items() if k != "temperature"}
    try:
        cls.validate(params)
        if values.get("temperature") is not None:
            run_options()["temperature"].parse(
                values["temperature"], f"decoders.{name}.temperature"
            )
    except SpecchatError as exc:
        raise ValueError(f"[decoders.{name}]: {exc}") from None


def _lines(settings: RunConfig, section: str) -> list[str]:
    """`key = value` for the options of one table; an unset one as a comment with its help."""
    lines = []
    for option in saved_options():
        if option.info.section != section:
            continue
        value = getattr(settings, option.name)
        if value is None:
            lines.append(f"# {option.name} =   # {option.info.help}")
        else:
            lines.append(f"{option.name} = {_toml_value(value)}")
    return lines


def dump_settings(settings: RunConfig) -> str:
    """TOML text for the saved fields of `settings` (what `parse_settings` reads back)."""
    lines = ["# specchat settings; command-line flags override these.", ""]
    lines += _lines(settings, "")
    for section in dict.fromkeys(o.info.section for o in saved_options() if o.info.section):
        lines += ["", f"[{section}]", *_lines(settings, section)]
    for name, values in sorted(settings.decoders.items()):
        clean = {k: v for k, v in values.items() if v is not None}
        if not clean:
            continue
        lines += ["", f"[decoders.{_toml_key(name)}]"]
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in clean.items()]
    return "\n".join(lines) + "\n"


def save_settings(settings: RunConfig, path: Path | None = None) -> Path:
    """Write atomically: a temporary file in the same folder, then os.replace."""
    path = path or settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".settings-", suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(dump_settings(settings))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
