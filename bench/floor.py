"""The physical floor on this machine, measured in the same run: an exec of a static
C ``true`` built as the front is (the least any exec'd plugin costs; and built against
glibc, for comparison), one netlink round trip (the least
one kernel request costs), and the kernel's floor of figure 2's ADD and figure 2b's DEL
(the same netlink requests and store writes `serve` makes, in the same
order, with nothing else), so the table shows how close each figure is to the limit."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import os
import socket
import statistics
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

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


def measure(tmp: str, n: int = 50, pods: Any = None, rounds: int = 15) -> dict[str, Any]:
    """The floor; with ``pods`` (bench/lab.py's Pods, inside the node netns) also the
    ADD's and DEL's (``rounds`` of each)."""
    true, glibc = static_true(tmp), static_true(tmp, "gcc")
    return {"static_true": exec_ms([true], n) if true else None,
            "static_true_glibc": exec_ms([glibc], n) if glibc else None,
            "netlink": netlink_rtt_ms(n * 20),
            "file_create": file_create_us(tmp, n * 4),
            "add_del": add_del_floor(tmp, pods, rounds) if pods is not None else None}


# -- the kernel's floor of the one-interface resident ADD and DEL --------------------------
# The requests and writes below are those `rdma-cni serve` makes for figure 2's ADD and
# figure 2b's DEL (one block, shared-multi, the stand-in NIC rdma0), in the same order,
# found with strace on `serve` (bench/README.md, "The kernel's floor"). Nothing is decoded
# or checked beyond what the next request needs (the new link's index).

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

    def __post_init__(self) -> None:
        for sub in ("addrs", "state"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        self.metrics = os.path.join(self.root, "metrics")
        with open(self.metrics, "wb") as f:
            f.write(b"\0" * METRICS_BYTES)
        self.log = os.open(os.path.join(self.root, "floor.log"),
                           os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    def lock(self) -> int:
        fd = os.open(os.path.join(self.root, "lock"),
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd

    @staticmethod
    def unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

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
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
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


@dataclass
class Attachment:
    """What one interface of one pod is: the pod's netns, the names and the address."""

    pod_path: str
    key: str
    nic: str = "rdma0"
    addr: str = "198.18.0.2"
    gateway: str = "198.18.0.254"
    subnet: str = "198.18.0.0"
    hpc: str = "198.19.0.0"
    ifname: str = "eth1"

    @property
    def tmp_name(self) -> str:
        return f"rdt{self.key[:10]}"


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


def _locked(store: Store, *steps: Callable[[], Any]) -> Any:
    fd, out = store.lock(), None
    try:
        for step in steps:
            out = step()
    finally:
        Store.unlock(fd)
    return out


def floor_add(a: Attachment, store: Store) -> None:
    """Figure 2's ADD as requests and writes only (see the block comment above)."""
    rule = _rule(TABLE, 32, 1) + _ip(FRA_SRC, a.addr) + _u32(FRA_TABLE, TABLE) \
        + _u32(FRA_PRIORITY, PRIORITY)
    with _channels(a.pod_path) as (node, pod, pod_ns):
        link = node.request(RTM_GETLINK, NLM_F_ACK, _ifinfo() + _name(IFLA_IFNAME, a.nic))
        nic_index = struct.unpack_from("=i", link, 4)[0]
        main = _u32(RTA_TABLE, RT_TABLE_MAIN) + _u32(RTA_OIF, nic_index)
        for family, probe, flags in PROBES:  # the node's default route: none in this netns
            raw = socket.inet_pton(family, probe)
            node.request(RTM_GETROUTE, 0, _rtmsg(family, len(raw) * 8, 0, flags=flags)
                         + _attr(RTA_DST, raw), ENETUNREACH)
        store.say("INFO no kubelet allocation source on this node: NICs taken from config "
                  "order; GPU/NIC NUMA alignment is not guaranteed")
        Store.unlock(store.lock())
        node.request(RTM_GETADDR, NLM_F_DUMP, struct.pack("=BBBBi", socket.AF_INET, 0, 0, 0, 0))
        node.request(RTM_GETROUTE, NLM_F_DUMP, _rtmsg(socket.AF_INET, 0, RT_TABLE_MAIN) + main)
        pod.request(RTM_GETRULE, NLM_F_DUMP, _rule())
        pod.request(RTM_GETROUTE, NLM_F_DUMP, _rtmsg(socket.AF_INET, 0, TABLE)
                    + _u32(RTA_TABLE, TABLE))
        claim = store.write_tmp("addrs", "claim", CLAIM_BYTES)
        state = os.path.join(store.root, "state", f"{a.key}.json")

        def pending() -> None:
            os.link(claim, os.path.join(store.root, "addrs", a.addr))
            os.rename(store.write_tmp("state", a.key, PENDING_BYTES), state)
        _locked(store, pending)
        os.unlink(claim)
        _locked(store, lambda: pod.request(RTM_GETLINK, NLM_F_ACK,
                                           _ifinfo() + _name(IFLA_IFNAME, a.ifname), ENODEV))
        made = _ifinfo() + _name(IFLA_IFNAME, a.tmp_name) + _u32(IFLA_LINK, nic_index) \
            + _u32(IFLA_NET_NS_FD, pod_ns) + _u32(IFLA_MTU, 1500) \
            + _attr(IFLA_LINKINFO, _name(IFLA_INFO_KIND, "macvlan")
                    + _attr(IFLA_INFO_DATA, _u32(IFLA_MACVLAN_MODE, MACVLAN_MODE_BRIDGE)))
        link = _locked(
            store, lambda: node.request(RTM_NEWLINK, NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE, made),
            lambda: pod.request(RTM_GETLINK, NLM_F_ACK, _ifinfo() + _name(IFLA_IFNAME, a.tmp_name)))
        index = struct.unpack_from("=i", link, 4)[0]
        _locked(store, lambda: pod.request(
            RTM_SETLINK, NLM_F_ACK, _ifinfo(index) + _name(IFLA_IFNAME, a.ifname)
            + _name(IFLA_IFALIAS, f"rdma-cni:{a.key}")))
        _locked(store, lambda: pod.request(RTM_SETLINK, NLM_F_ACK, _ipv4_conf(a.ifname)))
        new = NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
        _locked(store, lambda: pod.request(
            RTM_NEWADDR, new, struct.pack("=BBBBi", socket.AF_INET, 24, 0, 0, index)
            + _ip(IFA_ADDRESS, a.addr) + _ip(IFA_LOCAL, a.addr)))
        _locked(store, lambda: pod.request(
            RTM_SETLINK, NLM_F_ACK, _ifinfo(0, IFF_UP, IFF_UP) + _name(IFLA_IFNAME, a.ifname)
            + _u32(IFLA_MTU, 1500)))
        routes = _u32(RTA_TABLE, TABLE) + _u32(RTA_OIF, index)
        _locked(store, lambda: pod.request(
                    RTM_NEWROUTE, new, _rtmsg(socket.AF_INET, 24, TABLE, 4, 0xfd, 1)
                    + _ip(RTA_DST, a.subnet) + routes),
                lambda: pod.request(
                    RTM_NEWROUTE, new, _rtmsg(socket.AF_INET, 24, TABLE, 4, 0, 1, 4)
                    + _ip(RTA_DST, a.hpc) + routes + _ip(RTA_GATEWAY, a.gateway)))
        _locked(store, lambda: pod.request(RTM_NEWRULE, new, rule))
        ready = store.write_tmp("state", a.key, READY_BYTES)
        _locked(store, lambda: os.rename(ready, state))
        store.count(8)
        store.say(f"INFO resident ADD {a.key[:12]} exit 0 in 0.0 ms")


def _dellink_unlisted(pod_ns: int, body: bytes, index: int) -> None:
    """The RTM_DELLINK of ``body`` sent from a thread of its own in the pod netns, waited
    for until the kernel's RTM_DELLINK notification of link ``index``, as `serve` deletes
    (rdma_cni/adapters/rtnlunlist.py): the thread finishes the kernel's freeing of it."""
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
    listener = box["listener"]
    try:
        while True:
            data, (sender, _groups) = listener.recvfrom(65536)
            off = 0
            while sender == 0 and off + 24 <= len(data):
                length, kind = struct.unpack_from("=IH", data, off)
                if kind == RTM_DELLINK and struct.unpack_from("=i", data, off + 20)[0] == index:
                    return
                off += max((length + 3) & ~3, 16)
    finally:
        listener.close()


def floor_del(a: Attachment, store: Store) -> None:
    """Figure 2b's DEL as requests and writes only."""
    rule = _rule(TABLE, 32, 1) + _ip(FRA_SRC, a.addr) + _u32(FRA_TABLE, TABLE) \
        + _u32(FRA_PRIORITY, PRIORITY)
    with _channels(a.pod_path) as (_node, pod, pod_ns):
        pod.request(RTM_DELRULE, NLM_F_ACK, rule)
        pod.request(RTM_GETLINK, NLM_F_ACK, _ifinfo() + _name(IFLA_IFNAME, a.tmp_name), ENODEV)
        found = pod.request(RTM_GETLINK, NLM_F_ACK, _ifinfo() + _name(IFLA_IFNAME, a.ifname))
        (index,) = struct.unpack_from("=i", found, 4)
        _dellink_unlisted(pod_ns, _ifinfo() + _name(IFLA_IFNAME, a.ifname), index)
        pod.request(RTM_GETLINK, NLM_F_ACK, _ifinfo(index), ENODEV)

    def release() -> None:
        os.unlink(os.path.join(store.root, "addrs", a.addr))
        os.unlink(os.path.join(store.root, "state", f"{a.key}.json"))
    _locked(store, release)
    store.say(f"INFO DEL of vpc-cni/{a.key} released 1 interface(s)")
    store.count(136)
    store.say(f"INFO resident DEL {a.key[:12]} exit 0 in 0.0 ms")


def add_del_floor(tmp: str, pods: Any, rounds: int) -> dict[str, Any]:
    """Median ms of ``rounds`` floor ADDs and DELs, each on a fresh pod from ``pods``
    (bench/lab.py's Pods: made and deleted untimed); the node's ``rdma0`` is the NIC."""
    store = Store(os.path.join(tmp, "floor-store"))
    adds: list[float] = []
    dels: list[float] = []
    sent: dict[str, set[int]] = {"add": set(), "del": set()}
    try:
        for _ in range(rounds):
            (pod,) = pods.create(1)
            try:
                a = Attachment(pod.path, hashlib.sha1(pod.name.encode()).hexdigest())
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
            "del_ms": round(statistics.median(dels), 3), "n": rounds,
            "add_requests": _one(sent["add"]), "del_requests": _one(sent["del"])}


def _one(counts: set[int]) -> int:
    """The number of requests every round made (the floor's steps do not vary)."""
    if len(counts) != 1:
        raise RuntimeError(f"floor: the rounds made different numbers of requests: {counts}")
    return counts.pop()
