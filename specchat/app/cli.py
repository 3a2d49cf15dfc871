"""The `specchat` command: the chat app, `ask`, `models`, `chats`. Errors: one line, exit code 2."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from specchat import __version__
from specchat.errors import SpecchatError
from specchat.models import LoadOptions

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    invoke_without_command=True,
    help="A terminal chat for local LLMs that makes fast (speculative) decoding visible.",
    pretty_exceptions_enable=False,
)

ModelOpt = Annotated[
    str | None,
    typer.Option("--model", "-m", help="bundled (default), a .gguf path, an HF dir or id"),
]
BackendOpt = Annotated[
    str | None, typer.Option("--backend", help="llama, hf, int4 (a GGUF on torch's 4-bit kernel), or openai (a remote server)")
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option("--base-url", help="openai backend: the server, e.g. http://127.0.0.1:8080/v1"),
]
ApiKeyEnvOpt = Annotated[
    str | None,
    typer.Option("--api-key-env", help="openai backend: environment variable with the API key"),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option("--timeout", help="openai backend: seconds of server silence before giving up"),
]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu or cuda")]
ThreadsOpt = Annotated[int | None, typer.Option("--threads", help="CPU threads (default: cores)")]
CtxOpt = Annotated[int, typer.Option("--n-ctx", help="context window in tokens")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="hf backend: float32, bfloat16, float16")]
TemperatureOpt = Annotated[float | None, typer.Option("--temperature")]
TopKOpt = Annotated[int, typer.Option("--top-k")]
TopPOpt = Annotated[float, typer.Option("--top-p")]
SeedOpt = Annotated[int | None, typer.Option("--seed")]
ParamOpt = Annotated[
    list[str], typer.Option("--param", "-p", help="name=value or decoder.name=value (repeatable)")
]
AllowPickleOpt = Annotated[
    bool,
    typer.Option(
        "--allow-pickle",
        help="hf backend: load pickle (.bin) weights, which can run code; only ones you trust",
    ),
]
TrustCodeOpt = Annotated[
    bool,
    typer.Option("--trust-remote-code", help="hf backend: run Python code shipped with the model"),
]
DraftOpt = Annotated[
    str | None, typer.Option("--draft", help="draft model: the same as --param draft=SPEC")
]


def _progress(message: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\x1b[2K{message}…")
        sys.stderr.flush()


def _progress_done() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[2K")
        sys.stderr.flush()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"specchat {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="show the version")
    ] = False,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    # None: the settings file decides (a "cpu" default would always override it)
    device: Annotated[str | None, typer.Option("--device", help="cpu or cuda")] = None,
    draft: Annotated[str | None, typer.Option("--draft", help="draft model spec")] = None,
    base_url: BaseUrlOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    race_server: Annotated[
        list[str] | None,
        typer.Option(
            "--race-server",
            help="a server the race screen (Ctrl+B) offers beside the local decoders, "
            "e.g. 127.0.0.1:8080 (repeatable)",
        ),
    ] = None,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustCodeOpt = False,
) -> None:
    """Without a command: open the chat."""
    if ctx.invoked_subcommand is not None:
        return
    from specchat.app.tui import open_chat
    from specchat.decoding.variants import server_url

    open_chat(
        race_servers=[server_url(url) for url in race_server] if race_server else None,
        model=model,
        backend=backend,
        device=device,
        draft=draft,
        base_url=base_url,
        api_key_env=api_key_env,
        allow_pickle=allow_pickle,
        trust_remote_code=trust_remote_code,
    )


def _parse_params(values: list[str], draft: str | None = None) -> dict[str, object]:
    """`--param` items as {[decoder.]name: value}; `--draft X` is `--param draft=X`."""
    params: dict[str, object] = {} if draft is None else {"draft": draft}
    for item in values:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise SpecchatError(f"--param takes name=value, got {item!r}")
        try:
            value: object = json.loads(raw)
        except ValueError:
            value = raw
        params[name.strip().replace("-", "_")] = value
    return params


@app.command()
def ask(
    prompt: Annotated[str, typer.Argument(help="the question (or text to continue with --raw)")],
    decoder: Annotated[
        str | None,
        typer.Option("--decoder", "-d", help="decoder name (default: greedy; remote: server)"),
    ] = None,
    model: ModelOpt = None,
    backend: BackendOpt = None,
    device: DeviceOpt = "cpu",
    threads: ThreadsOpt = None,
    n_ctx: CtxOpt = 4096,
    dtype: DtypeOpt = "float32",
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="answer length limit")] = 512,
    temperature: TemperatureOpt = None,
    top_k: TopKOpt = 0,
    top_p: TopPOpt = 1.0,
    seed: SeedOpt = None,
    draft: DraftOpt = None,
    param: ParamOpt = [],  # noqa: B006 - typer reads the default
    system: Annotated[str | None, typer.Option("--system", help="system prompt")] = None,
    stop: Annotated[list[str], typer.Option("--stop", help="stop string (repeatable)")] = [],  # noqa: B006
    raw: Annotated[bool, typer.Option("--raw", help="no chat template: continue the text")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON Lines events on stdout")] = False,
    no_log: Annotated[
        bool, typer.Option("--no-log", help="do not record the exchange in the chat store")
    ] = False,
    colour_by: Annotated[
        str | None,
        typer.Option("--colour-by", help="colour runs by length or source (default: settings)"),
    ] = None,
    base_url: BaseUrlOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    timeout: TimeoutOpt = None,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustCodeOpt = False,
) -> None:
    """Stream one answer to stdout; multi-token speculative steps are coloured. The exchange is
    recorded in the chat store (a draft source for later answers) unless --no-log."""
    from specchat.app.ask import run_ask
    from specchat.decoding.registry import decoder_class
    from specchat.decoding.sampling import SamplingParams
    from specchat.prompting import checked_prompt

    checked_prompt(prompt)
    if decoder is not None:
        decoder_class(decoder)
    if max_tokens < 1:
        raise SpecchatError("--max-tokens must be at least 1")
    from specchat.settings import COLOUR_MODES, load_settings

    settings, broken = load_settings()
    if broken:  # a broken settings file never stops an answer; the defaults are used
        typer.echo(f"specchat: warning: {broken}", err=True)
    if colour_by is None:
        colour_by = settings.colour_by
    if colour_by not in COLOUR_MODES:
        raise SpecchatError(f"--colour-by takes {' or '.join(COLOUR_MODES)}")
    code = run_ask(
        prompt,
        decoder=decoder,
        raw_params=_parse_params(param, draft),
        model=model,
        load_options=LoadOptions(
            backend,
            device,
            threads,
            n_ctx,
            dtype,
            base_url,
            api_key_env,
            timeout,
            allow_pickle,
            trust_remote_code,
        ),
        max_tokens=max_tokens,
        temperature=temperature,
        sampling=SamplingParams(top_k=top_k, top_p=top_p, seed=seed),
        system=system,
        stop=tuple(stop),
        raw=raw,
        as_json=as_json,
        progress=_progress,
        progress_done=_progress_done,
        log=not no_log,
        colour_by=colour_by,
    )
    raise typer.Exit(code)


@app.command()
def compare(
    prompt: Annotated[str, typer.Argument(help="the question raced through every decoder")],
    decoder: Annotated[
        list[str],
        typer.Option(
            "--decoder",
            "-d",
            help="decoder to race, a variant of one (pld:fixed_draft=10), or a server with "
            "its own method (server@HOST:PORT) (repeatable)",
        ),
    ] = [],  # noqa: B006
    model: ModelOpt = None,
    backend: BackendOpt = None,
    device: DeviceOpt = "cpu",
    threads: ThreadsOpt = None,
    n_ctx: CtxOpt = 4096,
    dtype: DtypeOpt = "float32",
    max_tokens: Annotated[int, typer.Option("--max-tokens")] = 256,
    repeats: Annotated[int, typer.Option("--repeats", help="runs per decoder (median)")] = 3,
    temperature: TemperatureOpt = None,
    top_k: TopKOpt = 0,
    top_p: TopPOpt = 1.0,
    seed: SeedOpt = None,
    param: ParamOpt = [],  # noqa: B006
    draft: DraftOpt = None,
    raw: Annotated[bool, typer.Option("--raw", help="no chat template")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
    base_url: Annotated[
        list[str],
        typer.Option(
            "--base-url",
            help="a remote server to race with its own method (repeatable); with --backend "
            "openai the first one is the race's backend",
        ),
    ] = [],  # noqa: B006
    api_key_env: ApiKeyEnvOpt = None,
    timeout: TimeoutOpt = None,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustCodeOpt = False,
) -> None:
    """Race decoders on one prompt: tok/s, speedup vs greedy, tokens/step, acceptance, exactness."""
    from specchat.app.compare import run_compare
    from specchat.decoding.sampling import SamplingParams
    from specchat.prompting import checked_prompt

    checked_prompt(prompt)
    if repeats < 1 or max_tokens < 1:
        raise SpecchatError("--repeats and --max-tokens must be at least 1")
    params = _parse_params(param, draft)
    run_compare(
        prompt,
        decoders=decoder,
        params=params,
        model=model,
        load_options=LoadOptions(
            backend,
            device,
            threads,
            n_ctx,
            dtype,
            api_key_env=api_key_env,
            timeout=timeout,
            allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code,
        ),
        max_tokens=max_tokens,
        repeats=repeats,
        temperature=temperature,
        sampling=SamplingParams(top_k=top_k, top_p=top_p, seed=seed),
        raw=raw,
        as_json=as_json,
        progress=_progress,
        progress_done=_progress_done,
        server_urls=tuple(base_url),
    )


@app.command()
def bench(
    data: Annotated[
        str | None,
        typer.Option("--data", help="Spec-Bench JSON Lines file (default: the bundled dev half)"),
    ] = None,
    decoder: Annotated[
        list[str], typer.Option("--decoder", "-d", help="decoder to measure (repeatable)")
    ] = [],  # noqa: B006
    model: ModelOpt = None,
    backend: BackendOpt = None,
    device: DeviceOpt = "cpu",
    threads: ThreadsOpt = None,
    dtype: DtypeOpt = "float32",
    categories: Annotated[
        str | None, typer.Option("--categories", help="comma-separated categories")
    ] = None,
    limit_per_category: Annotated[int | None, typer.Option("--limit-per-category")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="per turn")] = 256,
    repeats: Annotated[int, typer.Option("--repeats", help="runs per answer (median)")] = 1,
    param: ParamOpt = [],  # noqa: B006
    draft: DraftOpt = None,
    json_out: Annotated[
        str | None, typer.Option("--json", help="write results to this file")
    ] = None,
    markdown_out: Annotated[
        str | None, typer.Option("--markdown", help="write a Markdown report to this file")
    ] = None,
    peers: Annotated[bool, typer.Option("--peers", help="add the libraries' own methods")] = False,
    history: Annotated[
        bool,
        typer.Option(
            "--history",
            help="one long history: each question a chat, earlier ones saved (a temporary "
            "store) for decoders that draft from saved chats",
        ),
    ] = False,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustCodeOpt = False,
) -> None:
    """Speedup of decoders over greedy per category, as Spec-Bench measures it."""
    from specchat.app.bench import run_bench

    if repeats < 1 or max_tokens < 1:
        raise SpecchatError("--repeats and --max-tokens must be at least 1")
    if limit_per_category is not None and limit_per_category < 1:
        raise SpecchatError("--limit-per-category must be at least 1")
    params = _parse_params(param, draft)
    run_bench(
        data=data,
        decoders=decoder,
        params=params,
        model=model,
        load_options=LoadOptions(
            backend,
            device,
            threads,
            dtype=dtype,
            allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code,
        ),
        categories=[c.strip() for c in categories.split(",")] if categories else None,
        limit_per_category=limit_per_category,
        max_tokens=max_tokens,
        repeats=repeats,
        json_out=json_out,
        markdown_out=markdown_out,
        peers=peers,
        command="specchat bench " + " ".join(sys.argv[2:]),
        history=history,
    )


@app.command()
def models() -> None:
    """List the models specchat can open here; the default is marked."""
    from specchat.models import list_models

    for listing in list_models():
        mark = "*" if listing.is_default else " "
        typer.echo(f"{mark} {listing.spec:<40} {listing.kind:<5} {listing.path}")
    typer.echo("(* = default; any .gguf path or Hugging Face model directory works too)")


chats_app = typer.Typer(
    help="The stored chats: list, show, search, export, delete (--json for scripts).",
    invoke_without_command=True,
)
app.add_typer(chats_app, name="chats")


@chats_app.callback()
def chats_callback(ctx: typer.Context) -> None:
    """Without a command: what the commands are."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


