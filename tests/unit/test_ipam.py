"""Built-in IPAM: pool building, choosing, allocating (pure and against the store)."""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv4Interface, IPv4Network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdma_cni.errors import AddressError, Code, ConfigError, NetmaskError, NicUnavailable
from rdma_cni.ipam.allocator import Pool, RangeLimits, build_pool, choose
from rdma_cni.ipam.reserve import allocate
from rdma_cni.store.core import Store
from rdma_cni.vocab.attachment import AttachmentKey

A = IPv4Address
I = IPv4Interface  # noqa: E741
N = IPv4Network
KEY = AttachmentKey("rdma-net", "c1", "eth0")


def pool_of(addr: str, *, gw: str | None = None, host: tuple[str, ...] = (),
            ranges: dict[str, RangeLimits] | None = None, shared: bool = True) -> Pool:
    return build_pool("eth1", [I(addr)], A(gw) if gw else None, [A(h) for h in host],
                      ranges or {}, shared)


# -- build_pool ---------------------------------------------------------------

def test_slash28_range_is_host_plus_one_to_broadcast_minus_one() -> None:
    p = pool_of("192.0.2.1/28")
    assert p.name == "192.0.2.0/28"
    assert p.network == N("192.0.2.0/28")
    assert (p.first, p.last) == (A("192.0.2.2"), A("192.0.2.14"))
    assert p.size() == 13
    assert list(p.candidates()) == [A(f"192.0.2.{i}") for i in range(2, 15)]
    assert p.nic == "eth1"


def test_slash29_host_in_the_middle() -> None:
    p = pool_of("198.51.100.11/29")
    assert (p.first, p.last) == (A("198.51.100.12"), A("198.51.100.14"))
    assert p.size() == 3


@pytest.mark.parametrize("addr", ["192.0.2.5/30", "192.0.2.4/31", "192.0.2.7/32"])
def test_shared_modes_refuse_slash30_and_longer(addr: str) -> None:
    with pytest.raises(NetmaskError) as ei:
        pool_of(addr)
    prefix = addr.split("/")[1]
    assert ei.value.code == Code.NIC_NETMASK == 100
    assert str(ei.value) == (
        f"RDMA NIC eth1 has netmask /{prefix} ({addr}): "
        "the RDMA NIC mask needs to be shorter than /30, e.g. /29 or /28"
    )


def test_slash30_outside_shared_modes_has_one_address() -> None:
    p = pool_of("192.0.2.5/30", shared=False)
    assert list(p.candidates()) == [A("192.0.2.6")]


@pytest.mark.parametrize("addr", ["192.0.2.4/31", "192.0.2.5/31", "192.0.2.7/32",
                                  "255.255.255.255/32", "0.0.0.0/32"])
def test_slash31_slash32_outside_shared_modes_are_empty(addr: str) -> None:
    p = pool_of(addr, shared=False)
    assert p.size() == 0
    assert list(p.candidates()) == []
    with pytest.raises(AddressError, match="no free address"):
        choose(p, set())


def test_lowest_address_defines_the_subnet_and_other_nic_addresses_are_skipped() -> None:
    p = build_pool("eth1", [I("192.0.2.9/28"), I("192.0.2.3/28"), I("198.51.100.1/24")],
                   None, [], {}, True)
    assert p.name == "192.0.2.0/28"
    assert p.first == A("192.0.2.4")
    assert A("192.0.2.9") not in set(p.candidates())
    assert p.size() == 10


def test_host_addresses_on_other_interfaces_and_gateway_are_skipped() -> None:
    p = pool_of("192.0.2.1/28", gw="192.0.2.14",
                host=("192.0.2.5", "192.0.2.1", "198.51.100.5", "10.0.0.1"))
    cands = set(p.candidates())
    assert A("192.0.2.5") not in cands and A("192.0.2.14") not in cands
    assert p.excluded == frozenset({A("192.0.2.5"), A("192.0.2.14")})
    assert p.size() == 11
    assert p.gateway == A("192.0.2.14")


