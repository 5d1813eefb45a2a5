"""The pod annotation k8s.volcengine.com/pod-networks: shape, which blocks are ours, bounds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdma_cni.cni.commands import conf_name, max_interfaces, requested_blocks
from rdma_cni.cni.request import Request
from rdma_cni.errors import CniError, ConfigError, TooManyInterfaces
from rdma_cni.models.annotation import (
    ANNOTATION,
    CAPABILITY,
    MAX_BLOCKS,
    our_blocks,
    parse_blocks,
    pod_annotations,
)
from rdma_cni.models.blocks import validate_blocks


def conf_with(value: object, **extra: Any) -> dict[str, Any]:
    return {"cniVersion": "0.4.0", "name": "vpc", **extra,
            "runtimeConfig": {CAPABILITY: {ANNOTATION: value, "other/annotation": "x"}}}


def rdma(**device: Any) -> dict[str, Any]:
    return {"cniConf": {"name": "rdma"}, **({"deviceConf": device} if device else {})}


def test_our_blocks_keep_their_position_in_the_whole_list() -> None:
    blocks = [{"cniConf": {"name": "vpc"}}, rdma(), {"cniConf": {"name": "other"}},
              rdma(ifName="net9")]
    got = our_blocks(conf_with(json.dumps(blocks)), "rdma", 16)
    assert got == [(1, rdma()), (3, rdma(ifName="net9"))]
    assert our_blocks(conf_with(json.dumps(blocks)), "rdma-b", 16) == []


@pytest.mark.parametrize("conf", [
    {"cniVersion": "0.4.0"},
    {"runtimeConfig": None},
    {"runtimeConfig": {}},
    {"runtimeConfig": {CAPABILITY: None}},
    {"runtimeConfig": {CAPABILITY: {"some/other": "x"}}},
])
def test_no_annotation_means_no_blocks(conf: dict[str, Any]) -> None:
    assert our_blocks(conf, "rdma", 16) == []


@pytest.mark.parametrize("conf", [{"runtimeConfig": []}, {"runtimeConfig": {CAPABILITY: "x"}}])
def test_runtime_config_of_the_wrong_type_is_code_7(conf: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="runtimeConfig"):
        pod_annotations(conf)


def test_other_networks_blocks_stay_opaque() -> None:
    weird = [{"cniConf": {"name": "other", "x": [1, None, {"y": 2}]}, "deviceConf": "nonsense",
              "ifName": 5, "zzz": {"a": [[]]}},
             {"cniConf": {"name": "", "ips": "no"}, "mac": "zz"}]
    assert our_blocks(conf_with(json.dumps(weird)), "rdma", 16) == []


@pytest.mark.parametrize(("value", "needle"), [
    ("", "not valid JSON"),
    ("[", "not valid JSON"),
    ("{}", "expected a JSON list"),
    ('"rdma"', "expected a JSON list"),
    ("null", "expected a JSON list"),
    ("[1]", "block 0 is not an object"),
    ('[{"cniConf": {"name": "rdma"}}, "rdma"]', "block 1 is not an object"),
    ('[{"name": "rdma"}]', "block 0 has no cniConf.name"),
    ('[{"cniConf": "rdma"}]', "block 0 has no cniConf.name"),
    ('[{"cniConf": {"name": 1}}]', "block 0 has no cniConf.name"),
    ('[{"cniConf": {"name": null}}]', "block 0 has no cniConf.name"),
    (["not", "a", "string"], "expected a JSON string"),
    (None, "expected a JSON string"),
    ("[" * 30_000 + "]" * 30_000, "not valid JSON"),
])
def test_malformed_annotation_is_code_7_naming_it(value: object, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        our_blocks(conf_with(value), "rdma", 16)
    assert info.value.code == 7
    assert ANNOTATION in info.value.msg and needle in info.value.msg
    assert len(info.value.msg) < 400


def test_malformed_other_block_fails_even_without_our_blocks() -> None:
    with pytest.raises(ConfigError, match="block 1"):
        our_blocks(conf_with('[{"cniConf": {"name": "other"}}, {}]'), "rdma", 16)


def test_more_of_ours_than_max_interfaces_is_code_106() -> None:
    blocks = json.dumps([rdma()] * 5 + [{"cniConf": {"name": "other"}}] * 20)
    assert len(our_blocks(conf_with(blocks), "rdma", 5)) == 5
    with pytest.raises(TooManyInterfaces) as info:
        our_blocks(conf_with(blocks), "rdma", 4)
    assert info.value.code == 106
    assert "5" in info.value.msg and "maxInterfaces" in info.value.msg


def test_block_count_is_bounded() -> None:
    small = json.dumps([{"cniConf": {"name": "o"}}] * (MAX_BLOCKS + 1))
    with pytest.raises(ConfigError, match=f"at most {MAX_BLOCKS}"):
        parse_blocks(small)
    assert len(parse_blocks(json.dumps([{"cniConf": {"name": "o"}}] * MAX_BLOCKS))) == MAX_BLOCKS


def test_ten_thousand_blocks_are_code_7() -> None:
    huge = json.dumps([rdma()] * 10_000)
    with pytest.raises(ConfigError) as info:
        our_blocks(conf_with(huge), "rdma", 64)
    assert info.value.code == 7 and ANNOTATION in info.value.msg


def test_annotation_size_is_bounded_in_bytes() -> None:
    # 40 000 characters, 80 kB in UTF-8
    fat = json.dumps([{"cniConf": {"name": "o"}, "pad": "é" * 40_000}], ensure_ascii=False)
    assert len(fat) < 64 * 1024 < len(fat.encode())
    with pytest.raises(ConfigError, match="larger than"):
        parse_blocks(fat)


def test_config_helpers_validate_the_raw_values() -> None:
    assert (conf_name({}), max_interfaces({})) == ("rdma", 16)
    assert (conf_name({"cniConfName": "x"}), max_interfaces({"maxInterfaces": 64})) == ("x", 64)
    for value in ("", 5):
        with pytest.raises(ConfigError, match="cniConfName"):
            conf_name({"cniConfName": value})
    for value in (0, 65, True, "4"):
        with pytest.raises(ConfigError, match="maxInterfaces"):
            max_interfaces({"maxInterfaces": value})


def test_requested_blocks_use_the_configured_name() -> None:
    blocks = json.dumps([rdma(), {"cniConf": {"name": "rdma-b"}}])
    req = Request(command="ADD", conf=conf_with(blocks, cniConfName="rdma-b"),
                  cni_version="0.4.0")
    assert requested_blocks(req) == [(1, {"cniConf": {"name": "rdma-b"}})]


# -- fuzz ---------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=20)
BLOCKISH = st.one_of(
    JSON,
    st.fixed_dictionaries({"cniConf": st.fixed_dictionaries({"name": st.sampled_from(
        ["rdma", "other", ""])})}, optional={"deviceConf": JSON, "name": JSON, "x": JSON}),
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.lists(BLOCKISH, max_size=6).map(json.dumps), JSON))
def test_fuzz_parse_blocks_raises_only_cni_errors(text: object) -> None:
    try:
        blocks = parse_blocks(text)
    except CniError as exc:
        assert exc.code == 7 and ANNOTATION in exc.msg
        return
    assert isinstance(blocks, list)
    assert all(isinstance(b["cniConf"]["name"], str) for b in blocks)


@settings(max_examples=200, deadline=None)
@given(st.lists(BLOCKISH, max_size=6))
def test_fuzz_our_blocks_then_strict_validation(blocks: list[Any]) -> None:
    try:
        ours = our_blocks(conf_with(json.dumps(blocks)), "rdma", 4)
        validate_blocks(ours)
    except CniError as exc:
        assert exc.code in (7, 106)
