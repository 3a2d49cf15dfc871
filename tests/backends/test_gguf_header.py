"""specchat's own GGUF header reader gives what the gguf package's reader gives — metadata, tensor
types, shapes and bytes — without parsing the vocabulary; a file that is not GGUF is one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specchat.backends.gguf.header import GGUFHeader
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