def test_gateway_outside_range_is_not_counted() -> None:
    p = pool_of("192.0.2.5/28", gw="192.0.2.1")
    assert p.excluded == frozenset()
    assert p.size() == 9


def test_ranges_narrow_and_exclude_ips_and_cidrs() -> None:
    conf = RangeLimits(A("192.0.2.4"), A("192.0.2.12"), (N("192.0.2.6/32"), N("192.0.2.8/30")))
    p = pool_of("192.0.2.1/28", ranges={"192.0.2.0/28": conf, "198.51.100.0/24": RangeLimits()})
    assert list(p.candidates()) == [A("192.0.2.4"), A("192.0.2.5"), A("192.0.2.7"),
                                    A("192.0.2.12")]
    assert p.size() == 4


def test_range_start_below_host_address_cannot_widen() -> None:
    p = pool_of("192.0.2.5/28", ranges={"192.0.2.0/28": RangeLimits(range_start=A("192.0.2.1"))})
    assert p.first == A("192.0.2.6")


def test_partially_overlapping_exclude_supernet_is_clipped() -> None:
    conf = RangeLimits(exclude=(N("192.0.2.0/29"),))
    p = pool_of("192.0.2.1/28", ranges={"192.0.2.0/28": conf})
    assert list(p.candidates()) == [A(f"192.0.2.{i}") for i in range(8, 15)]


@pytest.mark.parametrize(("conf", "msg"), [
    (RangeLimits(range_start=A("198.51.100.2")), "rangeStart 198.51.100.2 is outside the subnet"),
    (RangeLimits(range_end=A("192.0.2.16")), "rangeEnd 192.0.2.16 is outside the subnet"),
    (RangeLimits(A("192.0.2.9"), A("192.0.2.3")), "rangeStart 192.0.2.9 is after rangeEnd"),
    (RangeLimits(exclude=(N("203.0.113.0/24"),)), "exclude 203.0.113.0/24 is outside"),
])
def test_bad_ranges_are_config_errors_naming_subnet_and_nic(conf: RangeLimits, msg: str) -> None:
    with pytest.raises(ConfigError) as ei:
        pool_of("192.0.2.1/28", ranges={"192.0.2.0/28": conf})
    assert ei.value.code == 7
    assert msg in str(ei.value)
    assert "ipam.ranges[192.0.2.0/28]" in str(ei.value) and "eth1" in str(ei.value)


@pytest.mark.parametrize(("nic", "first", "last", "size"), [
    ("198.51.100.1/26", "198.51.100.10", "198.51.100.20", 10),  # the entry's own subnet
    ("198.51.100.1/25", "198.51.100.10", "198.51.100.20", 10),  # the netmask widened
    ("198.51.100.1/24", "198.51.100.10", "198.51.100.20", 10),
    ("198.51.100.1/27", "198.51.100.10", "198.51.100.20", 10),  # narrowed: still inside
    ("198.51.100.1/28", "198.51.100.10", "198.51.100.14", 5),  # narrowed: clipped to it
])
def test_a_range_written_for_the_nics_subnet_holds_when_its_netmask_changes(
        nic: str, first: str, last: str, size: int) -> None:
    """An entry applied only to the very subnet it names: once the NIC's netmask changed,
    the range (a node's slice of a subnet other nodes share) and its exclusions were
    dropped without a word, and .15, excluded, was handed out."""
    conf = RangeLimits(A("198.51.100.10"), A("198.51.100.20"), (N("198.51.100.15/32"),))
    p = pool_of(nic, ranges={"198.51.100.0/26": conf})
    assert (p.first, p.last) == (A(first), A(last))
    assert len(list(p.candidates())) == size
    assert A("198.51.100.15") not in set(p.candidates())


