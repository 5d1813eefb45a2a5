"""Result conversion between CNI versions, prevResult normalisation and chaining."""

from __future__ import annotations

import copy
import json
from ipaddress import IPv4Address, IPv4Interface
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdma_cni.cni import result, versions
from rdma_cni.errors import DecodeError, VersionError
from rdma_cni.vocab.plan import IfacePlan

RICH = {
    "cniVersion": "1.1.0",
    "interfaces": [
        {"name": "eth0", "mac": "vpc-cni:eni-0a1b", "sandbox": "not a path", "mtu": 9000,
         "socketPath": "/run/x.sock", "pciID": "0000:3b:00.0"},
        {"name": "eth1", "mac": "02:00:00:00:00:01", "mtu": 4200, "sandbox": "/var/run/netns/p"},
    ],
    "ips": [
        {"address": "198.51.100.7/24", "gateway": "198.51.100.1", "interface": 0},
        {"address": "2001:db8::7/64", "interface": 0},
        {"address": "203.0.113.9/24", "interface": 1},
    ],
    "routes": [
        {"dst": "0.0.0.0/0", "gw": "198.51.100.1"},
        {"dst": "203.0.113.0/24", "mtu": 4200, "advmss": 1400, "priority": 5, "table": 100,
         "scope": 253},
    ],
    "dns": {"nameservers": ["198.51.100.53"], "search": ["svc.cluster.local"]},
}
OLD = ("0.3.0", "0.3.1", "0.4.0")


@pytest.mark.parametrize("version", versions.SUPPORTED)
def test_convert_rich_result_to_every_version(version: str) -> None:
    before = copy.deepcopy(RICH)
    out = versions.convert(RICH, version)
    assert before == RICH, "convert must not modify its input"
    assert out["cniVersion"] == version
    assert out["dns"] == RICH["dns"]
    assert [i["name"] for i in out["interfaces"]] == ["eth0", "eth1"]
    assert out["interfaces"][0]["mac"] == "vpc-cni:eni-0a1b"
    assert out["interfaces"][0]["sandbox"] == "not a path"
    new_iface_keys = {"mtu", "socketPath", "pciID"} & set(out["interfaces"][0])
    new_route_keys = {"mtu", "advmss", "priority", "table", "scope"} & set(out["routes"][1])
    if version == "1.1.0":
        assert out == RICH
    else:
        assert new_iface_keys == set() and new_route_keys == set()
        assert out["routes"][1] == {"dst": "203.0.113.0/24"}
    expected_ip_versions = ["4", "6", "4"] if version in OLD else [None, None, None]
    assert [ip.get("version") for ip in out["ips"]] == expected_ip_versions
    assert [ip["address"] for ip in out["ips"]] == \
        ["198.51.100.7/24", "2001:db8::7/64", "203.0.113.9/24"]
    assert [ip.get("interface") for ip in out["ips"]] == [0, 0, 1]
    json.dumps(out)


@pytest.mark.parametrize("bad", ["0.2.0", "2.0.0", "", "latest"])
def test_convert_to_an_unsupported_version_fails(bad: str) -> None:
    with pytest.raises(VersionError):
        versions.convert(RICH, bad)


@pytest.mark.parametrize("version", versions.SUPPORTED)
def test_normalize_prev_result_from_each_version(version: str) -> None:
    prev = versions.convert(RICH, version)
    before = copy.deepcopy(prev)
    norm = versions.normalize_prev_result(prev)
    assert prev == before, "normalize must not modify its input"
    assert norm["cniVersion"] == "1.1.0"
    assert all("version" not in ip for ip in norm["ips"])
    assert norm["interfaces"][0]["mac"] == "vpc-cni:eni-0a1b"
    assert versions.convert(norm, version) == prev  # round trip


def test_normalize_keeps_unknown_keys_and_drops_null_lists() -> None:
    prev = {"cniVersion": "0.4.0", "interfaces": None, "ips": None, "routes": None,
            "dns": None, "vendorKey": {"x": 1}}
    norm = versions.normalize_prev_result(prev)
    assert norm == {"cniVersion": "1.1.0", "dns": None, "vendorKey": {"x": 1}}


