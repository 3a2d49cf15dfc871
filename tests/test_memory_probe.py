"""The memory probe tells weights a cache holds from weights that stream from main memory."""

from __future__ import annotations

import platform

import pytest

from specchat import memory_probe


def test_a_working_set_that_fits_the_core_cache_reads_as_cache_resident():
    # 1 MB sits in any CPU's second or last cache; the large buffer exceeds the last one. A
    # smaller set reads too briefly to time: on an AMD EPYC (Zen 4) a scan of 64 KB cost about
    # what numpy's call does, 35 GB/s, no faster than that CPU's memory (34-44 GB/s)
    reading = memory_probe.probe(1024 * 1024)
    assert reading.cached, reading.describe()
    assert reading.weights_gbps > reading.memory_gbps > 0
    assert reading.describe().startswith("weights cache-resident: 1 MB read at ")


@pytest.mark.skipif(platform.system() != "Linux", reason="sysfs lists the caches on Linux")
def test_the_last_cache_is_the_largest_that_linux_lists():
    size = memory_probe.last_cache_bytes()
    if size is None:
        pytest.skip("this system lists no CPU caches")
    assert size >= 256 * 1024  # no CPU's last cache is smaller


def test_weights_no_cache_could_hold_are_not_read():
    # a model of a terabyte: reading (or allocating) a buffer of its size would never end
    reading = memory_probe.probe(1 << 40)
    assert not reading.cached
    assert reading.weights_gbps == reading.memory_gbps > 0
    assert reading.describe().startswith("weights from memory: 1048576 MB larger than the cache")
