"""One way to load a model: `load_model` honours device, dtype, threads and n_ctx on both
backends, and `load_draft` loads a draft beside a target without changing the target's threads.

Models are real: tiny Llamas built from a config and saved as Hugging Face directories, and the
bundled SmolLM2.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specchat.backends.hf.backend import HFBackend
from specchat.decoding.plain import GreedyDecoder
from specchat.engine.events import DoneEvent
from specchat.engine.local import Engine
from specchat.engine.protocol import GenerationRequest
from specchat.errors import SpecchatError
from specchat.hardware import physical_cores
from specchat.models import LoadOptions, check_same_vocabulary, load_draft, load_model
from tests.tiny_models import tiny_model, tiny_tokenizer


@pytest.fixture(autouse=True)
def torch_threads() -> Iterator[None]:
    """Loading sets torch's process-wide thread count; give the next test the one it had."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny float32 Llamas on disk: a target, a draft with its vocabulary, one with another."""
    root = tmp_path_factory.mktemp("models")
    made = {}
    for name, vocab_size, seed in (("target", 128, 0), ("draft", 128, 1), ("wide", 512, 2)):
        folder = root / name
        tiny_model(vocab_size, seed=seed, dtype=torch.float32).save_pretrained(folder)
        tiny_tokenizer(vocab_size).save_pretrained(folder)
        made[name] = folder
    return made


def one_line_error(excinfo: pytest.ExceptionInfo[SpecchatError]) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message
    return message


def generate(backend, prompt: list[int], max_tokens: int) -> DoneEvent:
    events = list(
        Engine(backend, GreedyDecoder()).generate(GenerationRequest(tuple(prompt), max_tokens))
    )
    assert isinstance(events[-1], DoneEvent)
    return events[-1]


# -- load_model ------------------------------------------------------------------------------------


def test_n_ctx_is_the_hf_context_limit(model_dirs: dict[str, Path]) -> None:
    backend = load_model(str(model_dirs["target"]), LoadOptions(threads=1, n_ctx=32))
    assert backend.name == "hf" and backend.n_ctx == 32

    done = generate(backend, [5, 6, 7] * 8, max_tokens=100)  # a prompt this model ends with no EOS
    assert done.finish_reason == "context_full"
    assert 24 + len(done.token_ids) == 32

    with pytest.raises(SpecchatError) as excinfo:
        generate(backend, list(range(3, 43)), max_tokens=4)
    assert "context window holds 32" in one_line_error(excinfo)
    backend.close()

    # The default asks for 4096 tokens; the model's own limit (256) is the smaller.
    assert load_model(str(model_dirs["target"]), LoadOptions(threads=1)).n_ctx == 256


def test_hf_honours_dtype_and_threads(model_dirs: dict[str, Path]) -> None:
    threads = physical_cores() + 1  # never the default, so a reset would show
    backend = load_model(str(model_dirs["target"]), LoadOptions(threads=threads, dtype="bfloat16"))
    assert torch.get_num_threads() == threads == backend.threads
    assert backend.model.dtype == torch.bfloat16
    backend.close()


@pytest.mark.slow
def test_llama_honours_threads_and_n_ctx(bundled_gguf: Path) -> None:
    backend = load_model(None, LoadOptions(backend="llama", threads=1, n_ctx=512))
    try:
        assert backend.name == "llama" and backend.threads == 1 and backend.n_ctx == 512
        done = generate(backend, backend.tokenize("word " * 600)[:500], max_tokens=100)
        assert done.finish_reason == "context_full"
    finally:
        backend.close()


def test_llama_backend_needs_a_gguf(model_dirs: dict[str, Path]) -> None:
    with pytest.raises(SpecchatError) as excinfo:
        load_model(str(model_dirs["target"]), LoadOptions(backend="llama"))
    assert "the llama backend needs a GGUF file" in one_line_error(excinfo)
    with pytest.raises(SpecchatError) as excinfo:
        load_model(None, LoadOptions(device="tpu"))
    assert "unknown device" in one_line_error(excinfo)
    with pytest.raises(SpecchatError) as excinfo:
        load_model(None, LoadOptions(backend="vllm"))
    assert "unknown backend" in one_line_error(excinfo)


# -- load_draft ------------------------------------------------------------------------------------


