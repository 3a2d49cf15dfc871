"""The `specchat` command: the chat app, `ask`, `models`, `chats`. Errors: one line, exit code 2."""

from __future__ import annotations

import functools
import gc
import inspect
import json
import sys
from dataclasses import replace
from typing import Annotated

import typer

from specchat import __version__, cpu
from specchat.errors import SpecchatError
from specchat.hardware import usable_threads
from specchat.options import ASK, BENCH, CHAT, COMPARE, MODELS, RunConfig, cli_parameters, resolve
from specchat.settings import load_settings

app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    invoke_without_command=True,
    help="A terminal chat for local LLMs that makes fast (speculative) decoding visible.",
    pretty_exceptions_enable=False,
)

ParamOpt = Annotated[
    list[str], typer.Option("--param", "-p", help="name=value or decoder.name=value (repeatable)")
]


def run_command(name: str, target: typer.Typer | None = None):
    """Register `func` as command `name` with every run option `name` takes (`options.py`)
    added as flags; `func` gets them as `flags`, a dict of what was given (None: not given)."""

    def decorate(func):
        own = [
            p
            for p in inspect.signature(func, eval_str=True).parameters.values()
            if p.name != "flags"
        ]
        added = cli_parameters(name)

        @functools.wraps(func)
        def command(**kwargs):
            flags = {p.name: kwargs.pop(p.name) for p in added}
            return func(**kwargs, flags=flags)

        command.__signature__ = inspect.Signature([*own, *added])
        if target is None:
            app.command(name)(command)
        else:
            target.callback()(command)
        return func

    return decorate


def _variant_decoder(config: RunConfig) -> RunConfig:
    """A decoder spelt with parameters, as compare and bench race one (`-d pld:fixed_draft=10`,
    or `decoder = "pld:fixed_draft=10"` in settings.toml): the decoder, its parameters for this
    run as `--param pld.fixed_draft=10` sets them (`with_params`)."""
    if not config.decoder or ":" not in config.decoder:
        return config
    from specchat.evaluation.variants import parse_variant
    from specchat.run_config import with_params

    variant = parse_variant(config.decoder)
    own = {f"{variant.name}.{key}": value for key, value in variant.values().items()}
    return with_params(replace(config, decoder=variant.name), own)


def run_config(command: str, flags: dict[str, object]) -> tuple[RunConfig, RunConfig, str | None]:
    """(the settings file's values, this run's configuration, why the file was not usable)."""
    settings, broken = load_settings()
    config = _variant_decoder(resolve(settings, flags, command))
    cpu.apply(config.cpu)  # before anything computes: torch reads its cap once
    usable = usable_threads(config.threads) if config.threads else None
    if usable is not None and usable < config.threads:  # LoadOptions.of runs on `usable`
        typer.echo(
            f"specchat: note: {config.threads} threads asked for, but this machine has "
            f"{usable} CPUs: using {usable}",
            err=True,
        )
    return settings, config, broken


def _warn(broken: str | None) -> None:
    if broken:  # a broken settings file never stops an answer; the defaults are used
        typer.echo(f"specchat: warning: {broken}", err=True)


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


def main_callback(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="show the version")
    ] = False,
    param: ParamOpt = [],  # noqa: B006 - typer reads the default
    flags: dict[str, object] | None = None,
) -> None:
    """Without a command: open the chat."""
    if ctx.invoked_subcommand is not None:
        return
    from specchat.app.tui import open_chat
    from specchat.run_config import with_params

    settings, config, broken = run_config(CHAT, flags or {})
    open_chat(settings, with_params(config, _parse_params(param)), broken)


def _parse_params(values: list[str]) -> dict[str, object]:
    """`--param` items as {[decoder.]name: value}."""
    params: dict[str, object] = {}
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


def ask(
    prompt: Annotated[
        str,
        typer.Argument(
            help="the question (or text to continue with --raw); without one, what was piped "
            "or the files (-f) are the question"
        ),
    ] = "",
    param: ParamOpt = [],  # noqa: B006 - typer reads the default
    files: Annotated[
        list[str],
        typer.Option(
            "--file",
            "-f",
            help="a file whose text joins the prompt under its name (repeatable; - is stdin); "
            "text piped to ask joins it too",
        ),
    ] = [],  # noqa: B006
    stop: Annotated[list[str], typer.Option("--stop", help="stop string (repeatable)")] = [],  # noqa: B006
    raw: Annotated[bool, typer.Option("--raw", help="no chat template: continue the text")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON Lines events on stdout")] = False,
    no_log: Annotated[
        bool, typer.Option("--no-log", help="do not record the exchange in the chat store")
    ] = False,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="after the answer, its drafts: every step's drafted, kept and rejected tokens, "
            "source, draft length and pass cost; tokens per step; the oracle "
            "(with --json: a drafts event)",
        ),
    ] = False,
    flags: dict[str, object] | None = None,
) -> None:
    """Stream one answer to stdout; multi-token speculative steps are coloured. Files (-f) and
    piped text join the prompt under their names (with no question, they are the question). The
    exchange is recorded in the chat store (a draft source for later answers) unless --no-log;
    --explain shows its drafts."""
    from specchat.app.ask import run_ask
    from specchat.attachments import attached_spans, gather, piped, question_of, with_attachments
    from specchat.prompting import checked_prompt

    attached = gather(files, piped())  # before the model loads: a bad file is one line
    prompt, attached = question_of(prompt, attached)
    if attached and not prompt:
        title = ", ".join(a.name for a in attached)
    else:
        title = checked_prompt(prompt)
    settings, config, broken = run_config(ASK, flags or {})
    _warn(broken)
    code = run_ask(
        with_attachments(prompt, attached),
        config,
        title=title,
        attached=attached_spans(attached),
        raw_params=_parse_params(param),
        system=config.system_prompt,
        stop=tuple(stop),
        raw=raw,
        as_json=as_json,
        progress=_progress,
        progress_done=_progress_done,
        log=not no_log,
        explain=explain,
    )
    raise typer.Exit(code)


