"""The transformers backend: tree blocks, commits, greedy decoding, token bytes, loading.

Exactness is checked twice: here on a tiny random float64 Llama (to ~1e-9, so any mask or position
mistake shows), and in test_contract.py on the bundled SmolLM2 GGUF (float32 rounding) with the
checks every backend shares. The GGUF is converted once per run, into a temporary cache dir, so
that the conversion itself is tested every time (~15 s; tests/conftest.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from specchat import hardware
from specchat.backends.base import Backend, Block, ChatMessage
from specchat.backends.hf import loading as hf_loading
from specchat.backends.hf import packed as hf_packed
from specchat.backends.hf.backend import HFBackend
from specchat.backends.hf.loading import load_hf_backend
from specchat.backends.hf.packed import stock_linears
from specchat.backends.token_bytes import byte_level_bytes, sentencepiece_bytes
from specchat.errors import SpecchatError
from tests.tiny_models import tiny_model, tiny_tokenizer


@pytest.fixture
def smol(hf_bundled: HFBackend) -> HFBackend:
    """The bundled model on this backend, loaded once per run (tests/conftest.py)."""
    return hf_bundled


@pytest.fixture(params=["sdpa", "eager"])
def tiny(request: pytest.FixtureRequest) -> HFBackend:
    """A random float64 Llama, with either attention that honours a 4-D mask."""
    return HFBackend(
        tiny_model(attention=request.param), tiny_tokenizer(), model_name="tiny", device="cpu"
    )


def exact(backend: HFBackend) -> float:
    """How closely two orderings of the same float64 computation agree.

    SDPA stays in float64 throughout; eager attention takes its softmax in float32.
    """
    return 1e-9 if backend.model.config._attn_implementation == "sdpa" else 1e-6


def sample_tree(tokens: list[int]) -> Block:
    """Root 0 with three branches of lengths 3, 2 and 1 (one forking off mid-branch), plus a
    second root with one child: 0-1-2-3, 0-4-5, 0-1-6, 7-8."""
    assert len(tokens) == 9
    return Block(tuple(tokens), (-1, 0, 1, 2, 0, 4, 1, -1, 7))


def logits_of(backend: HFBackend, block: Block) -> np.ndarray:
    """Logits at the model's own precision (float64 for the tiny model)."""
    return backend.evaluate_tensor(block).double().numpy()


def check_tree_matches_branches(
    backend: HFBackend, prefix: list[int], block: Block, atol: float
) -> np.ndarray:
    backend.rollback(0)
    backend.prefill(prefix)
    tree_logits = logits_of(backend, block)
    assert tree_logits.shape == (len(block), backend.vocab_size)
    checked = set()
    for leaf in block.leaves:
        path = block.path_to(leaf)
        backend.rollback(len(prefix))
        chain_logits = logits_of(backend, Block.chain([block.tokens[i] for i in path]))
        np.testing.assert_allclose(tree_logits[path], chain_logits, rtol=0, atol=atol)
        checked.update(path)
    assert checked == set(range(len(block)))

    # Were the mask ignored, the block would be one causal chain: branches would see each other.
    backend.rollback(len(prefix))
    flat_logits = logits_of(backend, Block.chain(block.tokens))
    np.testing.assert_allclose(tree_logits[:4], flat_logits[:4], rtol=0, atol=atol)
    assert np.abs(tree_logits[4:] - flat_logits[4:]).max() > 100 * atol
    backend.rollback(len(prefix))
    return tree_logits


# -- tree blocks -----------------------------------------------------------------------------------


def test_tree_logits_equal_branch_logits_tiny(tiny: HFBackend) -> None:
    rng = np.random.default_rng(1)
    prefix = rng.integers(2, 128, size=11).tolist()
    block = sample_tree(rng.integers(2, 128, size=9).tolist())
    check_tree_matches_branches(tiny, prefix, block, atol=exact(tiny))
    assert tiny.evaluate(block).dtype == np.float32