def test_normalize_accepts_the_minimal_results() -> None:
    assert versions.normalize_prev_result({}) == {"cniVersion": "1.1.0"}
    ips_only = {"cniVersion": "0.3.1", "ips": [{"version": "4", "address": "198.51.100.2/24"}]}
    assert versions.normalize_prev_result(ips_only)["ips"] == [{"address": "198.51.100.2/24"}]


@pytest.mark.parametrize("prev", [None, "x", [], {"interfaces": {}}, {"ips": [None]},
                                  {"ips": [{"address": None}]}, {"routes": "x"},
                                  {"dns": "x"}, {"ips": [{"address": "a", "interface": "0"}]}])
def test_normalize_rejects_malformed_shapes(prev: object) -> None:
    with pytest.raises(DecodeError, match="prevResult"):
        versions.normalize_prev_result(prev)


def test_versions_helpers() -> None:
    assert versions.SUPPORTED == ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
    assert versions.LATEST == "1.1.0"
    assert versions.at_least("1.1.0", "0.4.0") and not versions.at_least("0.3.1", "0.4.0")
    assert versions.at_least("0.10.0", "0.4.0")
    for bad in ("1", "1.0", "a.b.c", "1.0.0.0", "1.0.-1", "9999999.0.0"):
        with pytest.raises(VersionError):
            versions.parse(bad)
    for value in (None, 1, "", "0.2.0"):
        with pytest.raises(VersionError):
            versions.check_supported(value)


# -- chaining (result.append) --------------------------------------------------

def plans() -> list[IfacePlan]:
    out = []
    for n, addr in ((1, "203.0.113.9/24"), (2, "198.18.0.9/15")):
        out.append(IfacePlan(k=n - 1, name=f"eth{n}", tmp=f"rdmatmp{n}", nic=f"nic{n}",
                             kind="ipvlan", mtu=4200, table=99 + n,
                             addresses=(IPv4Interface(addr),),
                             gateway=IPv4Address("203.0.113.1")))
    return out


def test_append_keeps_the_primary_entries_and_points_our_ips_at_ours() -> None:
    prev = versions.normalize_prev_result(versions.convert(RICH, "0.4.0"))
    ours = result.our_part(plans(), {"eth1": "02:00:00:00:00:01"}, "/var/run/netns/p")
    out = result.append(prev, ours)
    n = len(prev["interfaces"])
    assert out["interfaces"][:n] == prev["interfaces"]
    assert out["ips"][:len(prev["ips"])] == prev["ips"]
    assert out["routes"][:len(prev["routes"])] == prev["routes"]
    assert out["dns"] == prev["dns"]
    assert [i["name"] for i in out["interfaces"][n:]] == ["eth1", "eth2"]
    assert [ip["interface"] for ip in out["ips"][len(prev["ips"]):]] == [n, n + 1]
    assert out["ips"][-2]["gateway"] == "203.0.113.1"
    assert "gateway" not in out["ips"][-1]
    printed = versions.convert(out, "0.4.0")
    assert printed["interfaces"][0] == {"name": "eth0", "mac": "vpc-cni:eni-0a1b",
                                        "sandbox": "not a path"}
    assert printed["ips"][-1] == {"address": "198.18.0.9/15", "interface": n + 1, "version": "4"}


def test_append_alone_holds_only_ours() -> None:
    out = result.append(None, result.our_part(plans(), {}, "/p"))
    assert [i["name"] for i in out["interfaces"]] == ["eth1", "eth2"]
    assert [ip["interface"] for ip in out["ips"]] == [0, 1]
    assert out["cniVersion"] == "1.1.0" and out["dns"] == {}


# -- properties ---------------------------------------------------------------

ODD_TEXT = st.text(max_size=30)
MAYBE = st.one_of(st.none(), st.integers(), ODD_TEXT, st.booleans())
V4 = st.tuples(*[st.integers(0, 255)] * 4, st.integers(0, 32)).map(
    lambda t: f"{t[0]}.{t[1]}.{t[2]}.{t[3]}/{t[4]}")
V6 = st.integers(0, 2**32 - 1).map(lambda i: f"2001:db8::{i:x}/64")