def compare(
    prompt: Annotated[str, typer.Argument(help="the question raced through every decoder")],
    param: ParamOpt = [],  # noqa: B006
    raw: Annotated[bool, typer.Option("--raw", help="no chat template")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object on stdout")] = False,
    flags: dict[str, object] | None = None,
) -> None:
    """Race decoders on one prompt: tok/s, speedup vs greedy, tokens/step, acceptance, exactness."""
    from specchat.app.compare import run_compare
    from specchat.prompting import checked_prompt

    checked_prompt(prompt)
    _, config, broken = run_config(COMPARE, flags or {})
    _warn(broken)
    run_compare(
        prompt,
        config,
        params=_parse_params(param),
        raw=raw,
        as_json=as_json,
        progress=_progress,
        progress_done=_progress_done,
    )


def bench(
    data: Annotated[
        str | None,
        typer.Option("--data", help="Spec-Bench JSON Lines file (default: the bundled dev half)"),
    ] = None,
    categories: Annotated[
        str | None, typer.Option("--categories", help="comma-separated categories")
    ] = None,
    limit_per_category: Annotated[int | None, typer.Option("--limit-per-category")] = None,
    param: ParamOpt = [],  # noqa: B006
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
    flags: dict[str, object] | None = None,
) -> None:
    """Speedup of decoders over greedy per category, as Spec-Bench measures it."""
    from specchat.app.bench_cli import run_bench

    if limit_per_category is not None and limit_per_category < 1:
        raise SpecchatError("--limit-per-category must be at least 1")
    _, config, broken = run_config(BENCH, flags or {})
    _warn(broken)
    run_bench(
        config,
        data=data,
        params=_parse_params(param),
        categories=[c.strip() for c in categories.split(",")] if categories else None,
        limit_per_category=limit_per_category,
        json_out=json_out,
        markdown_out=markdown_out,
        peers=peers,
        command="specchat bench " + " ".join(sys.argv[2:]),
        history=history,
    )


run_command(CHAT, app)(main_callback)
run_command(ASK)(ask)
run_command(COMPARE)(compare)
run_command(BENCH)(bench)


def models(
    as_json: Annotated[
        bool, typer.Option("--json", help="one JSON array on stdout, an object a model")
    ] = False,
    flags: dict[str, object] | None = None,
) -> None:
    """List the models specchat can open here (the bundled one, the Hugging Face cache, ollama's
    store, LM Studio's folder, the settings' model_folders): the name --model takes, family,
    quantization, size, where it was found, and the runtimes that run it at this CPU's level.
    The default is marked."""
    from specchat.models import list_models, listing_facts

    _, config, broken = run_config(MODELS, flags or {})
    _warn(broken)
    listed = [(listing, listing_facts(listing)) for listing in list_models(config.model_folders)]
    if as_json:  # for scripts: the name to pass as --model, and the facts the lines show
        rows = [
            {
                "model": listing.spec,
                "default": listing.is_default,
                "family": family or None,
                "quantization": quant or None,
                "bytes": _file_size(listing.path),
                "store": listing.store or None,
                "path": str(listing.path),
                "runs_on": list(runs.names),
                "runs_on_note": runs.note or None,
            }
            for listing, (family, quant, _, runs) in listed
        ]
        typer.echo(json.dumps(rows, ensure_ascii=False))
        return
    for listing, (family, quant, size, runs) in listed:
        mark = "*" if listing.is_default else " "
        typer.echo(f"{mark} {listing.spec:<36} {family:<8} {quant:<7} {size:>9}  {listing.store}")
        typer.echo(f"    runs on {runs} · {listing.path}")
    typer.echo("(* = default; any .gguf path or Hugging Face model directory works too)")


run_command(MODELS)(models)


def _file_size(path) -> int | None:
    """A model file's size (None: a folder, or a file gone since it was listed)."""
    try:
        return path.stat().st_size if path.is_file() else None
    except OSError:
        return None


@app.command()
def pull(
    model: Annotated[
        str, typer.Argument(help="ORG/NAME[:QUANT|:FILE.gguf]; no QUANT: Q4_K_M, or the closest")
    ],
) -> None:
    """Download a model from the Hugging Face Hub into its cache (progress shown, resumable);
    then --model ORG/NAME[:QUANT] opens it. The only command that uses the network itself."""
    from specchat.app.pull import pull as pull_model

    paths = pull_model(model, lambda text: typer.echo(text, err=True))
    for path in paths:
        typer.echo(str(path))
    typer.echo(f"open it with: specchat --model {model}", err=True)


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


def _one_line_summaries(*typers: typer.Typer) -> None:
    """Each command's summary in the commands' list is its docstring's first paragraph as one
    line, wrapped to the terminal: typer's rich help keeps the source's line breaks there, so the
    list read broken mid-sentence at wide terminals."""
    for group in typers:
        for info in group.registered_commands:
            if info.short_help is None:
                doc = info.help or inspect.getdoc(info.callback) or ""
                info.short_help = " ".join(doc.split("\n\n")[0].split())


_one_line_summaries(app, chats_app)


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
    finally:
        # The command's work is done and written. The interpreter's last collection walked
        # every object torch and the runtimes made: `ask` exited 0.4 s after its answer, of
        # which this leaves 0.1 s (module teardown); the objects are still freed, not scanned.
        gc.freeze()


if __name__ == "__main__":
    main()
