"""specchat on a GPU machine, checked in one command: the CUDA builds and transformers on CUDA.

No machine the project is built and tested on has a GPU, so this is what runs where one is lent
for a few minutes (docs/gpu.md): it puts llama.cpp's CUDA build in place (a carried wheel, or
built from a carried source tree for the card alone), writes its models (random weights of real
shapes with the bundled model's tokenizer: a pass costs what its shapes cost, not what its
weights say), and prints one table with the GPU's name:

- each runtime's pass costs for k = 1, 4, 16, 64 tokens (what the draft policy sizes drafts by);
- `specchat bench` on each GPU runtime: every speculative decoder's speedup over greedy and
  whether it produced exactly its runtime's greedy tokens (random weights: acceptance is not a
  real model's, so the speedups only show the machinery works; `--project` turns the measured
  costs into the bundled model's projected speedups where that model is installed);
- the chat in a headless pilot with `--device` the GPU, and `--device auto` picking it.

`--dry-run --device cpu` runs the same steps end to end on tiny models in under a minute (the
suite does). Every step runs whatever an earlier one did; a failed step is a row that says why.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.random_gguf import RandomShape, write_block_gguf  # noqa: E402

TINY = RandomShape(layers=2, dim=64, ffn=128, heads=4, kv_heads=2)
PASS_SIZES = (1, 4, 16, 64)
BENCH_CATEGORIES = "writing,coding,rag"
QUESTION = "Name three colours."


def say(text: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass
class Report:
    device: str = ""
    versions: dict = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    passes: list[dict] = field(default_factory=list)  # runtime, model, {k: seconds}
    bench: list[dict] = field(default_factory=list)  # runtime, model, decoder, speedup, exact
    projected: list[dict] = field(default_factory=list)
    out: Path | None = None  # where the report is kept, step by step

    def run(self, name: str, work: Callable[[], str | None]) -> bool:
        """Run one step, recording it; a failure is a row, not the end of the check."""
        say(f"{name} …")
        started = time.perf_counter()
        try:
            detail, ok = work() or "", True
        except Exception as error:  # noqa: BLE001 - every failure is a row of the table
            detail, ok = f"{type(error).__name__}: {error}".splitlines()[0][:300], False
            traceback.print_exc(file=sys.stderr)
        self.steps.append(Step(name, ok, time.perf_counter() - started, detail))
        say(f"{name}: {'ok' if ok else 'FAILED'} {detail}")
        self.save()
        return ok

    def save(self) -> None:
        """The report so far into `out` (after every step: a check cut short keeps its rows)."""
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        fields = {k: v for k, v in asdict(self).items() if k != "out"}
        (self.out / "gpu_check.json").write_text(json.dumps(fields, indent=1, default=str))
        (self.out / "gpu_check.txt").write_text(table(self) + "\n")


# -- install ---------------------------------------------------------------------------------------


def install_wheels(wheels: Path, site: Path) -> str:
    """The carried wheels unpacked into `site`: no index, no dependencies (the machine has the
    rest), and no tag checks — llama-cpp-python's wheel holds shared libraries that ctypes loads,
    which run under any Python 3 whichever one built them."""
    found = sorted(wheels.glob("*.whl"))
    if not found:
        raise RuntimeError(f"no wheels in {wheels}")
    site.mkdir(parents=True, exist_ok=True)
    for wheel in found:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    for library in site.rglob("*.so*"):  # zip keeps no modes
        library.chmod(0o755)
    return ", ".join(w.name.split("-")[0] for w in found)


def cuda_capability() -> str:
    """The card's architecture as CMake names it (9.0 → "90"), from torch."""
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return f"{major}{minor}"


