"""The int4 runtime keeps a model's laid-out weights on disk: a later start maps them instead of
laying every weight out again (1.0 s of the bundled model's start, 19 s of a 1.7B file's), and
answers exactly as a start that laid them out."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from specchat.backends.gguf.tensors import GGUFTensors
from specchat.backends.int4 import linear, packed
from specchat.backends.int4.backend import ancestry
from specchat.backends.int4.model import Int4Model

PROMPT = [1, 504, 3458, 282, 4260, 314, 253, 3397, 30]  # a few of the bundled vocabulary's ids


@pytest.fixture
def packed_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "int4-packed"
    monkeypatch.setattr(packed, "folder", lambda: where)
    return where


def logits_of(path: Path) -> np.ndarray:
    model = Int4Model(GGUFTensors(path), n_ctx=64, max_block=8, threads=1)
    rows = range(len(PROMPT))
    return model.forward(PROMPT, rows, ancestry(range(-1, len(PROMPT) - 1)), 0, logits=True)


def refuse_to_lay_out(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args, **kwargs):
        raise AssertionError("a weight was laid out again")

    monkeypatch.setattr(linear, "four_bit_linear", refused)
    monkeypatch.setattr(linear, "linear_for", refused)
    monkeypatch.setattr(linear, "rows_linear", refused)
    import specchat.backends.int4.model as model_module

    monkeypatch.setattr(model_module, "linear_for", refused)
    monkeypatch.setattr(model_module, "rows_linear", refused)


def test_a_second_start_maps_the_weights_the_first_laid_out(
    bundled_gguf: Path, packed_here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    laid_out = logits_of(bundled_gguf)
    assert len(list(packed_here.glob("*.bin"))) == 1
    with monkeypatch.context() as patched:
        refuse_to_lay_out(patched)
        mapped = logits_of(bundled_gguf)
    assert np.array_equal(laid_out, mapped)


def test_a_changed_file_or_a_broken_entry_is_laid_out_again(
    bundled_gguf: Path, packed_here: Path, tmp_path: Path
) -> None:
    model = tmp_path / "model.gguf"
    shutil.copyfile(bundled_gguf, model)
    first = logits_of(model)
    (entry,) = packed_here.glob("*.bin")
    stat = model.stat()
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the file changed
    assert np.array_equal(logits_of(model), first)
    (newer,) = packed_here.glob("*.bin")  # the older entry of the same file is gone
    assert newer != entry
    whole = newer.stat().st_size
    with open(newer, "r+b") as data:  # cut short, as by a full disk or a crash
        data.truncate(whole // 2)
    assert np.array_equal(logits_of(model), first)
    assert [path.stat().st_size for path in packed_here.glob("*.bin")] == [whole]


def test_only_the_most_recently_used_models_stay_on_disk(
    bundled_gguf: Path, packed_here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packed, "_KEPT", 2)
    copies = []
    for name in ("a", "b", "c"):
        copies.append(tmp_path / f"{name}.gguf")
        shutil.copyfile(bundled_gguf, copies[-1])
        logits_of(copies[-1])
    kept = sorted(path.name.split("-")[0] for path in packed_here.glob("*.json"))
    assert kept == ["b", "c"]
    assert len(list(packed_here.glob("*.bin"))) == 2
