"""The user's settings in `settings.toml` under the config dir: model, backend (with a remote
server's URL and API key variable), device, the default decoder with its parameters, sampling,
theme, how runs are coloured, whether drafters may read the saved chats.

CLI flags override what the file says. A broken file never stops the app: `load_settings` returns
the defaults together with a one-line message saying what is wrong, and the app shows it. Writes go
to a temporary file that replaces the old one, so a crash mid-write never leaves half a file.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import tomllib

from specchat.errors import SpecchatError
from specchat.locations import config_dir

SETTINGS_FILE = "settings.toml"
DEFAULT_THEME = "specchat-safe"
COLOUR_MODES = ("length", "source")  # runs coloured by tokens per step, or by draft source
_SCALARS = (bool, int, float, str)


@dataclass
class Settings:
    model: str | None = None
    backend: str | None = None
    base_url: str | None = None  # backend "openai": the server, e.g. http://127.0.0.1:8080/v1
    api_key_env: str | None = None  # backend "openai": the variable that holds the API key
    # servers the race screen offers beside the local decoders (server@URL panes)
    race_servers: list[str] = field(default_factory=list)
    device: str = "cpu"
    threads: int | None = None  # CPU threads for the model; None: all cores
    decoder: str = ""  # empty: the registry's baseline
    theme: str = DEFAULT_THEME
    max_tokens: int = 512
    colour_runs: bool = True
    colour_by: str = "length"  # one of COLOUR_MODES
    # the saved chats are a draft source (the suffix decoder's); off: never read for drafting
    draft_from_saved_chats: bool = True
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    # per decoder: its registry parameters plus an optional "temperature"
    decoders: dict[str, dict[str, object]] = field(default_factory=dict)

    def decoder_params(self, name: str) -> dict[str, object]:
        """The registry parameters the user set for `name` (temperature excluded)."""
        return {k: v for k, v in self.decoders.get(name, {}).items() if k != "temperature"}

    def temperature(self, name: str) -> float | None:
        value = self.decoders.get(name, {}).get("temperature")
        return None if value is None else float(value)

    def with_overrides(self, **overrides: object) -> Settings:
        """A copy with the CLI's flags applied (None means "not given")."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


def settings_path() -> Path:
    return config_dir() / SETTINGS_FILE


def _expect(data: dict, key: str, kinds: tuple[type, ...], default: object) -> object:
    if key not in data:
        return default
    value = data[key]
    if isinstance(value, bool) and bool not in kinds:
        raise ValueError(f"{key} must be a {kinds[0].__name__}, not {value!r}")
    if not isinstance(value, kinds):
        raise ValueError(f"{key} must be a {kinds[0].__name__}, not {value!r}")
    return value


