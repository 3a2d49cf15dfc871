"""Bad input as a new user types it: one line on stderr, exit code 2, never a traceback.

Cases that need no model are checked before one loads: each of these runs is given a model
path that does not exist, so a run that loaded first would say "not found" instead of the
reason tested. The rest of the list (missing or junk model, unknown decoder, `--device cuda`,
a draft with another vocabulary, a server that is down) lives in test_cli.py and
test_remote_cli.py; docs/reliability.md lists them all.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from specchat.decoding.params import Param
from specchat.decoding.registry import DECODERS
from specchat.errors import SpecchatError
from tests.cli import Ran, run_cli, run_process

NO_MODEL = ("--model", "/no/such/model.gguf")


def run(*args: str, env: dict | None = None) -> Ran:
    """In the test's process: the argument list and the environment are all these runs use."""
    return run_cli(*args, env=env)


def one_line_error(result: Ran | subprocess.CompletedProcess, *words: str) -> str:
    stderr = result.stderr
    if isinstance(stderr, bytes):
        stderr = stderr.decode("utf-8", "replace")
    assert result.returncode == 2, (result.stdout, stderr)
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("specchat: error: ")
    assert all(word in lines[0] for word in words), lines[0]
    return lines[0]


# -- decoder parameters ----------------------------------------------------------------------


def _out_of_range(param: Param) -> list[object]:
    """Values just past each declared bound (and a wrong type) of one parameter."""
    step = 1 if param.kind is int else 0.5
    values: list[object] = []
    if param.minimum is not None:
        values.append(param.minimum - step)
    if param.maximum is not None:
        values.append(param.maximum + step)
    if param.kind in (int, float):
        values.append("many")
    if param.choices:
        values.append("nonsense")
    return values


BOUNDED = [
    (cls.name, param, value)
    for cls in DECODERS.values()
    for param in cls.params
    for value in _out_of_range(param)
]


def test_every_decoder_declares_bounds_for_its_numbers():
    """The range check lives in the declaration: a number without bounds would go unchecked."""
    for cls in DECODERS.values():
        for param in cls.params:
            if param.kind in (int, float):
                assert param.minimum is not None and param.maximum is not None, (
                    f"{cls.name}.{param.name}"
                )


@pytest.mark.parametrize(
    "name,param,value", BOUNDED, ids=[f"{n}.{p.name}={v}" for n, p, v in BOUNDED]
)
def test_out_of_range_parameters_of_every_decoder_are_refused(name, param, value):
    with pytest.raises(SpecchatError) as excinfo:
        DECODERS[name].validate({param.name: value})
    message = str(excinfo.value)
    assert message.startswith(f"{name}.{param.name} must") and "\n" not in message


@pytest.mark.parametrize(
    "args,words",
    [
        (("ask", "hi", "-d", "pld", "-p", "pld.num_pred_tokens=-3"), ("num_pred_tokens", "≥ 1")),
        (("ask", "hi", "-d", "lookahead", "-p", "lookahead.window=0"), ("window", "≥ 1")),
        (("ask", "hi", "-d", "lookahead", "-p", "window=65"), ("window", "≤ 64")),
        (("ask", "hi", "-d", "suffix", "-p", "min_token_prob=2"), ("min_token_prob", "≤ 1")),
        (
            ("ask", "hi", "-d", "draft", "-p", "k_max=0", "--draft", "x.gguf"),
            ("draft.k_max", "≥ 1"),
        ),
        (("ask", "hi", "-d", "beam", "-p", "num_beams=0"), ("num_beams", "≥ 1")),
        (("ask", "hi", "-d", "pld", "-p", "min_ngram=5", "-p", "max_ngram=2"), ("min_ngram",)),
        (("compare", "hi", "-d", "pld:num_pred_tokens=0"), ("num_pred_tokens", "≥ 1")),
        (("compare", "hi", "-d", "lookahead", "-p", "lookahead.window=0"), ("window", "≥ 1")),
        (("bench", "-d", "pld", "-p", "pld.num_pred_tokens=-3"), ("num_pred_tokens", "≥ 1")),
    ],
)
def test_out_of_range_parameter_is_one_line_before_the_model_loads(args, words):
    one_line_error(run(*args, *NO_MODEL), *words)


# -- prompts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [("ask", ""), ("ask", "  \n "), ("ask", "", "--raw"), ("compare", "")]
)
def test_an_empty_prompt_is_refused(args):
    one_line_error(run(*args, *NO_MODEL), "empty", "no question")


