"""The physical floor on this machine, measured in the same run: an exec of a static
C ``true`` built as the front is (the least any exec'd plugin costs; and built against
glibc, for comparison), one netlink round trip (the least
one kernel request costs), and the kernel's floor of figure 2's ADD and figure 2b's DEL,
of figure 1's (eight interfaces) and of figure 3's pass-through (the same netlink
requests and store writes `serve` makes, in the same order, with nothing else), so the
table shows how close each figure is to the limit (figure 4's batch: floor_batch.py)."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import ipaddress
import os
import socket
import statistics
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import lab

RTM_GETLINK, NLM_F_REQUEST = 18, 1


def static_true(tmp: str, cc: str = "musl-gcc") -> str | None:
    """Build a static ``true`` with ``cc`` (None when there is none): musl-gcc, the
    front's toolchain (scripts/build.sh), or gcc, glibc's, whose static start-up probes
    the CPU (CPUID) before ``main``: what the front's exec cost before it moved to musl."""
    src, out = os.path.join(tmp, "true.c"), os.path.join(tmp, f"true-static-{cc}")
    with open(src, "w") as f:
        f.write("int main(void) { return 0; }\n")
    try:
        subprocess.run([cc, "-O2", "-static", "-s", "-o", out, src], check=True,
                       capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return out


def exec_ms(argv: list[str], n: int) -> dict[str, float]:
    """Median wall and CPU (user+sys) ms of ``n`` execs, each reaped with wait4."""
    walls, cpus = [], []
    for _ in range(n):
        start = time.perf_counter_ns()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        _, _, usage = os.wait4(proc.pid, 0)
        proc.returncode = 0
        walls.append((time.perf_counter_ns() - start) / 1e6)
        cpus.append((usage.ru_utime + usage.ru_stime) * 1e3)
    return {"wall_ms": round(statistics.median(walls), 3),
            "cpu_ms": round(statistics.median(cpus), 3), "n": n}


def netlink_rtt_ms(n: int) -> dict[str, float]:
    """Median of ``n`` RTM_GETLINK requests for ``lo`` (index 1) on one socket."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    sock.bind((0, 0))
    times = []
    try:
        for seq in range(n):
            ifinfo = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 1, 0, 0)
            msg = struct.pack("=IHHII", 16 + len(ifinfo), RTM_GETLINK, NLM_F_REQUEST, seq,
                              0) + ifinfo
            start = time.perf_counter_ns()
            sock.send(msg)
            sock.recv(65536)
            times.append((time.perf_counter_ns() - start) / 1e6)
    finally:
        sock.close()
    return {"rtt_ms": round(statistics.median(times), 4), "n": n}


def file_create_us(tmp: str, n: int) -> dict[str, float]:
    """Creating (and closing) a new file in the run's temp dir, where both sides' stores
    are, then removing it: the median in us. Every record either side writes pays one
    create; on some machines' ext4 it costs 20 us in one directory and 800 in another."""
    times = []
    for i in range(n):
        path = os.path.join(tmp, f".create-{i}")
        start = time.perf_counter_ns()
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        times.append((time.perf_counter_ns() - start) / 1e3)
        os.unlink(path)
    return {"create_us": round(statistics.median(times), 1), "n": n}


def measure(tmp: str, n: int = 50, pods: Any = None, rounds: int = 15,
            many: int = 8) -> dict[str, Any]:
    """The floor; with ``pods`` (bench/lab.py's Pods, inside the node netns) also the
    ADD's and DEL's of one interface and of ``many`` (figure 1's), ``rounds`` of each."""
    true, glibc = static_true(tmp), static_true(tmp, "gcc")
    return {"static_true": exec_ms([true], n) if true else None,
            "static_true_glibc": exec_ms([glibc], n) if glibc else None,
            "static_true_path": true,
            "netlink": netlink_rtt_ms(n * 20),
            "file_create": file_create_us(tmp, n * 4),
            "pass_through": pass_through_floor(tmp, n * 4),
            "add_del": add_del_floor(tmp, pods, rounds) if pods is not None else None,
            "add_del_many": add_del_floor(tmp, pods, rounds, many) if pods is not None else None}


def pass_through_floor(tmp: str, n: int) -> dict[str, Any]:
    """Median ms of ``n`` of figure 3's floor (:func:`floor_pass_through`)."""
    store = Store(os.path.join(tmp, "floor-pass-store"))
    times = []
    try:
        for _ in range(n):
            start = time.perf_counter_ns()
            floor_pass_through(store)
            times.append((time.perf_counter_ns() - start) / 1e6)
    finally:
        store.close()
    return {"add_ms": round(statistics.median(times), 4), "n": n}


# -- the kernel's floor of the resident ADD and DEL ------------------------------------------
# The requests and writes below are those `rdma-cni serve` makes for figure 2's ADD and
# figure 2b's DEL (one block, shared-multi, the stand-in NIC rdma0), in the same order,
# found with strace on `serve` (bench/README.md, "The kernel's floor"), and for figure 1's
# (eight blocks on rdma0..rdma7: the lookups of each NIC and table, each interface's ten
# requests, the links deleted as one group). Nothing is decoded or checked beyond what
# the next request needs (the new link's index).

NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE, NLM_F_DUMP = 4, 0x200, 0x400, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_DELLINK, RTM_SETLINK, RTM_NEWADDR, RTM_GETADDR = 16, 17, 19, 20, 22
RTM_NEWROUTE, RTM_GETROUTE, RTM_NEWRULE, RTM_DELRULE, RTM_GETRULE = 24, 26, 32, 33, 34
IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_LINKINFO, IFLA_IFALIAS, IFLA_NET_NS_FD = 3, 4, 5, 18, 20, 28
IFLA_AF_SPEC, IFLA_INET_CONF, NLA_F_NESTED = 26, 1, 0x8000
IFLA_INFO_KIND, IFLA_INFO_DATA, IFLA_MACVLAN_MODE, MACVLAN_MODE_BRIDGE = 1, 2, 1, 4
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_TABLE = 1, 4, 5, 15
FRA_SRC, FRA_PRIORITY, FRA_TABLE = 2, 6, 15
RT_TABLE_MAIN, TABLE, PRIORITY, ENODEV, ENETUNREACH = 254, 100, 20000, 19, 101
#: the node's own NIC check (rdma_cni/node/primary.py): per family, the kernel's lookup
#: (RTM_F_FIB_MATCH, and RTM_F_LOOKUP_TABLE for IPv4) of a destination only a default
#: route covers
PROBES = ((socket.AF_INET, "240.0.0.1", 0x3000), (socket.AF_INET6, "2001:db8:ffff:ffff::1",
                                                  0x2000))
SOL_NETLINK, NETLINK_GET_STRICT_CHK, CLONE_NEWNET = 270, 12, 0x40000000
IFF_UP = 1
#: the sizes of the store's records as `serve` writes them for one interface (bytes)
CLAIM_BYTES, PENDING_BYTES, READY_BYTES, METRICS_BYTES = 165, 952, 1136, 8200
#: what each interface past the first adds to the pending and the ready record (8: 4131, 5433)
PENDING_PER_IFACE, READY_PER_IFACE = 454, 614
IFLA_GROUP = 27
AT_FDCWD, RENAME_EXCHANGE = -100, 2


def _attr(kind: int, value: bytes) -> bytes:
    head = struct.pack("=HH", 4 + len(value), kind)
    return head + value + b"\0" * (-len(value) % 4)


def _name(kind: int, name: str) -> bytes:
    return _attr(kind, name.encode() + b"\0")


def _u32(kind: int, value: int) -> bytes:
    return _attr(kind, struct.pack("=I", value))


def _ip(kind: int, addr: str) -> bytes:
    return _attr(kind, socket.inet_aton(addr))


def _ifinfo(index: int = 0, flags: int = 0, change: int = 0) -> bytes:
    return struct.pack("=BxHiII", socket.AF_UNSPEC, 0, index, flags, change)


def _rtmsg(family: int, dst_len: int, table: int, proto: int = 0, scope: int = 0,
           kind: int = 0, flags: int = 0) -> bytes:
    return struct.pack("=BBBBBBBBI", family, dst_len, 0, 0, table, proto, scope, kind, flags)


def _rule(table: int = 0, src_len: int = 0, action: int = 0) -> bytes:
    return struct.pack("=BBBBBBBBI", socket.AF_INET, 0, src_len, 0, table, 0, 0, action, 0)


class Channel:
    """One rtnetlink socket (strict checking on, as `serve` opens it). :attr:`sent` counts
    the requests of every channel (the floor's record says how many an ADD and a DEL made)."""

    sent = 0
    _counting = threading.Lock()

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  socket.NETLINK_ROUTE)
        self.sock.setsockopt(SOL_NETLINK, NETLINK_GET_STRICT_CHK, 1)
        self.sock.bind((0, 0))
        self.seq = 0

    def request(self, kind: int, flags: int, body: bytes, want: int = 0) -> bytes:
        """Send one request and read until its ack or the end of its dump; returns the
        first answer's payload. The kernel's errno must be ``want`` (RuntimeError)."""
        err, first = self._talk(kind, flags, body)
        if err != want:
            raise RuntimeError(f"floor: netlink request {kind} got errno {err}, not {want}")
        return first

    def _talk(self, kind: int, flags: int, body: bytes) -> tuple[int, bytes]:
        with Channel._counting:  # the deletion's own thread sends one too
            Channel.sent += 1
        self.seq += 1
        self.sock.send(struct.pack("=IHHII", 16 + len(body), kind, 1 | flags, self.seq, 0)
                       + body)
        first = b""
        while True:
            data = self.sock.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, mtype = struct.unpack_from("=IH", data, off)
                payload = data[off + 16:off + length]
                if mtype == NLMSG_ERROR:
                    return -struct.unpack_from("=i", payload)[0], first
                if mtype == NLMSG_DONE:
                    return 0, first
                first = first or payload
                off += (length + 3) & ~3

    def close(self) -> None:
        self.sock.close()