def test_two_range_entries_overlapping_the_nics_subnet_are_refused() -> None:
    ranges = {"198.51.100.0/26": RangeLimits(range_start=A("198.51.100.10")),
              "198.51.100.64/26": RangeLimits(range_start=A("198.51.100.70"))}
    with pytest.raises(ConfigError, match=re.escape("each overlap the subnet 198.51.100.0/24")):
        pool_of("198.51.100.1/24", ranges=ranges)
    assert pool_of("198.51.100.1/26", ranges=ranges).first == A("198.51.100.10")


def test_invalid_ranges_key_is_config_error() -> None:
    with pytest.raises(ConfigError, match=re.escape("invalid ipam.ranges key")):
        pool_of("192.0.2.1/28", ranges={"not-a-cidr": RangeLimits()})


def test_nic_without_ipv4_is_unavailable() -> None:
    with pytest.raises(NicUnavailable) as ei:
        build_pool("eth7", [], None, [], {}, True)
    assert ei.value.code == 104
    assert "eth7" in str(ei.value) and "no IPv4 address" in str(ei.value)


# -- choose -------------------------------------------------------------------

POOL = pool_of("192.0.2.1/28", gw="192.0.2.14", host=("192.0.2.7",))


def test_choose_first_free() -> None:
    assert choose(POOL, set()) == A("192.0.2.2")
    assert choose(POOL, [A("192.0.2.2"), A("192.0.2.3")]) == A("192.0.2.4")
    assert choose(POOL, {A(f"192.0.2.{i}") for i in range(2, 7)}) == A("192.0.2.8")


def test_choose_requested_ok() -> None:
    assert choose(POOL, {A("192.0.2.2")}, A("192.0.2.9")) == A("192.0.2.9")


@pytest.mark.parametrize(("ip", "msg"), [
    ("192.0.2.3", "is already reserved"),
    ("198.51.100.3", "is outside its subnet 192.0.2.0/28"),
    ("192.0.2.1", "is outside the range 192.0.2.2-192.0.2.14"),
    ("192.0.2.15", "is outside the range"),
    ("192.0.2.14", "is not assignable: it is the gateway"),
    ("192.0.2.7", "is not assignable: it is a host address or an ipam exclusion"),
])
def test_choose_requested_refused(ip: str, msg: str) -> None:
    with pytest.raises(AddressError) as ei:
        choose(POOL, {A("192.0.2.3")}, A(ip))
    assert ei.value.code == 102
    assert f"requested address {ip} for RDMA NIC eth1 {msg}" in str(ei.value)


def test_choose_exhausted_message() -> None:
    with pytest.raises(AddressError) as ei:
        choose(POOL, set(POOL.candidates()))
    assert str(ei.value) == (
        "no free address in 192.0.2.0/28 for eth1: "
        "all 11 addresses of 192.0.2.2-192.0.2.14 are reserved"
    )


@st.composite
def pools_and_taken(draw: st.DrawFn) -> tuple[Pool, set[IPv4Address], IPv4Address | None]:
    prefix = draw(st.integers(24, 29))
    net = N(f"198.18.{draw(st.integers(0, 255))}.0/{prefix}", strict=False)
    offs = st.integers(0, net.num_addresses - 1)
    host = net.network_address + draw(st.integers(1, net.num_addresses - 2))
    others = [net.network_address + o for o in draw(st.lists(offs, max_size=6))]
    excl = tuple(N(f"{net.network_address + o}/{draw(st.integers(prefix, 32))}", strict=False)
                 for o in draw(st.lists(offs, max_size=3)))
    gw = draw(st.none() | offs.map(lambda o: net.network_address + o))
    pool = build_pool("eth1", [I(f"{host}/{prefix}")], gw, others,
                      {str(net): RangeLimits(exclude=excl)}, True)
    taken = {net.network_address + o for o in draw(st.lists(offs, max_size=64))}
    req = draw(st.none() | offs.map(lambda o: net.network_address + o))
    return pool, taken, req