def test_a_prompt_that_is_not_utf8_is_refused():
    # bytes that are not UTF-8 reach a process's argv as lone surrogates: a real process
    one_line_error(run_process("ask", b"caf\xe9 au lait", *NO_MODEL), "not UTF-8")


@pytest.mark.slow
def test_stdin_that_is_not_utf8_is_one_line():
    """Piped into plain `specchat` (the line-mode chat), in a UTF-8 and in the C locale."""
    for locale in ("C.UTF-8", "C"):
        result = run_process(stdin=b"caf\xe9 au lait\n", env={"LC_ALL": locale, "LANG": locale})
        one_line_error(result, "stdin", "not UTF-8")


# -- files -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content,words",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe" + bytes(range(256)), ("not UTF-8",)),
        (b"question,category\n1,qa\n", ("not a Spec-Bench question", ":1:")),
        (b'{"question_id": 1, "category": "qa"}\n', ("missing field 'turns'",)),
        (json.dumps({"question_id": 1, "turns": ["x"]}).encode() + b"\n", ("'category'",)),
    ],
    ids=["binary", "not-json-lines", "no-turns", "no-category"],
)
def test_bad_bench_data_is_one_line(tmp_path: Path, content: bytes, words):
    data = tmp_path / "questions.jsonl"
    data.write_bytes(content)
    one_line_error(run("bench", "--data", str(data), *NO_MODEL), *words)


@pytest.mark.parametrize(
    "content,words",
    [
        ("max_tokens = [oops\n", ("not valid TOML",)),
        ("[decoders.pld]\nnum_pred_tokens = -3\n", ("pld.num_pred_tokens must be ≥ 1",)),
        ("[decoders.lookahead]\nwindow = 0\n", ("lookahead.window must be ≥ 1",)),
    ],
    ids=["not-toml", "pld-out-of-range", "lookahead-out-of-range"],
)
def test_a_broken_settings_file_is_one_warning_and_the_answer_still_comes(
    tmp_path: Path, content: str, words
):
    config = tmp_path / "config"
    config.mkdir()
    (config / "settings.toml").write_text(content)
    result = run(
        "ask",
        "Say hi.",
        "--max-tokens",
        "3",
        "--no-log",
        env={"SPECCHAT_CONFIG_DIR": str(config)},
    )
    stderr = result.stderr
    assert result.returncode == 0, stderr
    assert result.stdout.strip()
    (line,) = stderr.strip().splitlines()
    assert line.startswith("specchat: warning: ") and "is broken" in line and "defaults" in line
    assert all(word in line for word in words), line