def test_tree_on_empty_prefix_and_second_root(tiny: HFBackend) -> None:
    block = sample_tree(list(range(10, 19)))
    tree_logits = logits_of(tiny, block)
    tiny.rollback(0)
    second_root = logits_of(tiny, Block.chain([17, 18]))
    np.testing.assert_allclose(tree_logits[[7, 8]], second_root, rtol=0, atol=exact(tiny))


# -- commit and rollback -----------------------------------------------------------------------


@pytest.mark.parametrize("leaf", [5, 6, 8, 2])
def test_commit_branch_equals_prefill_tiny(tiny: HFBackend, leaf: int) -> None:
    check_commit_equals_prefill(
        tiny, list(range(20, 31)), sample_tree(list(range(40, 49))), leaf, exact(tiny)
    )


def check_commit_equals_prefill(
    backend: HFBackend, prefix: list[int], block: Block, leaf: int, atol: float
) -> None:
    path = block.path_to(leaf)
    follow = Block.chain([block.tokens[0], block.tokens[-1], block.tokens[3]])

    backend.rollback(0)
    backend.prefill(prefix)
    backend.evaluate(block)
    backend.commit(path)
    assert backend.n_committed == len(prefix) + len(path)
    after_commit = logits_of(backend, follow)

    backend.rollback(0)
    backend.prefill(prefix + [block.tokens[i] for i in path])
    from_scratch = logits_of(backend, follow)
    np.testing.assert_allclose(after_commit, from_scratch, rtol=0, atol=atol)
    backend.rollback(0)


def test_uncommitted_block_is_dropped(tiny: HFBackend) -> None:
    tiny.prefill([5, 6, 7])
    reference = logits_of(tiny, Block.chain([8, 9]))
    tiny.evaluate(sample_tree(list(range(50, 59))))  # not committed
    np.testing.assert_allclose(logits_of(tiny, Block.chain([8, 9])), reference, atol=1e-12)
    tiny.evaluate(Block.chain([60, 61]))
    tiny.prefill([])  # drops the pending block too
    np.testing.assert_allclose(logits_of(tiny, Block.chain([8, 9])), reference, atol=1e-12)
    assert tiny.n_committed == 3
    tiny.commit([0])
    tiny.rollback(2)
    tiny.prefill([7])
    np.testing.assert_allclose(logits_of(tiny, Block.chain([8, 9])), reference, atol=exact(tiny))


def test_commit_rejects_a_path_that_is_no_chain(tiny: HFBackend) -> None:
    tiny.evaluate(sample_tree(list(range(50, 59))))
    with pytest.raises(ValueError):
        tiny.commit([0, 4, 6])
    with pytest.raises(ValueError):
        tiny.commit([1, 2])
    with pytest.raises(ValueError):
        tiny.rollback(5)


def test_context_limit(tiny: HFBackend) -> None:
    assert tiny.n_ctx == 256
    tiny.prefill((list(range(2, 128)) * 2)[:252])
    assert tiny.n_committed == 252
    tiny.evaluate(Block.chain([10, 11, 12, 13]))
    with pytest.raises(SpecchatError, match="context full"):
        tiny.evaluate(Block.chain(list(range(10, 15))))


# -- greedy decoding -------------------------------------------------------------------------------