@st.composite
def results(draw: st.DrawFn) -> dict[str, Any]:
    n_if = draw(st.integers(0, 4))
    interfaces = []
    for i in range(n_if):
        iface: dict[str, Any] = {"name": f"if{i}", "mac": draw(ODD_TEXT),
                                 "sandbox": draw(ODD_TEXT)}
        if draw(st.booleans()):
            iface["mtu"] = draw(st.integers(0, 65535))
        if draw(st.booleans()):
            iface["weird"] = draw(MAYBE)
        interfaces.append(iface)
    ips = []
    for _ in range(draw(st.integers(0, 4))):
        ip: dict[str, Any] = {"address": draw(st.one_of(V4, V6))}
        if n_if and draw(st.booleans()):
            ip["interface"] = draw(st.integers(0, n_if - 1))
        if draw(st.booleans()):
            ip["gateway"] = draw(ODD_TEXT)
        ips.append(ip)
    routes = [{"dst": draw(V4), **({"table": draw(st.integers(1, 1000))}
                                   if draw(st.booleans()) else {})}
              for _ in range(draw(st.integers(0, 3)))]
    return {"cniVersion": "1.1.0", "interfaces": interfaces, "ips": ips, "routes": routes,
            "dns": draw(st.dictionaries(st.sampled_from(["nameservers", "domain"]),
                                        st.lists(ODD_TEXT, max_size=2), max_size=2))}


NEW_KEYS = {"mtu", "socketPath", "pciID", "advmss", "priority", "table", "scope", "version"}


def strip_new(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for key in ("interfaces", "ips", "routes"):
        out[key] = [{k: v for k, v in e.items() if k not in NEW_KEYS} for e in out[key]]
    return out


@settings(max_examples=150, deadline=None)
@given(res=results(), version=st.sampled_from(versions.SUPPORTED))
def test_any_result_converts_and_normalizes_back(res: dict[str, Any], version: str) -> None:
    printed = versions.convert(res, version)
    assert json.loads(json.dumps(printed)) == printed
    back = versions.normalize_prev_result(json.loads(json.dumps(printed)))
    assert back["cniVersion"] == "1.1.0"
    assert strip_new(back) == strip_new(res)  # nothing of the primary lost or altered
    if version == "1.1.0":
        assert {**back, "cniVersion": "1.1.0"} == res
    for a, b in zip(back["interfaces"], res["interfaces"], strict=True):
        assert (a["mac"], a["sandbox"]) == (b["mac"], b["sandbox"])


@settings(max_examples=100, deadline=None)
@given(res=results(), ours=results(), version=st.sampled_from(versions.SUPPORTED))
def test_chained_append_never_changes_the_primary(res: dict[str, Any], ours: dict[str, Any],
                                                  version: str) -> None:
    prev = versions.normalize_prev_result(versions.convert(res, version))
    our_ips = [{**ip, "interface": ip.get("interface", 0)} for ip in ours["ips"]] \
        if ours["interfaces"] else []
    part = {"interfaces": ours["interfaces"], "ips": our_ips, "routes": ours["routes"]}
    out = result.append(prev, part)
    n_if, n_ip = len(prev["interfaces"]), len(prev["ips"])
    assert out["interfaces"][:n_if] == prev["interfaces"]
    assert out["ips"][:n_ip] == prev["ips"]
    assert out["interfaces"][n_if:] == ours["interfaces"]
    assert [ip["interface"] - n_if for ip in out["ips"][n_ip:]] == \
        [ip["interface"] for ip in our_ips]
    again = versions.normalize_prev_result(versions.convert(out, version))
    assert again["interfaces"][:n_if] == prev["interfaces"]


def test_the_front_knows_the_supported_versions() -> None:
    """front/rdma-cni-front.c is C: the versions its own error documents may carry (the
    config's when supported, else the latest) are checked against this module's."""
    import re
    from pathlib import Path

    source = (Path(__file__).resolve().parents[2] / "front" / "rdma-cni-front.c").read_text()
    listed = re.search(r"^static const char \*const VERSIONS\[\] = \{([^}]*)\};$", source,
                       re.MULTILINE)
    assert listed is not None
    assert tuple(re.findall(r'"([^"]*)"', listed.group(1))) == versions.SUPPORTED
    assert f'#define LATEST_VERSION "{versions.LATEST}"' in source