def parse_settings(text: str) -> Settings:
    """Settings from TOML text; raises ValueError with a readable reason."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML ({exc})") from None
    defaults = Settings()
    sampling = data.get("sampling", {})
    if not isinstance(sampling, dict):
        raise ValueError("[sampling] must be a table")
    decoders = data.get("decoders", {})
    if not isinstance(decoders, dict) or not all(isinstance(v, dict) for v in decoders.values()):
        raise ValueError("[decoders.NAME] entries must be tables")
    for name, values in decoders.items():
        for key, value in values.items():
            if not isinstance(value, _SCALARS):
                raise ValueError(f"decoders.{name}.{key} must be a number, string or boolean")
        _check_decoder_values(name, values)
    model = _expect(data, "model", (str,), "") or None
    backend = _expect(data, "backend", (str,), "") or None
    base_url = _expect(data, "base_url", (str,), "") or None
    api_key_env = _expect(data, "api_key_env", (str,), "") or None
    from specchat.decoding.variants import server_url

    race_servers = []
    for url in _expect(data, "race_servers", (list,), []):
        if not isinstance(url, str):
            raise ValueError(f"race_servers must list URLs, not {url!r}")
        try:
            race_servers.append(server_url(url))
        except SpecchatError as exc:
            raise ValueError(f"race_servers: {exc}") from None
    seed = _expect(sampling, "seed", (int,), -1)
    threads = _expect(data, "threads", (int,), 0)
    settings = Settings(
        model=model,
        backend=backend,
        base_url=base_url,
        api_key_env=api_key_env,
        race_servers=race_servers,
        device=str(_expect(data, "device", (str,), defaults.device)),
        threads=int(threads) if threads and threads > 0 else None,
        decoder=str(_expect(data, "decoder", (str,), defaults.decoder)),
        theme=str(_expect(data, "theme", (str,), defaults.theme)),
        max_tokens=int(_expect(data, "max_tokens", (int,), defaults.max_tokens)),
        colour_runs=bool(_expect(data, "colour_runs", (bool,), defaults.colour_runs)),
        colour_by=str(_expect(data, "colour_by", (str,), defaults.colour_by)),
        draft_from_saved_chats=bool(
            _expect(data, "draft_from_saved_chats", (bool,), defaults.draft_from_saved_chats)
        ),
        top_k=int(_expect(sampling, "top_k", (int,), defaults.top_k)),
        top_p=float(_expect(sampling, "top_p", (float, int), defaults.top_p)),
        seed=None if seed is None or seed < 0 else int(seed),
        decoders={name: dict(values) for name, values in decoders.items()},
    )
    if settings.max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    if settings.device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, not {settings.device!r}")
    if settings.colour_by not in COLOUR_MODES:
        raise ValueError(f"colour_by must be one of {', '.join(COLOUR_MODES)}")
    return settings


def load_settings(path: Path | None = None) -> tuple[Settings, str | None]:
    """The saved settings, or the defaults and a one-line reason when the file is unusable."""
    path = path or settings_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Settings(), None
    except (OSError, UnicodeDecodeError) as exc:
        return Settings(), f"could not read {path}: {exc}; using defaults"
    try:
        return parse_settings(text), None
    except ValueError as exc:
        return Settings(), f"{path} is broken: {exc}; using defaults"


def _toml_value(value: object) -> str:
    if isinstance(value, list):
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

    cls = DECODERS.get(name)
    if cls is None:
        return
    params = {k: v for k, v in values.items() if k != "temperature"}
    try:
        cls.validate(params)
    except SpecchatError as exc:
        raise ValueError(f"[decoders.{name}]: {exc}") from None
    temperature = values.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0
    ):
        raise ValueError(f"decoders.{name}.temperature must be a number ≥ 0")


def dump_settings(settings: Settings) -> str:
    """TOML text for `settings` (the subset of TOML that `parse_settings` reads back)."""
    lines = ["# specchat settings; command-line flags override these.", ""]
    top = {
        "model": settings.model or "",
        "backend": settings.backend or "",
        "base_url": settings.base_url or "",
        "api_key_env": settings.api_key_env or "",
        "race_servers": settings.race_servers,
        "device": settings.device,
        "threads": settings.threads or 0,
        "decoder": settings.decoder,
        "theme": settings.theme,
        "max_tokens": settings.max_tokens,
        "colour_runs": settings.colour_runs,
        "colour_by": settings.colour_by,
        "draft_from_saved_chats": settings.draft_from_saved_chats,
    }
    lines += [f"{key} = {_toml_value(value)}" for key, value in top.items()]
    lines += ["", "[sampling]", f"top_k = {settings.top_k}", f"top_p = {settings.top_p!r}"]
    lines.append(f"seed = {-1 if settings.seed is None else settings.seed}  # -1: random")
    for name, values in sorted(settings.decoders.items()):
        clean = {k: v for k, v in values.items() if v is not None}
        if not clean:
            continue
        lines += ["", f"[decoders.{_toml_key(name)}]"]
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in clean.items()]
    return "\n".join(lines) + "\n"


def save_settings(settings: Settings, path: Path | None = None) -> Path:
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