@pytest.mark.parametrize("kind", ["empty", "junk", "truncated"])
def test_a_broken_gguf_file_is_one_line(tmp_path: Path, bundled_gguf: Path, kind: str):
    broken = tmp_path / f"{kind}.gguf"
    if kind == "empty":
        broken.write_bytes(b"")
    elif kind == "junk":
        broken.write_bytes(b"this is not a model\n" * 100)
    else:  # a download that stopped half-way: the header and part of the tensors
        with bundled_gguf.open("rb") as source:
            broken.write_bytes(source.read(bundled_gguf.stat().st_size // 2))
    # a process: a runtime that crashed on a broken file would take the test run with it
    one_line_error(run_process("ask", "hi", "--model", str(broken)), str(broken.name))


@pytest.mark.parametrize(
    "variable", ["SPECCHAT_CACHE_DIR", "SPECCHAT_DATA_DIR", "SPECCHAT_CONFIG_DIR"]
)
def test_a_folder_that_cannot_be_made_is_one_line_naming_its_variable(tmp_path: Path, variable):
    """A variable that points under a file (a typo, a stale path): the answer cannot be kept or
    the runtime built there, so the run stops with the folder and the variable to change."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    ran = run_process("ask", "hi", "--max-tokens", "4", env={variable: str(a_file / "specchat")})
    one_line_error(ran, str(a_file / "specchat"), variable)


def test_more_threads_than_cpus_answers_on_the_cpus_with_one_note():
    """`--threads 999` on a small machine: threads past the CPUs only wait on each other at every
    barrier (the answer never came), so the run uses the CPUs there are and says so once."""
    cpus = os.cpu_count() or 1
    ran = run_process(
        "ask", "Say hi.", "--threads", str(cpus + 997), "--max-tokens", "4", timeout=240
    )
    stderr = ran.stderr.decode("utf-8", "replace")
    assert ran.returncode == 0, stderr
    assert ran.stdout.strip(), "an answer came"
    (line,) = [line for line in stderr.splitlines() if line.startswith("specchat: ")]
    assert line == (
        f"specchat: note: {cpus + 997} threads asked for, but this machine has {cpus} CPUs: "
        f"using {cpus}"
    )


def test_a_hugging_face_directory_without_weights_is_one_line(tmp_path: Path):
    from tests.tiny_models import tiny_model, tiny_tokenizer

    folder = tmp_path / "no-weights"
    tiny_model().config.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    one_line_error(run("ask", "hi", "--model", str(folder)), "holds no weights")


def test_a_race_server_that_is_no_address_is_one_line():
    one_line_error(run("--race-server", "ftp://host"), "server@ftp://host", "HOST:PORT")


def test_a_file_is_opened_apart_once_and_an_abort_there_is_one_line(tmp_path):
    """`ask --model FILE` opens a GGUF in a child process first: once per file (the verdict is
    kept by path, size and time), and a file whose opening aborts llama.cpp there (SIGABRT) is
    refused in one line with exit 2, this process never opening it."""
    import shutil

    from specchat.bundled import bundled_gguf

    model = tmp_path / "copy.gguf"
    shutil.copy(bundled_gguf(), model)
    env = {"SPECCHAT_CACHE_DIR": str(tmp_path / "cache"), "SPECCHAT_DATA_DIR": str(tmp_path)}
    args = ("ask", "Hi", "--model", str(model), "--max-tokens", "2", "--no-log", "-d", "greedy")
    aborting = run_cli(*args, env={**env, "SPECCHAT_TEST_ABORT_OPENING": "copy.gguf"})
    assert aborting.returncode == 2 and not aborting.stdout
    assert aborting.stderr.strip().splitlines() == [
        "specchat: error: copy.gguf crashed llama.cpp while it was opened (signal 6, SIGABRT): "
        "refused, this process never opened it"
    ]
    ran = run_cli(*args, env=env)
    assert ran.returncode == 0, ran.stderr
    verdicts = json.loads((tmp_path / "cache" / "opened-files.json").read_text())
    assert [key.split("|")[0] for key in verdicts] == [str(model.resolve())]
    # kept: the stand-in abort no longer runs, since the file is not opened apart again
    again = run_cli(*args, env={**env, "SPECCHAT_TEST_ABORT_OPENING": "copy.gguf"})
    assert again.returncode == 0, again.stderr
    model.write_bytes(model.read_bytes())  # changed (a new time): opened apart again
    changed = run_cli(*args, env={**env, "SPECCHAT_TEST_ABORT_OPENING": "copy.gguf"})
    assert changed.returncode == 2 and "crashed llama.cpp" in changed.stderr


def test_a_norm_llama_cpp_loads_but_cannot_compute_is_refused_for_it_alone(tmp_path):
    """A fuzzed Gemma 3 file (fresh seeds, session 31): one norm stored as float16. llama.cpp
    loads it, then aborts in the first pass ("binary_op: unsupported types"), so the child that
    opens it first runs a pass too: on llama.cpp one line and exit 2; the int4 runtime, which
    computes the norm itself, answers."""
    import struct

    from benchmarks.random_gguf import RandomShape, write_random_gguf

    path = write_random_gguf(
        tmp_path / "g3.gguf", RandomShape(arch="gemma3", layers=2, head_dim=32, window=8), "Q4_0"
    )
    data = bytearray(path.read_bytes())
    name = b"blk.1.post_ffw_norm.weight"
    at = data.index(name) + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    struct.pack_into("<I", data, at + 4 + 8 * n_dims, 1)  # GGML_TYPE_F16
    path.write_bytes(bytes(data))
    env = {"SPECCHAT_CACHE_DIR": str(tmp_path / "cache"), "SPECCHAT_DATA_DIR": str(tmp_path)}
    args = ("ask", "Hi", "--model", str(path), "--max-tokens", "2", "--no-log")
    on_llama = run_cli(*args, "--backend", "llama", env=env)
    assert on_llama.returncode == 2 and not on_llama.stdout
    assert on_llama.stderr.strip().splitlines() == [
        "specchat: error: g3.gguf crashed llama.cpp while it was opened (signal 6, SIGABRT): "
        "refused, this process never opened it"
    ]
    on_int4 = run_cli(*args, "--backend", "int4", env=env)
    assert on_int4.returncode == 0, on_int4.stderr