def build_llama(source: Path, site: Path) -> str:
    """llama-cpp-python from a (trimmed) source tree, with CUDA for this card only, on every
    core, with ninja, into `site`: the flags scripts/setup uses, plus CUDA's."""
    if source.is_file():  # a carried tarball: unpacked beside the site
        import tarfile

        with tarfile.open(source) as archive:
            archive.extractall(site.parent / "llama-src", filter="data")
        source = next((site.parent / "llama-src").iterdir())
    arch = cuda_capability()
    flags = (
        "-DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF -DGGML_CUDA=on -DGGML_CUDA_FA=OFF "
        f"-DGGML_CUDA_NCCL=OFF -DCMAKE_CUDA_ARCHITECTURES={arch} -DLLAMA_BUILD_TESTS=OFF "
        "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAVA_BUILD=OFF "
        + cublas_flags(site.parent / "cuda-links")
    )
    env = {**os.environ, "CMAKE_ARGS": flags, "CMAKE_GENERATOR": "Ninja",
           "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)}  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-cache-dir", "--target", str(site), str(source)],
        check=True, env=env,
    )  # fmt: skip
    return f"sm_{arch}, {os.cpu_count()} cores"


def cublas_flags(links: Path) -> str:
    """CMake flags that find cuBLAS where pip put it (torch's nvidia-cublas: versioned libraries
    only, headers beside them) when the CUDA toolkit has none of its own."""
    links.mkdir(parents=True, exist_ok=True)
    flags = ""
    for folder in map(Path, cuda_library_dirs()):
        for library in folder.glob("libcublas*.so.*"):
            link = links / (library.name.split(".so")[0] + ".so")
            if not link.exists():
                link.symlink_to(library)
        if (folder.parent / "include" / "cublas_v2.h").exists() and not flags:
            include = folder.parent / "include"
            flags = f"-DCMAKE_CUDA_FLAGS=-I{include} -DCMAKE_CXX_FLAGS=-I{include} "
    return flags + f"-DCMAKE_LIBRARY_PATH={links}"


def cuda_library_dirs() -> list[str]:
    """Where this Python's CUDA libraries are (torch's nvidia packages, the toolkit): a CUDA
    build of llama.cpp finds cuBLAS and the runtime there."""
    dirs = []
    for base in sys.path:
        dirs += glob.glob(os.path.join(base, "nvidia", "*", "lib"))
        dirs += glob.glob(os.path.join(base, "nvidia", "*", "*", "lib"))
    dirs += [d for d in ("/usr/local/cuda/lib64",) if os.path.isdir(d)]
    return list(dict.fromkeys(d for d in dirs if os.path.isdir(d)))


def load_cuda_libraries(dirs: list[str]) -> None:
    """Load the runtime and cuBLAS by path, globally, so that llama.cpp's CUDA library finds
    them in this process; children get them through LD_LIBRARY_PATH."""
    for pattern in ("libcudart.so.*", "libcublasLt.so.*", "libcublas.so.*"):
        for folder in dirs:
            hits = sorted(glob.glob(os.path.join(folder, pattern)))
            if hits:
                ctypes.CDLL(hits[0], mode=ctypes.RTLD_GLOBAL)
                break
    joined = os.pathsep.join([*dirs, os.environ.get("LD_LIBRARY_PATH", "")]).strip(os.pathsep)
    os.environ["LD_LIBRARY_PATH"] = joined


# -- models ----------------------------------------------------------------------------------------


@dataclass
class Models:
    """What the check runs: a GGUF per size, a transformers folder for the bench size."""

    gguf: dict[str, Path] = field(default_factory=dict)
    hf: Path | None = None
    bench_size: str = ""


def shapes(dry_run: bool, sizes: list[str]) -> dict[str, RandomShape]:
    if dry_run:
        return {"tiny": TINY}
    from benchmarks.scale import SHAPES

    return {size: SHAPES[size] for size in sizes}


def hf_config(shape: RandomShape, vocab: int, tokenizer):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=shape.dim,
        intermediate_size=shape.ffn,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        vocab_size=vocab,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def random_hf_model(shape: RandomShape, tokenizer, device: str):
    """A transformers Llama of `shape` with random weights, made on `device` in the type the
    check runs it in (bfloat16 on a GPU, float32 on the CPU)."""
    import torch
    from transformers import LlamaForCausalLM

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    config = hf_config(shape, len(tokenizer), tokenizer)
    previous = torch.get_default_dtype()
    torch.manual_seed(0)
    try:
        torch.set_default_dtype(dtype)
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def make_models(shape_of: dict[str, RandomShape], tokenizer: Path, work: Path, device: str):
    models = Models(bench_size=next(iter(shape_of)))
    for size, shape in shape_of.items():
        path = work / f"random-{size}-q4_0.gguf"
        write_block_gguf(path, shape, tokenizer=tokenizer)
        models.gguf[size] = path
    from transformers import AutoTokenizer

    first = models.gguf[models.bench_size]
    hf_tokenizer = AutoTokenizer.from_pretrained(str(first.parent), gguf_file=first.name)
    folder = work / f"hf-{models.bench_size}"
    model = random_hf_model(shape_of[models.bench_size], hf_tokenizer, device)
    model.save_pretrained(folder)
    hf_tokenizer.save_pretrained(folder)
    models.hf = folder
    del model
    sizes = ", ".join(f"{s} {p.stat().st_size / 2**30:.2f} GiB" for s, p in models.gguf.items())
    return models, f"GGUF {sizes}; transformers {models.bench_size}"