def greedy(backend: HFBackend, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """The pending-token loop the decoders use: the context's last token is not yet cached."""
    backend.rollback(0)
    backend.prefill(prompt_ids[:-1])
    context = list(prompt_ids)
    for _ in range(max_new_tokens):
        logits = backend.evaluate(Block.chain([context[-1]]))
        token = int(np.argmax(logits[0]))
        backend.commit([0])
        context.append(token)
        if token in backend.eos_ids:
            break
    return context[len(prompt_ids) :]


def generate(backend: HFBackend, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy, with its own nn.Linear (not our prepacked weights)."""
    input_ids = torch.tensor([prompt_ids])
    with torch.inference_mode(), stock_linears(backend.model):
        output = backend.model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=min(backend.eos_ids),
        )
    return output[0, len(prompt_ids) :].tolist()


@pytest.mark.slow
def test_greedy_loop_equals_generate(smol: HFBackend) -> None:
    chat = smol.chat_prompt([ChatMessage("user", "Write a short poem about the sea.")])
    prompts = [
        smol.tokenize(chat, special=True),
        smol.tokenize("The history of the Roman Empire begins"),
        smol.tokenize("def fibonacci(n):\n    "),
    ]
    for prompt_ids in prompts:
        ours = greedy(smol, prompt_ids, 36)
        assert ours == generate(smol, prompt_ids, 36)
        assert len(ours) >= 8


def test_float32_runs_prepacked_and_a_block_equals_one_token_passes() -> None:
    """A float32 model on the CPU runs its linear layers from oneDNN-prepacked weights (drafted
    tokens cost little), its logits match transformers' own to float32 rounding, and each block
    row agrees with the one-token pass greedy would have made as closely as unpacked ones do."""
    model = tiny_model(dtype=torch.float32, peaked=4.0)
    backend = HFBackend(model, tiny_tokenizer(), model_name="tiny32", device="cpu")
    assert backend.packed
    prompt, chain = [5, 17, 33, 2, 90], [7, 8, 9, 10, 11, 12]
    backend.prefill(prompt)
    block = logits_of(backend, Block(tuple(chain), tuple(range(-1, len(chain) - 1))))
    with stock_linears(model):
        stock = logits_of(backend, Block(tuple(chain), tuple(range(-1, len(chain) - 1))))
    np.testing.assert_allclose(block, stock, atol=1e-4)
    backend.rollback(len(prompt))
    for i, token in enumerate(chain):
        single = logits_of(backend, Block((token,), (-1,)))
        backend.commit([0])
        np.testing.assert_allclose(single[0], block[i], rtol=0, atol=2e-6)


def test_float32_without_room_for_the_packed_copy_runs_stock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the copy would not fit in half the free memory the model is left as it is, and
    greedy still equals transformers' own."""
    monkeypatch.setattr(hf_packed, "_available_bytes", lambda: 0)
    backend = HFBackend(
        tiny_model(dtype=torch.float32), tiny_tokenizer(), model_name="tiny32", device="cpu"
    )
    assert not backend.packed
    prompt_ids = [5, 17, 33, 2, 90]
    assert greedy(backend, prompt_ids, 20) == generate(backend, prompt_ids, 20)


def test_greedy_loop_equals_generate_tiny(tiny: HFBackend) -> None:
    prompt_ids = [5, 17, 33, 2, 90]
    assert greedy(tiny, prompt_ids, 30) == generate(tiny, prompt_ids, 30)


# -- tokenizer -------------------------------------------------------------------------------------


def test_control_tokens_and_chat_prompt(smol: HFBackend) -> None:
    assert smol.tokenize("<|im_start|>", special=True) == [1]
    assert 1 not in smol.tokenize("<|im_start|>")
    assert smol.token_bytes(2) == b"<|im_end|>"
    assert smol.eos_ids == frozenset({2})
    assert smol.vocab_size == 49152
    assert smol.n_ctx == 8192
    assert smol.name == "hf" and smol.device == "cpu"
    assert smol.model_name == "SmolLM2-135M-Instruct.Q4_1"
    prompt = smol.chat_prompt([ChatMessage("user", "Hi")])
    assert prompt.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nHi<|im_end|>" in prompt
    assert isinstance(smol, Backend)


def test_token_bytes_helpers() -> None:
    assert byte_level_bytes("Ġhello") == b" hello"
    assert byte_level_bytes("Ċ") == b"\n"
    assert byte_level_bytes("ä½") == "你".encode()[:2]
    assert sentencepiece_bytes("▁hello") == b" hello"
    assert sentencepiece_bytes("<0x0A>") == b"\n"
    assert sentencepiece_bytes("<0xE4>") == b"\xe4"
    assert sentencepiece_bytes("日本") == "日本".encode()


# -- loading and errors ----------------------------------------------------------------------------


def one_line_error(excinfo: pytest.ExceptionInfo[SpecchatError]) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message
    return message


def test_missing_model_path(tmp_path: Path) -> None:
    with pytest.raises(SpecchatError) as excinfo:
        load_hf_backend(str(tmp_path / "nowhere"))
    assert "not found" in one_line_error(excinfo)
    with pytest.raises(SpecchatError) as excinfo:
        load_hf_backend(str(tmp_path), gguf_file="missing.gguf")
    assert "not found" in one_line_error(excinfo)


def test_hub_id_not_in_local_cache() -> None:
    with pytest.raises(SpecchatError) as excinfo:
        load_hf_backend("no-such-org/no-such-model")
    assert "not in the local Hugging Face cache" in one_line_error(excinfo)


def test_corrupt_gguf(tmp_path: Path, session_cache: Path) -> None:
    (tmp_path / "broken.gguf").write_bytes(b"GGUF" + os.urandom(4096))
    with pytest.raises(SpecchatError) as excinfo:
        load_hf_backend(str(tmp_path), gguf_file="broken.gguf")
    assert "broken.gguf" in one_line_error(excinfo)
    leftovers = list((session_cache / hf_loading.GGUF_CACHE_FOLDER).glob("*broken*"))
    assert leftovers == []


def test_corrupt_model_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{ this is not json")
    with pytest.raises(SpecchatError) as excinfo:
        load_hf_backend(str(tmp_path))
    assert "cannot load model" in one_line_error(excinfo)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda(tmp_path: Path) -> None:
    with pytest.raises(SpecchatError) as excinfo:
        load_hf_backend(str(tmp_path), device="cuda")
    assert one_line_error(excinfo).startswith("CUDA is not available: ")


def test_bad_device_and_dtype(tmp_path: Path) -> None:
    with pytest.raises(SpecchatError, match="float16"):
        load_hf_backend(str(tmp_path), dtype="float16")
    with pytest.raises(SpecchatError, match="dtype"):
        load_hf_backend(str(tmp_path), dtype="int8")
    with pytest.raises(SpecchatError, match="device"):
        load_hf_backend(str(tmp_path), device="tpu")


def test_load_model_directory(tmp_path: Path) -> None:
    model = tiny_model(dtype=torch.float32)
    model.generation_config.eos_token_id = [1, 3]
    model.save_pretrained(tmp_path / "tiny")
    tiny_tokenizer(eos=1).save_pretrained(tmp_path / "tiny")
    backend = load_hf_backend(str(tmp_path / "tiny"), dtype="bfloat16", threads=1, n_ctx=100)
    assert torch.get_num_threads() == 1
    assert backend.model.dtype == torch.bfloat16
    assert backend.model_name == "tiny"
    assert backend.eos_ids == frozenset({1, 3})
    assert backend.n_ctx == 100
    assert backend.tokenize("t5 t9") == [5, 9]
    logits = backend.evaluate(Block.chain([5, 9]))
    assert logits.dtype == np.float32 and logits.shape == (2, 128)
    backend.close()
    threads = torch.get_num_threads()
    load_hf_backend(str(tmp_path / "tiny")).close()
    assert torch.get_num_threads() == hardware.physical_cores()
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_converted_cache_is_reused_not_redone_and_identical(
    smol: HFBackend, bundled_gguf: Path
) -> None:
    # converted when the suite's cache did not hold the conversion (the conversion code changed)
    converting = "converting GGUF to safetensors (once)…" in smol.load_messages  # type: ignore[attr-defined]
    assert converting != smol.converted_before  # type: ignore[attr-defined]
    ours = hf_loading.conversion_dir(bundled_gguf)
    temporaries = {path.name for path in hf_loading.conversion_temporaries(ours)}
    assert temporaries <= smol.temporaries_before  # type: ignore[attr-defined]  # none left by this one
    assert (ours / "model.safetensors").is_file()

    messages: list[str] = []
    again = load_hf_backend(
        str(bundled_gguf.parent), gguf_file=bundled_gguf.name, threads=1, progress=messages.append
    )
    assert not any("convert" in message for message in messages)  # the saved model, read back

    # The folder alone (its one GGUF file) or the file's own path find the same conversion.
    for form in (bundled_gguf.parent, bundled_gguf):
        messages.clear()
        load_hf_backend(str(form), threads=1, progress=messages.append).close()
        assert not any("convert" in message for message in messages)

    ids = smol.tokenize("A converted model must give the very same logits")
    for backend in (smol, again):
        backend.rollback(0)
        backend.prefill(ids[:-3])
    first, second = (b.evaluate(Block.chain(ids[-3:])) for b in (smol, again))
    np.testing.assert_array_equal(first, second)
    smol.rollback(0)
    again.close()


def test_killed_conversion_leaves_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"not really")

    def interrupted(source: Path, target: Path, progress: object) -> None:
        (target / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(hf_loading, "_convert_gguf", interrupted)
    with pytest.raises(KeyboardInterrupt):
        hf_loading.converted_gguf_dir(gguf)
    assert list((tmp_path / "cache" / hf_loading.GGUF_CACHE_FOLDER).iterdir()) == []

    def complete(source: Path, target: Path, progress: object) -> None:
        (target / "config.json").write_text("{}")
        (target / "model.safetensors").write_bytes(b"")

    monkeypatch.setattr(hf_loading, "_convert_gguf", complete)
    converted = hf_loading.converted_gguf_dir(gguf)
    assert converted.name.startswith("model-") and (converted / "config.json").is_file()
    monkeypatch.setattr(hf_loading, "_convert_gguf", interrupted)
    assert hf_loading.converted_gguf_dir(gguf) == converted  # reused, not converted again

    # the same file installed again (a reinstalled package): converted again, the old copy goes
    os.utime(gguf, ns=(gguf.stat().st_atime_ns, gguf.stat().st_mtime_ns + 10**9))
    monkeypatch.setattr(hf_loading, "_convert_gguf", complete)
    again = hf_loading.converted_gguf_dir(gguf)
    assert again != converted and again.is_dir()
    assert list(again.parent.iterdir()) == [again]


def test_two_installs_of_one_model_keep_a_conversion_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two virtual environments, each with its own copy of the bundled model (same name and
    size, another mtime), share one cache: neither may take the other's conversion away, or
    each start converts again (it did: two suites run at once failed on it)."""
    monkeypatch.setenv("SPECCHAT_CACHE_DIR", str(tmp_path / "cache"))

    def complete(source: Path, target: Path, progress: object) -> None:
        (target / "config.json").write_text("{}")
        (target / "model.safetensors").write_bytes(source.read_bytes())

    monkeypatch.setattr(hf_loading, "_convert_gguf", complete)
    first, second = (tmp_path / venv / "model.gguf" for venv in ("venv-a", "venv-b"))
    for number, gguf in enumerate((first, second)):
        gguf.parent.mkdir()
        gguf.write_bytes(b"the same model")
        os.utime(gguf, ns=(10**18, 10**18 + number * 10**9))
    ours, theirs = (hf_loading.converted_gguf_dir(gguf) for gguf in (first, second))
    assert ours != theirs and ours.is_dir() and theirs.is_dir()

    messages: list[str] = []
    assert hf_loading.converted_gguf_dir(first, messages.append) == ours
    assert not messages  # not converted again

    # a conversion an older specchat made for this name and size (no path in its name) goes
    older = ours.parent / f"model-{first.stat().st_size}-123-v1"
    older.mkdir()
    os.utime(first, ns=(10**18, 10**18 + 5 * 10**9))  # the first venv's package reinstalled
    renewed = hf_loading.converted_gguf_dir(first)
    assert sorted(ours.parent.iterdir()) == sorted([renewed, theirs])


def test_chat_prompt_without_template(tiny: HFBackend) -> None:
    prompt = tiny.chat_prompt([ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")])
    assert prompt == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_the_cache_goes_by_the_name_the_installed_transformers_takes(tiny: HFBackend):
    """transformers 5.24 renamed `past_key_values` to `cache` and warns on the old name: a user
    would see a FutureWarning on stderr with every answer. Either version: no warning."""
    import warnings

    tiny.rollback(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        tiny.prefill([1, 2, 3])
        tiny.evaluate(Block.chain([4, 5]))
        tiny.commit([0, 1])
    assert tiny.n_committed == 5