@settings(max_examples=300, deadline=None)
@given(pools_and_taken())
def test_choose_never_returns_taken_excluded_or_outside(
    case: tuple[Pool, set[IPv4Address], IPv4Address | None],
) -> None:
    pool, taken, req = case
    free = [ip for ip in pool.candidates() if ip not in taken]
    try:
        ip = choose(pool, taken, req)
    except AddressError:
        assert req is not None or not free
        assert req is None or req not in free
        return
    assert ip in pool.network and pool.first <= ip <= pool.last
    assert ip not in taken and ip not in pool.excluded and ip != pool.gateway
    assert ip > min(pool.network.hosts())  # never the NIC's own (lowest) address or below
    assert ip == (req if req is not None else free[0])


# -- allocate -----------------------------------------------------------------

class RacyStore:
    """In-memory store whose first ``steal`` reservations are lost to another owner."""

    def __init__(self, steal: int = 0) -> None:
        self.owners: dict[IPv4Address, tuple[AttachmentKey, str]] = {}
        self.steal = steal

    def ip_owners(self, pool: str, mine: AttachmentKey | None = None, fresh: bool = False
                  ) -> dict[IPv4Address, tuple[AttachmentKey, str]]:
        return dict(self.owners)

    def reserve_ip(self, pool: str, ip: IPv4Address, key: AttachmentKey, ifname: str) -> bool:
        if self.steal:
            self.steal -= 1
            self.owners[ip] = (AttachmentKey("rdma-net", "intruder", "eth0"), "eth1")
        owner = self.owners.setdefault(ip, (key, ifname))
        return owner == (key, ifname)


def test_allocate_is_idempotent_per_key_and_ifname() -> None:
    s = RacyStore()
    a = allocate(s, POOL, KEY, "eth1")
    assert allocate(s, POOL, KEY, "eth1") == a == A("192.0.2.2")
    assert allocate(s, POOL, KEY, "eth2") == A("192.0.2.3")
    assert allocate(s, POOL, AttachmentKey("rdma-net", "c2", "eth0"), "eth1") == A("192.0.2.4")
    assert allocate(s, POOL, KEY, "eth1", requested=a) == a


def test_allocate_moves_on_after_losing_a_race() -> None:
    s = RacyStore(steal=2)
    assert allocate(s, POOL, KEY, "eth1") == A("192.0.2.4")
    assert sum(1 for o in s.owners.values() if o[0] == KEY) == 1


def test_allocate_requested_lost_race_is_address_error() -> None:
    with pytest.raises(AddressError, match="already reserved"):
        allocate(RacyStore(steal=1), POOL, KEY, "eth1", requested=A("192.0.2.9"))


def test_allocate_requested_differs_from_held() -> None:
    s = RacyStore()
    allocate(s, POOL, KEY, "eth1")
    with pytest.raises(AddressError, match=re.escape("already holds 192.0.2.2")):
        allocate(s, POOL, KEY, "eth1", requested=A("192.0.2.9"))


def test_allocate_exhaustion_with_races() -> None:
    small = pool_of("192.0.2.1/29", ranges={"192.0.2.0/29": RangeLimits(range_end=A("192.0.2.3"))})
    with pytest.raises(AddressError, match=re.escape("all 2 addresses of 192.0.2.2-192.0.2.3")):
        allocate(RacyStore(steal=5), small, KEY, "eth1")


def test_allocate_against_disk_store(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = Store(str(tmp_path / "d"))
    with store.lock():
        a = allocate(store, POOL, KEY, "eth1")
        b = allocate(store, POOL, AttachmentKey("rdma-net", "c2", "eth0"), "eth1")
        assert allocate(store, POOL, KEY, "eth1") == a
    assert (a, b) == (A("192.0.2.2"), A("192.0.2.3"))
    assert store.ips_of(KEY) == [("192.0.2.0/28", a, "eth1")]