# -- measurements ----------------------------------------------------------------------------------


def time_sizes(backend, repeats: int) -> dict[int | str, float]:
    """Seconds of a k-token pass behind 256 cached tokens (`block_cost.time_passes`), and under
    "loop" a token's seconds in greedy's whole loop behind the same context (the engine, the
    decoder, the detokenizer): what a pass leaves out, which weighs more where a pass is quick."""
    from specchat.backends.block_cost import time_passes
    from specchat.decoding.registry import build_decoder
    from specchat.engine.local import Engine
    from specchat.engine.protocol import GenerationRequest

    context = [min(100, backend.vocab_size - 1)] * 256
    backend.prefill(context)
    costs: dict[int | str, float] = dict(time_passes(backend, PASS_SIZES, repeats))
    engine = Engine(backend, build_decoder("greedy", {}, backend))
    loops = []
    for _ in range(max(1, repeats // 2)):
        backend.rollback(0)
        done = list(engine.generate(GenerationRequest(tuple(context), 64)))[-1]
        loops.append(done.stats.decode_seconds / max(1, done.stats.generated_tokens))
    backend.rollback(0)
    costs["loop"] = min(loops)
    return costs


def cost(seconds: dict, key: int | str) -> float | None:
    """A pass row's entry, whether its keys are numbers or (read back from JSON) strings."""
    return seconds.get(key, seconds.get(str(key)))


def llama_passes(path: Path, device: str, repeats: int) -> dict[int, float]:
    from specchat.backends.llama import LlamaBackend

    backend = LlamaBackend(path, device=device, n_ctx=1024, max_branches=1)
    try:
        return time_sizes(backend, repeats)
    finally:
        backend.close()


def hf_passes(shape: RandomShape, tokenizer_dir: Path, device: str, repeats: int):
    from transformers import AutoTokenizer

    from specchat.backends.hf.backend import HFBackend

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    model = random_hf_model(shape, tokenizer, device)
    backend = HFBackend(model, tokenizer, model_name="random", device=device, n_ctx=1024)
    try:
        return time_sizes(backend, repeats)
    finally:
        backend.close()
        del model, backend
        if device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()


def specchat_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "specchat", *args]


def child_env(home: Path) -> dict[str, str]:
    """What a `specchat` child runs with: this check's folders for its settings and data, and
    the repository and the carried packages (`home`/site, where installed) on its path."""
    paths = [str(ROOT), *([str(home / "site")] if (home / "site").is_dir() else [])]
    return {
        **os.environ,
        "SPECCHAT_CONFIG_DIR": str(home / "config"),
        "SPECCHAT_DATA_DIR": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(":"),
    }


def race_here() -> tuple[list[str], list[str]]:
    """The race's decoders that can run here, and those that cannot (a library not built)."""
    from specchat.decoding.registry import DECODERS, default_race

    names = default_race()
    ready = [n for n in names if DECODERS[n].unavailable_anywhere() is None]
    return ready, [n for n in names if n not in ready]


def bench(model: Path, runtime: str, device: str, args, home: Path) -> list[dict]:
    """`specchat bench` on `model`: each decoder's speedup over greedy and exactness."""
    out = home / f"bench-{runtime}.json"
    decoders, _ = race_here()
    command = specchat_command(
        "bench", "--model", str(model), "--backend", runtime, "--device", device,
        "--categories", args.categories, "--limit-per-category", "1",
        "--max-tokens", str(args.max_tokens), "--json", str(out),
        "--repeats", str(args.bench_repeats),
        *(f"--decoder={name}" for name in decoders),
    )  # fmt: skip
    if runtime == "hf":
        command += ["--dtype", "bfloat16" if device.startswith("cuda") else "float32"]
    done = subprocess.run(
        command, env=child_env(home), stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "?")
    summary = json.loads(out.read_text())["summary"]
    rows = []
    for method, categories in summary.items():
        overall = categories["overall"]
        exact = overall.get("exact_rate")
        rows.append(
            {
                "runtime": runtime,
                "decoder": method,
                "speedup": overall["speedup"],
                "tokens_per_second": overall["tokens_per_second"],
                "exact": None if exact is None else exact == 1.0,
                "exact_rate": exact,
                "mean_accepted_tokens": overall["mean_accepted_tokens"],
            }
        )
    return rows


async def _pilot(model: Path, runtime: str, device: str) -> str:
    from specchat.app.tui.app import SpecchatApp
    from specchat.app.tui.widgets.message import AssistantMessage
    from specchat.app.tui.widgets.status_bar import StatusBar
    from specchat.options import RunConfig

    settings = RunConfig(model=str(model), backend=runtime, device=device, max_tokens=24)
    app = SpecchatApp(settings=settings, save_settings_file=False)

    async def until(condition, limit: float = 300.0) -> None:
        waited = 0.0
        while not condition():
            await pilot.pause(0.05)
            waited += 0.05
            if waited > limit:
                raise RuntimeError("the chat did not get there in time")

    async with app.run_test(size=(110, 34)) as pilot:
        await until(lambda: app.session.engine is not None)
        app.screen.query_one("#prompt").insert(QUESTION)
        await pilot.press("enter")
        await until(lambda: len(app.screen.query(AssistantMessage)) > 0)
        await until(lambda: not app.screen.answering)
        await pilot.pause(0.2)
        status = str(app.screen.query_one(StatusBar).render())
        answer = app.screen.query(AssistantMessage).last()
        tokens = app.screen.figures.stats.generated_tokens
    if device not in status:
        raise RuntimeError(f"the status line does not name {device}: {status!r}")
    if tokens < 1:
        raise RuntimeError(f"no answer came: {answer!r}")
    return f"{tokens} tokens; status: {' '.join(status.split())[:120]}"


def pilot(model: Path, runtime: str, device: str, home: Path) -> str:
    os.environ.update(
        {k: v for k, v in child_env(home).items() if k.startswith(("SPECCHAT_", "XDG_"))}
    )
    return asyncio.run(_pilot(model, runtime, device))


def auto_device(model: Path, home: Path, expected: str) -> str:
    """`specchat ask` with no --device: the device it picked, from its JSON."""
    done = subprocess.run(
        specchat_command("ask", "--model", str(model), "--max-tokens", "4", "--json", QUESTION),
        env=child_env(home), stdin=subprocess.DEVNULL, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "?")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if answer["device"] != expected:
        raise RuntimeError(f"picked {answer['device']} ({answer['runtime']}), not {expected}")
    return f"picked {answer['device']} ({answer['runtime']})"


def project(report: Report, max_tokens: int) -> None:
    """The bundled model's greedy answers replayed at each measured cost table
    (`benchmarks/scale.py`): what the default decoder would gain at that size and runtime on
    text a real model writes. Needs the bundled model installed."""
    from benchmarks.replay_policy import greedy_answers
    from benchmarks.scale import HELD_OUT, projected
    from specchat.models import LoadOptions, load_model

    bundled = load_model(None, LoadOptions(backend="llama", threads=1), lambda *a: None)
    answers = greedy_answers(bundled, 1, max_tokens, str(HELD_OUT))
    for row in report.passes:
        costs = {int(k): v for k, v in row["seconds"].items() if str(k).isdigit()}
        speedup = projected(bundled, answers, costs)["overall"]
        report.projected.append({**{k: row[k] for k in ("runtime", "model")}, "suffix": speedup})
    bundled.close()


# -- the table -------------------------------------------------------------------------------------


def table(report: Report) -> str:
    lines = [f"specchat GPU check on {report.device}", ""]
    lines.append(
        f"{'runtime':<14}{'model':<8}{'k=1 ms':>8}"
        + "".join(f"{'k=' + str(k):>8}" for k in PASS_SIZES[1:])
        + f"{'loop ms':>9}"
    )
    for row in report.passes:
        one, loop = cost(row["seconds"], 1), cost(row["seconds"], "loop")
        ratios = "".join(f"{cost(row['seconds'], k) / one:>7.2f}×" for k in PASS_SIZES[1:])
        looped = f"{loop * 1000:>9.2f}" if loop else f"{'-':>9}"
        lines.append(f"{row['runtime']:<14}{row['model']:<8}{one * 1000:>8.2f}{ratios}{looped}")
    if report.bench:
        lines += [
            "",
            f"{'runtime':<14}{'decoder':<12}{'tok/s':>9}{'speedup':>9}{'tok/step':>9}  exact",
        ]
        for row in report.bench:
            exact = {True: "yes", False: "NO", None: "-"}[row["exact"]]
            speed = row["tokens_per_second"] or 0.0
            per_step = row.get("mean_accepted_tokens") or 0.0  # 1.00: no draft was taken
            lines.append(
                f"{row['runtime']:<14}{row['decoder']:<12}{speed:>9.1f}"
                f"{row['speedup'] or 0:>8.2f}×{per_step:>9.2f}  {exact}"
            )
    if report.projected:
        lines += [
            "",
            "projected (the bundled model's answers at these pass costs; suffix ÷ greedy)",
        ]
        for row in report.projected:
            lines.append(f"{row['runtime']:<14}{row['model']:<8}{row['suffix']:>8.2f}×")
    lines += ["", f"{'step':<34}{'':>3}{'s':>7}  detail"]
    for step in report.steps:
        mark = "ok" if step.ok else "FAIL"
        lines.append(f"{step.name:<34}{mark:>4}{step.seconds:>7.1f}  {step.detail}")
    return "\n".join(lines)


def describe_device(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"gpu_check: torch {torch.__version__} sees no CUDA device")
        props = torch.cuda.get_device_properties(0)
        return f"{props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}"
    from specchat import cpu

    return f"CPU: {cpu.describe()}"


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for package in ("llama-cpp-python", "torch", "transformers", "textual"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "missing"
    return found


def llama_check(device: str) -> str:
    """Whether llama.cpp is importable and, for a GPU, built with it (offload)."""
    import llama_cpp

    if device.startswith("cuda") and not llama_cpp.llama_supports_gpu_offload():
        raise RuntimeError("this llama-cpp-python build has no GPU offload")
    return f"llama-cpp-python {llama_cpp.__version__} from {Path(llama_cpp.__file__).parent}"


def llama_ready(device: str) -> bool:
    try:
        llama_check(device)
    except Exception:  # noqa: BLE001 - not importable, or no GPU in it: build it
        return False
    return True


def cuda_libraries() -> str:
    dirs = cuda_library_dirs()
    load_cuda_libraries(dirs)
    return f"{len(dirs)} folders"


def bundled_tokenizer() -> Path:
    from specchat.bundled import bundled_gguf

    return bundled_gguf()


class Check:
    """The steps in order, each recorded in `report` whatever the others did."""

    def __init__(self, args, report: Report, work: Path) -> None:
        self.args, self.report, self.work = args, report, work
        self.models: Models | None = None
        self.shape_of: dict[str, RandomShape] = {}

    def install(self) -> None:
        args, site = self.args, self.work / "site"
        if args.wheels:
            self.report.run("install the carried wheels", lambda: install_wheels(args.wheels, site))
            sys.path.insert(0, str(site))
        if args.device.startswith("cuda"):
            self.report.run("load CUDA's libraries", cuda_libraries)
        if args.llama_source and (args.build_only or not llama_ready(args.device)):
            self.report.run(
                "build llama.cpp for this card", lambda: build_llama(args.llama_source, site)
            )
            if str(site) not in sys.path:
                sys.path.insert(0, str(site))
        self.report.run("llama.cpp sees the device", lambda: llama_check(args.device))
        self.report.versions = versions()

    def write_models(self) -> str:
        tokenizer = self.args.tokenizer or bundled_tokenizer()
        self.models, detail = make_models(self.shape_of, tokenizer, self.work, self.args.device)
        return detail

    def passes(self, runtime: str, size: str) -> str:
        args, models = self.args, self.models
        if runtime == "llama.cpp":
            seconds = llama_passes(models.gguf[size], args.device, args.repeats)
        else:
            seconds = hf_passes(self.shape_of[size], models.hf, args.device, args.repeats)
        self.report.passes.append({"runtime": runtime, "model": size, "seconds": seconds})
        return (
            f"one token {seconds[1] * 1000:.2f} ms, 64 tokens {seconds[64] / seconds[1]:.2f}×, "
            f"greedy's loop {seconds['loop'] * 1000:.2f} ms a token"
        )

    def bench(self, runtime: str) -> str:
        models = self.models
        model = models.gguf[models.bench_size] if runtime == "llama" else models.hf
        rows = bench(model, runtime, self.args.device, self.args, self.work)
        for row in rows:
            row["model"] = models.bench_size
        self.report.bench += rows
        inexact = [row["decoder"] for row in rows if row["exact"] is False]
        _, missing = race_here()
        notes = [f"{len(rows)} decoders"]
        notes += [f"not exact: {', '.join(inexact)}"] if inexact else []
        notes += [f"unavailable here: {', '.join(missing)}"] if missing else []
        return "; ".join(notes)

    def run(self) -> None:
        report, args = self.report, self.args
        self.install()
        if args.build_only:
            return
        self.shape_of = shapes(args.dry_run, args.sizes.split(","))  # the carried packages first
        if not report.run("write the models", self.write_models):
            return
        size = self.models.bench_size
        for runtime in ("llama.cpp", "transformers"):
            for each in self.shape_of:
                report.run(
                    f"{runtime} pass costs {each}", lambda r=runtime, e=each: self.passes(r, e)
                )
        for runtime in ("llama", "hf"):
            report.run(f"bench {runtime} {size}", lambda r=runtime: self.bench(r))
        model = self.models.gguf[size]
        report.run("the chat, headless", lambda: pilot(model, "llama", args.device, self.work))
        report.run("--device auto", lambda: auto_device(model, self.work, args.device))


def project_file(path: Path, max_tokens: int) -> int:
    """Add the bundled model's projected speedups to a check's JSON and print its table."""
    data = json.loads(path.read_text())
    report = Report(**{k: v for k, v in data.items() if k not in ("steps", "out")})
    report.steps = [Step(**step) for step in data["steps"]]
    report.projected = []
    project(report, max_tokens)
    fields = {k: v for k, v in asdict(report).items() if k != "out"}
    path.write_text(json.dumps(fields, indent=1, default=str))
    path.with_suffix(".txt").write_text(table(report) + "\n")
    print(table(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny models: the steps, not speed")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--wheels", type=Path, help="carried wheels to install first")
    parser.add_argument("--llama-source", type=Path, help="llama-cpp-python source to build")
    parser.add_argument(
        "--build-only", action="store_true", help="only build --llama-source (to time it)"
    )
    parser.add_argument("--tokenizer", type=Path, help="a GGUF with the tokenizer (vocab.gguf)")
    parser.add_argument("--sizes", default="1.7B,8B", help="random-weight shapes (scale.py's)")
    parser.add_argument("--categories", default=BENCH_CATEGORIES)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=5, help="sweeps of the pass timings")
    parser.add_argument(
        "--bench-repeats", type=int, default=3, help="runs per decoder in bench (the median)"
    )
    parser.add_argument("--out", type=Path, help="folder for gpu_check.json and gpu_check.txt")
    parser.add_argument("--project", type=Path, help="a gpu_check.json to add projections to")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.max_tokens, args.repeats, args.bench_repeats = min(args.max_tokens, 12), 1, 1
        args.categories = args.categories.split(",")[0]
    if args.project:
        return project_file(args.project, 128)
    report = Report(device=describe_device(args.device), out=args.out)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        Check(args, report, Path(work)).run()
    report.save()
    print(table(report))
    return 0 if all(step.ok for step in report.steps) else 1


if __name__ == "__main__":
    raise SystemExit(main())