def test_loading_a_draft_keeps_torch_threads(model_dirs: dict[str, Path]) -> None:
    threads = physical_cores() + 1
    target = load_model(str(model_dirs["target"]), LoadOptions(threads=threads, n_ctx=64))
    assert torch.get_num_threads() == threads

    for options in (LoadOptions(), LoadOptions(threads=1)):
        draft = load_draft(str(model_dirs["draft"]), options, target)
        assert torch.get_num_threads() == threads
        assert draft.threads == threads and draft.name == "hf"
        assert draft.n_ctx == target.n_ctx == 64

    # Loaded once per process: every decoder drafting with it shares it.
    assert load_draft(str(model_dirs["draft"]), LoadOptions(), target) is draft


def test_self_speculation_draft(model_dirs: dict[str, Path], llama_backend) -> None:
    target = load_model(str(model_dirs["target"]), LoadOptions(threads=1, n_ctx=64))
    draft = load_draft("self:1", LoadOptions(), target)
    assert draft.name == "hf" and draft.model_name == "target (first 1 layers)"
    assert draft.n_ctx == 64 and draft.vocab_size == target.vocab_size

    for spec, message in (("self:x", "draft 'self:x': use self:LAYERS"), ("self:2", "layers < 2")):
        with pytest.raises(SpecchatError) as excinfo:
            load_draft(spec, LoadOptions(), target)
        assert message in one_line_error(excinfo)
    with pytest.raises(SpecchatError) as excinfo:
        load_draft("self:1", LoadOptions(), llama_backend)
    assert one_line_error(excinfo) == "self-speculation (draft self:L) needs the hf backend"


def test_no_default_draft_but_for_the_bundled_model_on_hf(
    model_dirs: dict[str, Path], llama_backend
) -> None:
    target = load_model(str(model_dirs["target"]), LoadOptions(threads=1))
    with pytest.raises(SpecchatError) as excinfo:
        load_draft(None, LoadOptions(), target)
    assert one_line_error(excinfo) == (
        "decoder 'draft' is unavailable: no default draft for this model: pass --draft MODEL"
    )
    with pytest.raises(SpecchatError) as excinfo:
        load_draft(None, LoadOptions(), llama_backend)
    assert one_line_error(excinfo) == (
        "decoder 'draft' is unavailable: the bundled model has no smaller sibling on llama.cpp:"
        " pass --draft MODEL"
    )


def test_default_draft_of_the_bundled_model_on_hf(bundled_gguf: Path) -> None:
    target = load_model(None, LoadOptions(backend="hf", threads=1, n_ctx=1024))
    try:
        draft = load_draft(None, LoadOptions(), target)
        # the same GGUF on the runtime whose kept one-token pass is the cheaper (a draft runs
        # plain passes), on the target's threads
        from specchat.backends.block_cost import BlockCostTable
        from specchat.backends.registry import runtime as registered

        one_token = {
            runtime: BlockCostTable.kept(registered(runtime).cost_key(bundled_gguf), "cpu", 1).cost(
                1
            )
            for runtime in ("int4", "llama")
        }
        assert draft.name == min(one_token, key=one_token.get)
        assert draft.model_name == target.model_name
        assert draft.n_ctx == 1024
        assert torch.get_num_threads() == 1  # on the target's threads: loading it kept them
    finally:
        target.close()


def test_a_draft_with_another_vocabulary_is_refused(model_dirs: dict[str, Path]) -> None:
    target = load_model(str(model_dirs["target"]), LoadOptions(threads=1))
    with pytest.raises(SpecchatError) as excinfo:
        load_draft(str(model_dirs["wide"]), LoadOptions(), target)
    assert one_line_error(excinfo) == (
        "the draft's vocabulary (512 tokens) does not match the target's (128)"
    )

    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(128)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    renamed = HFBackend(
        tiny_model(dtype=torch.float32),
        PreTrainedTokenizerFast(tokenizer_object=words, eos_token="w2"),
        model_name="renamed",
        device="cpu",
    )
    with pytest.raises(SpecchatError) as excinfo:
        check_same_vocabulary(target, renamed)
    assert one_line_error(excinfo) == (
        "the draft's vocabulary does not match the target's (token 0 differs)"
    )