JsonOpt = Annotated[bool, typer.Option("--json", help="JSON on stdout")]
ChatIdArg = Annotated[int, typer.Argument(help="the chat's id (`specchat chats list`)")]


def _chats_store():
    from specchat.history import HistoryStore

    return HistoryStore()


@chats_app.command("list")
def chats_list(
    as_json: JsonOpt = False,
    limit: Annotated[int | None, typer.Option("--limit", "-n", help="newest N only")] = None,
) -> None:
    """Every chat, most recently used first: id, when, messages, title."""
    from specchat.app.chats_cli import list_chats

    typer.echo(list_chats(_chats_store(), as_json, limit))


@chats_app.command("show")
def chats_show(chat_id: ChatIdArg, as_json: JsonOpt = False) -> None:
    """A chat's transcript (its current branch; ‹i/n› marks a message with alternatives)."""
    from specchat.app.chats_cli import show_chat

    typer.echo(show_chat(_chats_store(), chat_id, as_json))


@chats_app.command("search")
def chats_search(
    text: Annotated[str, typer.Argument(help="words to find (each may start a longer word)")],
    as_json: JsonOpt = False,
    limit: Annotated[int, typer.Option("--limit", "-n", help="at most N hits")] = 50,
) -> None:
    """Full-text search over every message of every chat: CHAT#MESSAGE, title, snippet."""
    from specchat.app.chats_cli import search_chats

    typer.echo(search_chats(_chats_store(), text, as_json, limit))


@chats_app.command("export")
def chats_export(
    chat_id: ChatIdArg,
    fmt: Annotated[str, typer.Option("--format", "-f", help="markdown or json")] = "markdown",
) -> None:
    """A chat as a Markdown document or JSON, on stdout."""
    from specchat.app.chats_cli import export_chat

    typer.echo(export_chat(_chats_store(), chat_id, fmt))


@chats_app.command("delete")
def chats_delete(chat_id: ChatIdArg, as_json: JsonOpt = False) -> None:
    """Delete a chat with every message and branch."""
    from specchat.app.chats_cli import delete_chat

    typer.echo(delete_chat(_chats_store(), chat_id, as_json))


def main() -> None:
    """Console entry point: user errors become one line on stderr and exit code 2."""
    try:
        # standalone_mode=False hands back typer.Exit's code instead of exiting.
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except SpecchatError as exc:
        typer.echo(f"specchat: error: {exc}", err=True)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click usage errors (typer vendors click, so match by shape)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            typer.echo(f"specchat: error: {exc.format_message()}", err=True)
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
