"""Decoder variants, `name:param=value[,param=value]`: what `compare -d` and the race picker read."""

from __future__ import annotations

import pytest

from specchat.decoding.registry import DECODERS
from specchat.errors import SpecchatError
from specchat.evaluation.variants import (
    LIBRARY_FIXED_DRAFT,
    DecoderVariant,
    fixed_draft_variants,
    parse_variant,
)
from tests.cli import run_cli


def test_a_plain_name_is_the_decoder_itself():
    variant = parse_variant(" pld ")
    assert variant == DecoderVariant("pld") and variant.label == "pld"
    assert variant.values() == {}


def test_a_variant_sets_typed_parameters_over_the_others():
    variant = parse_variant("pld:fixed_draft=10, max-ngram=2")
    assert variant.name == "pld" and variant.label == "pld:fixed_draft=10,max_ngram=2"
    assert variant.values() == {"fixed_draft": 10, "max_ngram": 2}
    merged = variant.with_params({"max_ngram": 3, "min_ngram": 1})
    assert merged == {"max_ngram": 2, "min_ngram": 1, "fixed_draft": 10}


@pytest.mark.parametrize(
    "spec,url,label",
    [
        ("server@127.0.0.1:8080", "http://127.0.0.1:8080/v1", "server@127.0.0.1:8080"),
        ("server@http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1", "server@127.0.0.1:8080"),
        ("server@https://gpu:8000", "https://gpu:8000/v1", "server@https://gpu:8000"),
        ("server@http://h:1/api", "http://h:1/api", "server@h:1/api"),
    ],
)
def test_a_server_is_spelled_by_its_address_and_read_back(spec, url, label):
    variant = parse_variant(spec)
    assert variant.name == "server" and variant.server == url and variant.label == label
    assert parse_variant(variant.label) == variant


@pytest.mark.parametrize(
    "spec,message",
    [
        ("nope:fixed_draft=1", "unknown decoder"),
        ("pld:fixed_draft", "name:param=value"),
        ("pld:=3", "name:param=value"),
        ("pld:width=3", "no parameter 'width'"),
        ("pld:fixed_draft=many", "must be an integer"),
        ("pld:fixed_draft=-1", "must be ≥ 0"),
        ("server@", "server@HOST:PORT"),
        ("server@ftp://host", "server@HOST:PORT"),
    ],
)
def test_bad_spellings_say_what_is_wrong(spec, message):
    with pytest.raises(SpecchatError, match=message):
        parse_variant(spec)


def test_the_race_picker_offers_fixed_drafts_of_the_speculative_decoders():
    offered = fixed_draft_variants()
    speculative = [n for n, cls in DECODERS.items() if cls.speculative]
    assert [v.name for v in offered] == speculative
    assert all(v.values() == {"fixed_draft": LIBRARY_FIXED_DRAFT} for v in offered)


def test_compare_refuses_a_bad_variant_in_one_line():
    result = run_cli("compare", "hi", "-d", "pld:fixed_draft=x")
    assert result.returncode == 2
    assert "pld.fixed_draft must be an integer" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
