"""specchat's own GGUF header reader gives what the gguf package's reader gives — metadata, tensor
types, shapes and bytes — without parsing the vocabulary; a file that is not GGUF is one line."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from specchat.backends.gguf.header import GGUFHeader, read_header
from specchat.errors import SpecchatError


def test_tensors_and_metadata_equal_the_gguf_packages_reader(bundled_gguf: Path):
    import gguf

    ours, theirs = GGUFHeader(bundled_gguf), gguf.GGUFReader(bundled_gguf)
    assert [t.name for t in theirs.tensors] == list(ours.tensors)
    for tensor in theirs.tensors:
        expected, got = np.asarray(tensor.data), ours.data(tensor.name)
        assert ours.type_name(tensor.name) == tensor.tensor_type.name
        assert got.dtype == expected.dtype and got.shape == expected.shape, tensor.name
        assert np.array_equal(got.view(np.uint8), expected.view(np.uint8)), tensor.name
    for key, field in theirs.fields.items():
        if key in ours.metadata and ours.metadata[key] is not None:
            assert ours.metadata[key] == field.contents(), key
    assert ours.metadata["general.architecture"] == "llama"
    assert ours.metadata["tokenizer.ggml.tokens"] is None  # long arrays are skipped


@pytest.mark.parametrize("kind", ["empty", "junk", "truncated"])
def test_what_is_not_gguf_is_one_line(tmp_path: Path, bundled_gguf: Path, kind: str):
    broken = tmp_path / f"{kind}.gguf"
    data = bundled_gguf.read_bytes()
    cut = {"empty": b"", "junk": b"not a model\n" * 99, "truncated": data[: len(data) // 2]}
    broken.write_bytes(cut[kind])
    with pytest.raises(SpecchatError, match=f"cannot load {kind}.gguf: not a valid GGUF model"):
        GGUFHeader(broken)


def test_the_vocabulary_key_is_the_digest_of_the_tokens_the_gguf_package_reads(bundled_gguf: Path):
    """Two files whose keys agree can draft for each other: the key is the tokenizer's model and
    every token as the file spells it (length and bytes), in id order."""
    import gguf

    field = gguf.GGUFReader(bundled_gguf).fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[index]) for index in field.data]
    digest = hashlib.sha256(b"gpt2")
    for token in tokens:
        digest.update(struct.pack("<Q", len(token)) + token)
    assert GGUFHeader(bundled_gguf).vocabulary_key() == digest.hexdigest()


def test_a_header_is_read_once_while_the_file_stays_the_same(tmp_path: Path, bundled_gguf: Path):
    """A start reads the header to choose the runtime, to check it and to load it: parsed once.
    A file written over, in place with its size and mtime kept (as within one tick of the
    clock) or replaced (a model downloaded again), is read anew."""
    model = tmp_path / "model.gguf"
    shutil.copyfile(bundled_gguf, model)
    first = read_header(model)
    assert read_header(model) is first and read_header(str(model)) is first
    stat = model.stat()
    with model.open("r+b") as file:  # another architecture, written over in place
        data = file.read(first._data_start)
        at = data.index(b"llama", data.index(b"general.architecture"))
        file.seek(at)
        file.write(b"gemma")
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert model.stat().st_mtime_ns == stat.st_mtime_ns and model.stat().st_ino == stat.st_ino
    assert read_header(model).metadata["general.architecture"] == "gemma"
    data = bytearray(model.read_bytes())
    data[len(data) // 2 :] = b""
    model.with_suffix(".part").write_bytes(data)
    os.replace(model.with_suffix(".part"), model)
    with pytest.raises(SpecchatError, match="not a valid GGUF model"):
        read_header(model)