def _setns(fd: int) -> None:
    if LIBC.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


LIBC = ctypes.CDLL(None, use_errno=True)


@dataclass
class Store:
    """A throwaway data dir laid out as the store's (``lock``, ``addrs``, ``state``), the
    metrics file and the log file, written the way `serve` writes them."""

    root: str
    #: False: the layout is there already (another process of figure 4's batch made it)
    make: bool = True

    def __post_init__(self) -> None:
        self.metrics = os.path.join(self.root, "metrics")
        if self.make:
            for sub in ("addrs", "state"):
                os.makedirs(os.path.join(self.root, sub), exist_ok=True)
            with open(self.metrics, "wb") as f:
                f.write(b"\0" * METRICS_BYTES)
        self.log = os.open(os.path.join(self.root, "floor.log"),
                           os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    def lock(self) -> int:
        fd = os.open(os.path.join(self.root, "lock"),
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # uncontended but for figure 4's batch (floor_batch.py)
        return fd

    def record_lock(self, key: str) -> int:
        """The lock of the attachment's state record, as each step of `serve`'s ADD takes
        it (rdma_cni/store/recordlock.py): the record opened and flocked."""
        fd = os.open(os.path.join(self.root, "state", f"{key}.json"),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def write_tmp(self, sub: str, name: str, size: int) -> str:
        """A temp file in ``sub``: created exclusively, flocked, written, closed (the store
        writes its records without an fsync: rdma_cni/store/boot.py)."""
        path = os.path.join(self.root, sub, f".tmp-{os.getpid()}-{name}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, b"{" + b"x" * (size - 2) + b"}")
        finally:
            os.close(fd)
        return path

    def count(self, offset: int) -> None:
        """The metrics file's counter update: flock, read it whole, write one 128-byte slot."""
        fd = os.open(self.metrics, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.pread(fd, METRICS_BYTES + 1, 0)
            os.pwrite(fd, b"\1" * 128, offset)
        finally:
            os.close(fd)

    def say(self, line: str) -> None:
        """One log line, as `serve`'s handler writes it (one write, a timestamp first)."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        os.write(self.log, f"{stamp} {os.getpid()} {line}\n".encode())

    def close(self) -> None:
        os.close(self.log)


@dataclass(frozen=True)
class Iface:
    """One RDMA interface of a pod: its stand-in NIC ``rdma<k>`` (bench/lab.py), the
    address (``host`` in the NIC's subnet), the pod's name for it and its route table."""

    k: int = 0
    host: int = 2
    #: the address and the subnet's, worked out once when the interface is made (outside
    #: the timed requests, which read them several times each)
    addr: str = field(init=False)
    subnet: str = field(init=False)

    def __post_init__(self) -> None:
        net = ipaddress.ip_network(lab.nic_subnet(self.k))
        object.__setattr__(self, "addr", str(net[self.host]))
        object.__setattr__(self, "subnet", str(net.network_address))

    nic = property(lambda self: lab.nic(self.k))
    gateway = property(lambda self: lab.nic_gateway(self.k))
    hpc = property(lambda self: f"198.19.{self.k}.0")  # lab.make_node's HPC route
    ifname = property(lambda self: f"eth{self.k + 1}")
    table = property(lambda self: TABLE + self.k)


@dataclass
class Attachment:
    """What one pod's attachment is: the pod's netns, the key and its interfaces."""

    pod_path: str
    key: str
    ifaces: tuple[Iface, ...] = (Iface(),)

    def tmp_name(self, k: int) -> str:
        """The name the link is made under, as `serve` names it (rdma_cni/datapath/plan.py)."""
        return f"rdt{self.key[:9]}{k:x}"

    @property
    def record_bytes(self) -> tuple[int, int]:
        """The sizes of its pending and its ready state record."""
        more = len(self.ifaces) - 1
        return PENDING_BYTES + more * PENDING_PER_IFACE, READY_BYTES + more * READY_PER_IFACE


@contextlib.contextmanager
def _channels(pod_path: str) -> Iterator[tuple[Channel, Channel, int]]:
    """(the node's channel, the pod's channel, the pod netns fd), made as `serve` makes
    them: the pod's socket opened inside the pod netns, then back to the node's."""
    node_ns = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    pod_ns = os.open(pod_path, os.O_RDONLY | os.O_CLOEXEC)
    pod: Channel | None = None
    node: Channel | None = None
    try:
        _setns(pod_ns)
        try:
            pod = Channel()
        finally:
            _setns(node_ns)
        node = Channel()
        yield node, pod, pod_ns
    finally:
        for ch in (node, pod):
            if ch is not None:
                ch.close()
        os.close(pod_ns)
        os.close(node_ns)


def _ipv4_conf(ifname: str) -> bytes:
    """The RTM_SETLINK of the pod interface's IPv4 settings (arp_ignore 1, arp_announce 2,
    rp_filter 2, arp_notify 1 by their ``IPV4_DEVCONF_*`` index), as `serve` sends it."""
    conf = b"".join(_u32(index, value) for index, value in ((19, 1), (18, 2), (8, 2), (22, 1)))
    return _ifinfo() + _name(IFLA_IFNAME, ifname) + _attr(
        IFLA_AF_SPEC, _attr(socket.AF_INET, _attr(IFLA_INET_CONF | NLA_F_NESTED, conf)))


def _locked(fd: int, *steps: Callable[[], Any]) -> Any:
    """Run ``steps`` holding the lock taken as ``fd`` (released by closing it)."""
    out = None
    try:
        for step in steps:
            out = step()
    finally:
        os.close(fd)
    return out


def floor_add(a: Attachment, store: Store) -> None:
    """Figure 2's ADD (one interface) or figure 1's (eight) as requests and writes only
    (see the block comment above)."""
    with _channels(a.pod_path) as (node, pod, pod_ns):
        for family, probe, flags in PROBES:  # the node's default route: none in this netns
            raw = socket.inet_pton(family, probe)
            node.request(RTM_GETROUTE, 0, _rtmsg(family, len(raw) * 8, 0, flags=flags)
                         + _attr(RTA_DST, raw), ENETUNREACH)
        nics = {i.nic: struct.unpack_from("=i", node.request(
            RTM_GETLINK, NLM_F_ACK, _ifinfo() + _name(IFLA_IFNAME, i.nic)), 4)[0]
            for i in a.ifaces}
        store.say("INFO no kubelet allocation source on this node: NICs taken from config "
                  "order; GPU/NIC NUMA alignment is not guaranteed")
        _facts(a, node, pod, nics)
        _reserve(a, store)
        for k, i in enumerate(a.ifaces):
            _steps(a, k, i, store, node, pod, pod_ns, nics[i.nic])
        ready = store.write_tmp("state", a.key, a.record_bytes[1])
        _locked(store.record_lock(a.key),
                lambda: _swap(ready, os.path.join(store.root, "state", f"{a.key}.json")),
                lambda: os.unlink(ready))  # the pending record, under the temp name now
        store.count(8)
        store.say(f"INFO resident ADD {a.key[:12]} exit 0 in 0.0 ms")


def _swap(new: str, old: str) -> None:
    """``renameat2(RENAME_EXCHANGE)``: the record put in place as the store does
    (rdma_cni/store/atomic.py, ``swap_in_place``)."""
    if LIBC.renameat2(AT_FDCWD, new.encode(), AT_FDCWD, old.encode(), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), new)


def _facts(a: Attachment, node: Channel, pod: Channel, nics: dict[str, int]) -> None:
    """The host's addresses and each NIC's routes, the pod's rules and each table's routes."""
    node.request(RTM_GETADDR, NLM_F_DUMP, struct.pack("=BBBBi", socket.AF_INET, 0, 0, 0, 0))
    for i in a.ifaces:
        # every table's routes through the NIC (its gateways are kept out of the pool)
        node.request(RTM_GETROUTE, NLM_F_DUMP, _rtmsg(socket.AF_INET, 0, 0)
                     + _u32(RTA_OIF, nics[i.nic]))
    pod.request(RTM_GETRULE, NLM_F_DUMP, _rule())
    for i in a.ifaces:
        pod.request(RTM_GETROUTE, NLM_F_DUMP, _rtmsg(socket.AF_INET, 0, i.table)
                    + _u32(RTA_TABLE, i.table))


def _reserve(a: Attachment, store: Store) -> None:
    """Each address's claim written ahead of the store lock, then under it the claims linked
    in place and the pending state; the claims' temp names unlinked after."""
    claims = [store.write_tmp("addrs", f"claim{k}", CLAIM_BYTES) for k in range(len(a.ifaces))]

    def pending() -> None:
        for claim, i in zip(claims, a.ifaces, strict=True):
            os.link(claim, os.path.join(store.root, "addrs", i.addr))
        os.rename(store.write_tmp("state", a.key, a.record_bytes[0]),
                  os.path.join(store.root, "state", f"{a.key}.json"))
    _locked(store.lock(), pending)
    for claim in claims:
        os.unlink(claim)


def _steps(a: Attachment, k: int, i: Iface, store: Store, node: Channel, pod: Channel,
           pod_ns: int, nic_index: int) -> None:
    """One interface's ten requests, each hold of the record's lock as `serve` takes it."""
    def held(*steps: Callable[[], Any]) -> Any:
        return _locked(store.record_lock(a.key), *steps)

    held(lambda: pod.request(RTM_GETLINK, NLM_F_ACK, _ifinfo() + _name(IFLA_IFNAME, i.ifname),
                             ENODEV))
    made = _ifinfo() + _name(IFLA_IFNAME, a.tmp_name(k)) + _u32(IFLA_LINK, nic_index) \
        + _u32(IFLA_NET_NS_FD, pod_ns) + _u32(IFLA_MTU, 1500) \
        + _attr(IFLA_LINKINFO, _name(IFLA_INFO_KIND, "macvlan")
                + _attr(IFLA_INFO_DATA, _u32(IFLA_MACVLAN_MODE, MACVLAN_MODE_BRIDGE)))
    link = held(lambda: node.request(RTM_NEWLINK, NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE, made),
                lambda: pod.request(RTM_GETLINK, NLM_F_ACK,
                                    _ifinfo() + _name(IFLA_IFNAME, a.tmp_name(k))))
    index = struct.unpack_from("=i", link, 4)[0]
    held(lambda: pod.request(RTM_SETLINK, NLM_F_ACK, _ifinfo(index) + _name(IFLA_IFNAME, i.ifname)
                             + _name(IFLA_IFALIAS, f"rdma-cni:{a.key}")))
    held(lambda: pod.request(RTM_SETLINK, NLM_F_ACK, _ipv4_conf(i.ifname)))
    new = NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    held(lambda: pod.request(RTM_NEWADDR, new, struct.pack("=BBBBi", socket.AF_INET, 24, 0, 0,
                                                           index)
                             + _ip(IFA_ADDRESS, i.addr) + _ip(IFA_LOCAL, i.addr)))
    held(lambda: pod.request(RTM_SETLINK, NLM_F_ACK, _ifinfo(0, IFF_UP, IFF_UP)
                             + _name(IFLA_IFNAME, i.ifname) + _u32(IFLA_MTU, 1500)))
    routes = _u32(RTA_TABLE, i.table) + _u32(RTA_OIF, index)
    held(lambda: pod.request(RTM_NEWROUTE, new, _rtmsg(socket.AF_INET, 24, i.table, 4, 0xfd, 1)
                             + _ip(RTA_DST, i.subnet) + routes),
         lambda: pod.request(RTM_NEWROUTE, new, _rtmsg(socket.AF_INET, 24, i.table, 4, 0, 1, 4)
                             + _ip(RTA_DST, i.hpc) + routes + _ip(RTA_GATEWAY, i.gateway)))
    held(lambda: pod.request(RTM_NEWRULE, new, _rule_of(i)))


def _rule_of(i: Iface) -> bytes:
    return _rule(i.table, 32, 1) + _ip(FRA_SRC, i.addr) + _u32(FRA_TABLE, i.table) \
        + _u32(FRA_PRIORITY, PRIORITY)


def _dellink_unlisted(pod_ns: int, body: bytes, indexes: set[int]) -> None:
    """The RTM_DELLINK of ``body`` sent from a thread of its own in the pod netns, waited
    for until the kernel's RTM_DELLINK notification of every link of ``indexes``, as `serve`
    deletes (rdma_cni/adapters/rtnlunlist.py): the thread finishes the kernel's freeing."""
    ready = threading.Event()
    box: dict[str, socket.socket] = {}

    def run() -> None:
        _setns(pod_ns)
        listener = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                 socket.NETLINK_ROUTE)
        listener.bind((0, 1))  # RTMGRP_LINK
        chan = Channel()
        box["listener"] = listener
        ready.set()
        try:
            chan.request(RTM_DELLINK, NLM_F_ACK, body)
        finally:
            chan.close()

    threading.Thread(target=run).start()
    ready.wait()
    listener, left = box["listener"], set(indexes)
    try:
        while left:
            data, (sender, _groups) = listener.recvfrom(65536)
            off = 0
            while sender == 0 and off + 24 <= len(data):
                length, kind = struct.unpack_from("=IH", data, off)
                if kind == RTM_DELLINK:
                    left.discard(struct.unpack_from("=i", data, off + 20)[0])
                off += max((length + 3) & ~3, 16)
    finally:
        listener.close()


def floor_del(a: Attachment, store: Store) -> None:
    """Figure 2b's DEL (or figure 1's, eight interfaces) as requests and writes only: two
    or more links marked with a group of their own and deleted as that group, as `serve`
    deletes them (rdma_cni/adapters/netlink.py, ``delete_links``)."""
    with _channels(a.pod_path) as (_node, pod, pod_ns):
        indexes = []
        for k, i in enumerate(a.ifaces):
            pod.request(RTM_DELRULE, NLM_F_ACK, _rule_of(i))
            pod.request(RTM_GETLINK, NLM_F_ACK, _ifinfo() + _name(IFLA_IFNAME, a.tmp_name(k)),
                        ENODEV)
            found = pod.request(RTM_GETLINK, NLM_F_ACK, _ifinfo() + _name(IFLA_IFNAME, i.ifname))
            indexes.append(struct.unpack_from("=i", found, 4)[0])
        if len(a.ifaces) == 1:
            which = _name(IFLA_IFNAME, a.ifaces[0].ifname)
        else:
            which = _u32(IFLA_GROUP, int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF or 1)
            for i in a.ifaces:
                pod.request(RTM_SETLINK, NLM_F_ACK, _ifinfo() + _name(IFLA_IFNAME, i.ifname)
                            + which)
        _dellink_unlisted(pod_ns, _ifinfo() + which, set(indexes))
        for index in indexes:
            pod.request(RTM_GETLINK, NLM_F_ACK, _ifinfo(index), ENODEV)

    def release() -> None:
        for i in a.ifaces:
            os.unlink(os.path.join(store.root, "addrs", i.addr))
        os.unlink(os.path.join(store.root, "state", f"{a.key}.json"))
    _locked(store.lock(), release)
    store.say(f"INFO DEL of vpc-cni/{a.key} released {len(a.ifaces)} interface(s)")
    store.count(136)
    store.say(f"INFO resident DEL {a.key[:12]} exit 0 in 0.0 ms")


def floor_pass_through(store: Store) -> None:
    """Figure 3's pass-through ADD as writes only: `serve`'s operation count and log line
    (the answer is the previous result, unchanged: no request to the kernel)."""
    store.count(8)
    store.say("INFO resident ADD 0123456789ab exit 0 in 0.0 ms")


def add_del_floor(tmp: str, pods: Any, rounds: int, n_ifaces: int = 1) -> dict[str, Any]:
    """Median ms of ``rounds`` floor ADDs and DELs, each on a fresh pod from ``pods``
    (bench/lab.py's Pods: made and deleted untimed), of ``n_ifaces`` interfaces on the
    node's ``rdma0``, ``rdma1``, ..."""
    store = Store(os.path.join(tmp, "floor-store"))
    adds: list[float] = []
    dels: list[float] = []
    sent: dict[str, set[int]] = {"add": set(), "del": set()}
    try:
        for _ in range(rounds):
            (pod,) = pods.create(1)
            try:
                a = Attachment(pod.path, hashlib.sha1(pod.name.encode()).hexdigest(),
                               tuple(Iface(k) for k in range(n_ifaces)))
                before, start = Channel.sent, time.perf_counter_ns()
                floor_add(a, store)
                adds.append((time.perf_counter_ns() - start) / 1e6)
                sent["add"].add(Channel.sent - before)
                before, start = Channel.sent, time.perf_counter_ns()
                floor_del(a, store)
                dels.append((time.perf_counter_ns() - start) / 1e6)
                sent["del"].add(Channel.sent - before)
            finally:
                pods.delete([pod])
    finally:
        store.close()
    return {"add_ms": round(statistics.median(adds), 3),
            "del_ms": round(statistics.median(dels), 3), "n": rounds, "interfaces": n_ifaces,
            "add_requests": _one(sent["add"]), "del_requests": _one(sent["del"])}


def _one(counts: set[int]) -> int:
    """The number of requests every round made (the floor's steps do not vary)."""
    if len(counts) != 1:
        raise RuntimeError(f"floor: the rounds made different numbers of requests: {counts}")
    return counts.pop()
