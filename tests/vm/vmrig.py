"""The VM tier's rig: drive the built binary against the VM's own kernel.

The node is the VM's **root** netns (the VM is throwaway): a physical NIC whose pod
netns dies comes back to the root netns (init_net), never to a netns we made, so
exclusive mode can only be proven there. Stand-in NICs are dummies (or the VM's
virtio-net PCI NICs); pods are netns with a veth ``eth0`` (the primary's) whose
peer lives in a private fabric netns. At the end the rig checks that the data dir
holds no state/ips/nics files and that the root netns shows exactly what it showed
when the first chain was made (``ip -j``: links, addresses and routes of every family
in every table, rules), then removes everything it made and puts borrowed NICs back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Interface
from pathlib import Path
from typing import Any

import pytest
from cnirunner import (
    _LINK_KEYS,
    _ROUTE_DROP,
    BINARY,
    HOST_TREE,
    SYSCTLS,
    Chain,
    Pod,
    addr_row,
    data_files,
    install_host_tree,
    ip_json,
    plugin_conf,
    sh,
    unique_prefix,
    without,
)
from support.netns import named as netns_named
from support.proc import wait_for

NODE = None  # the VM's root netns (``ip`` without ``-n``)
STAMP = BINARY.parents[1] / ".built"  # scripts/build.sh: both bundles complete
SETTLE = 15.0  # seconds for async kernel work (netns cleanup, link state) to settle
SETTLE_DAD = 10.0  # seconds for IPv6 duplicate address detection (an emulated guest is slow)


def guest_binary(dest: Path, attempts: int = 12) -> list[str]:
    """The built bundle (every subcommand), copied to the guest's tmpfs (a host rebuild
    cannot pull it away, and execs read tmpfs instead of 9p). ``RDMA_CNI_TEST_BINARY``
    overrides it. A copy that races a rebuild on the host (files vanish) is retried."""
    override = os.environ.get("RDMA_CNI_TEST_BINARY")
    if override:
        return [override]
    target = dest / "rdma-cni"
    for _ in range(attempts):
        if BINARY.exists() and STAMP.exists():
            try:
                shutil.copytree(BINARY.parent, target, symlinks=True)
                if STAMP.exists():
                    return [str(target / BINARY.name)]
            except (OSError, shutil.Error):
                pass
            shutil.rmtree(target, ignore_errors=True)
        time.sleep(10)
    pytest.fail(f"no complete {BINARY.parent}: run ./scripts/build.sh on the host first")


def guest_plugin(dest: Path, attempts: int = 12) -> list[str]:
    """The host plugin as ``install`` lays it out (a versioned tree in a CNI bin dir on
    the guest's tmpfs): what the runtime execs on a node. ``RDMA_CNI_TEST_BINARY``
    overrides it."""
    override = os.environ.get("RDMA_CNI_TEST_BINARY")
    if override:
        return [override]
    for _ in range(attempts):
        if HOST_TREE.exists() and STAMP.exists():
            try:
                return [str(install_host_tree(dest / "bin"))]
            except (OSError, shutil.Error):
                shutil.rmtree(dest / "bin", ignore_errors=True)
        time.sleep(10)
    pytest.fail(f"no complete {HOST_TREE}: run ./scripts/build.sh on the host first")


# --- ip, batched: every exec costs ~0.5 s in an emulated guest ----------------------
def _json_docs(text: str) -> list[Any]:
    dec, i = json.JSONDecoder(), 0
    docs: list[Any] = []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return docs
        doc, i = dec.raw_decode(text, i)
        docs.append(doc)


def ip_batch(ns: str | None, commands: Iterable[str],
             opts: Sequence[str] = ("-j", "-d", "-4")) -> list[Any]:
    """Run ``ip [opts] [-n ns] -batch -`` once; one parsed JSON document per command
    (with ``-j``), else []."""
    argv = ["ip", *opts, *(["-n", ns] if ns else []), "-batch", "-"]
    out = sh(*argv, input="\n".join(commands) + "\n")
    return _json_docs(out) if "-j" in opts else []


def carries(link: dict[str, Any]) -> bool:
    """``link`` (as ``ip -j link`` shows it) is up with carrier."""
    return "UP" in link["flags"] and "NO-CARRIER" not in link["flags"]


def has_carrier(nic: str) -> bool:
    """The root netns's ``nic`` is up with carrier."""
    return carries(ip_json(None, "link", "show", "dev", nic)[0])


def snapshot(ns: str | None) -> dict[str, Any]:
    """cnirunner.snapshot's shape and rules (links, addresses and routes of every family
    in every table, rules of both families; addresses once no link with carrier has a
    tentative one, bounded), read with three ``ip`` execs."""
    deadline = time.monotonic() + SETTLE_DAD
    while True:
        links, addrs = ip_batch(ns, ["link show", "addr show"], ("-j",))
        if time.monotonic() > deadline or not any(
                lk.get("operstate") in ("UP", "UNKNOWN") and
                any(a.get("tentative") for a in lk.get("addr_info", [])) for lk in addrs):
            break
        time.sleep(0.2)
    routes4, rules4 = ip_batch(ns, ["route show table all", "rule show"], ("-j", "-4"))
    routes6, rules6 = ip_batch(ns, ["route show table all", "rule show"], ("-j", "-6"))
    return {
        "links": sorted(({k: lk.get(k) for k in _LINK_KEYS} for lk in links),
                        key=lambda x: x["ifname"]),
        "addrs": sorted(addr_row(lk["ifname"], a)
                        for lk in addrs for a in lk.get("addr_info", [])),
        "routes": sorted(json.dumps({k: v for k, v in r.items() if k not in _ROUTE_DROP},
                                    sort_keys=True) for r in routes4 + routes6),
        "rules": sorted(json.dumps(r, sort_keys=True) for r in rules4 + rules6),
    }


@dataclass
class PodView:
    """What a pod netns shows (``ip -j -d``, /proc/sys), read with two execs."""

    name: str
    links: dict[str, dict[str, Any]]
    ipv4: dict[str, list[str]]
    routes: list[dict[str, Any]]
    rules: list[dict[str, Any]]
    sysctls: dict[str, dict[str, str]]

    @classmethod
    def read(cls, pod: Pod | str, sysctl_devs: Sequence[str] = ()) -> PodView:
        name = pod if isinstance(pod, str) else pod.name
        links, addrs, routes, rules = ip_batch(
            name, ["link show", "addr show", "route show table all", "rule show"])
        return cls(name, {lk["ifname"]: lk for lk in links},
                   {lk["ifname"]: [f"{a['local']}/{a['prefixlen']}"
                                   for a in lk.get("addr_info", [])] for lk in addrs},
                   routes, rules, _sysctls(name, sysctl_devs))

    def table(self, table: int | str) -> set[tuple[str, str | None, str, bool]]:
        """(dst, gateway, dev, onlink) of routing table ``table``."""
        return {(r["dst"], r.get("gateway"), r["dev"], "onlink" in r.get("flags", []))
                for r in self.routes if str(r.get("table", "main")) == str(table)}

    def rule_of(self, ip: str) -> list[tuple[int, str]]:
        return [(r["priority"], str(r["table"])) for r in self.rules
                if r.get("src") == ip and r.get("srclen", 32) == 32]

    def route_keys(self) -> set[tuple[str, str, str, str | None]]:
        """(table, dst, dev, gateway) of every route (flags like linkdown left out)."""
        return {(str(r.get("table", "main")), r["dst"], r.get("dev", ""), r.get("gateway"))
                for r in self.routes}

    def ours(self) -> list[str]:
        """Link names besides the primary's eth0 and lo."""
        return sorted(set(self.links) - {"lo", "eth0"})


def _sysctls(ns: str, devs: Sequence[str]) -> dict[str, dict[str, str]]:
    if not devs:
        return {}
    files = [f"/proc/sys/net/ipv4/conf/{d}/{k}" for d in devs for k in SYSCTLS]
    values = sh("ip", "netns", "exec", ns, "cat", *files).split()
    it = iter(values)
    return {d: {k: next(it) for k in SYSCTLS} for d in devs}


def assert_iface(view: PodView, name: str, *, ip: str, table: int, mtu: int,
                 hpc: Sequence[tuple[str, str]], kind: str | None,
                 priority: int = 20000) -> None:
    """One RDMA interface of a pod as DESIGN section 2 wants it (``kind`` None: a
    physical NIC). ``view`` must be read with ``name`` among its sysctl devices."""
    link = view.links[name]
    info = link.get("linkinfo") or {}
    assert info.get("info_kind") == kind, link
    if kind in MODE:
        assert info["info_data"]["mode"] == MODE[kind], link
    assert link["mtu"] == mtu and "UP" in link["flags"], link
    assert view.ipv4.get(name) == [ip], view.ipv4
    assert view.sysctls[name] == SYSCTLS, view.sysctls
    assert view.rule_of(ip.split("/")[0]) == [(priority, str(table))], view.rules
    want: set[tuple[str, str | None, str, bool]] = {
        (str(IPv4Interface(ip).network), None, name, False)}
    want |= {(dst, gw, name, True) for dst, gw in hpc}
    assert view.table(table) == want, view.routes


MODE = {"ipvlan": "l2", "macvlan": "bridge"}


def link_by(ns: str | None, **want: Any) -> dict[str, Any] | None:
    """The first link of ``ns`` (``ip -j -d link``) whose fields equal ``want``."""
    for link in ip_json(ns, "-d", "link", "show"):
        if all(link.get(k) == v for k, v in want.items()):
            return link
    return None


class VmRig:
    """One test's NICs, pods, data dir and chain, in the VM's root netns."""

    def __init__(self, tmp: Path, binary: Sequence[str]) -> None:
        self.prefix = unique_prefix()
        self.fabric = f"{self.prefix}f"
        self.tmp = tmp
        self.binary = list(binary)
        self.data_dir = tmp / "data"
        self.log_file = tmp / "rdma-cni.log"
        self.baseline: dict[str, Any] | None = None
        self.gone: set[str] = set()
        self.pods: list[Pod] = []
        self._dummies: list[str] = []
        self._undo: list[Callable[[], None]] = []
        sh("ip", "netns", "add", self.fabric)

    # --- building ---------------------------------------------------------------
    def dummy(self, name: str, cidr: str | None, *, mtu: int = 1500,
              routes: Sequence[tuple[str, str]] = ()) -> str:
        """An up dummy NIC in the root netns with an address and (dst, via) routes."""
        self._dummies.append(name)
        self.configure(name, cidr, routes=routes,
                       first=[f"link add name {name} mtu {mtu} type dummy"])
        return name

    def configure(self, name: str, cidr: str | None, *, mtu: int | None = None,
                  routes: Sequence[tuple[str, str]] = (), first: Sequence[str] = ()) -> None:
        cmds = list(first)
        cmds += [f"link set dev {name} mtu {mtu}"] if mtu else []
        cmds += [f"addr add {cidr} dev {name}"] if cidr else []
        cmds += [f"link set dev {name} up"]
        cmds += [f"route add {dst} via {via} dev {name}" for dst, via in routes]
        ip_batch(None, cmds, ())

    def borrow(self, nic: str, rename: str | None = None) -> str:
        """A virtio NIC for this test (optionally renamed); put back as it was at close,
        wherever the kernel left it in the root netns (found by its parent device)."""
        link = ip_json(None, "-d", "link", "show", "dev", nic)[0]
        parent, mtu, up = link["parentdev"], link["mtu"], "UP" in link["flags"]
        carrier = carries(link)

        def restore() -> None:
            now = wait_for(lambda: link_by(NODE, parentdev=parent), timeout=SETTLE)
            assert now is not None, f"virtio NIC {nic} ({parent}) is not in the root netns"
            name = now["ifname"]
            sh("ip", "link", "set", "dev", name, "down")
            sh("ip", "addr", "flush", "dev", name)
            sh("ip", "link", "set", "dev", name, "name", nic, "mtu", str(mtu), "alias", "")
            if up:
                sh("ip", "link", "set", "dev", nic, "up")
            if carrier:  # virtio-net reports it again some seconds after the link is up
                # under emulation: the next test's baseline must not see it arrive
                assert wait_for(lambda: has_carrier(nic), timeout=SETTLE), \
                    f"virtio NIC {nic} has no carrier again after {SETTLE}s"

        self._undo.append(restore)
        if rename:
            sh("ip", "link", "set", "dev", nic, "down")
            sh("ip", "link", "set", "dev", nic, "name", rename)
            return rename
        return nic

    def on_close(self, fn: Callable[[], None]) -> None:
        self._undo.append(fn)

    def pod(self, eth0: str = "203.0.113.5/24") -> Pod:
        """A pod netns with a veth ``eth0`` like the primary CNI's (peer in the fabric)."""
        pod = Pod(f"{self.prefix}p{len(self.pods)}")
        self.pods.append(pod)
        sh("ip", "netns", "add", pod.name)
        gw = eth0.rsplit(".", 1)[0] + ".1"
        ip_batch(pod.name, ["link set dev lo up",
                            f"link add name eth0 type veth peer name v{pod.name[-14:]} "
                            f"netns {self.fabric}",
                            f"addr add {eth0} dev eth0",
                            "link set dev eth0 up",
                            f"route add default via {gw} dev eth0 onlink"], ())
        return pod

    def delete_pod(self, pod: Pod) -> None:
        if os.path.exists(pod.path):
            sh("ip", "netns", "del", pod.name)

    def plugin(self, mode: str, devices: Sequence[str], **extra: Any) -> dict[str, Any]:
        return plugin_conf(mode, devices, self.tmp, **extra)

    def chain(self, mode: str, devices: Sequence[str], **extra: Any) -> Chain:
        """The libcni-like chain running the binary in the root netns; the first call
        takes the node's baseline snapshot."""
        if self.baseline is None:
            self.baseline = snapshot(NODE)
        return Chain(self.plugin(mode, devices, **extra), node_ns=None, binary=self.binary)

    # --- oracles ----------------------------------------------------------------
    def files(self) -> list[str]:
        return data_files(self.data_dir)

    def node_changes(self) -> dict[str, Any]:
        """What differs from the baseline (empty when the node is as before)."""
        assert self.baseline is not None
        want, have = without(self.baseline, self.gone), snapshot(NODE)
        return {k: {"was": [x for x in want[k] if x not in have[k]],
                    "now": [x for x in have[k] if x not in want[k]]}
                for k in want if want[k] != have[k]}

    def settled_changes(self) -> dict[str, Any]:
        """node_changes() once async link-state updates had time to land."""
        changes: dict[str, Any] = {}

        def same() -> bool:
            nonlocal changes
            changes = self.node_changes()
            return not changes

        wait_for(same, timeout=5.0)
        return changes

    def assert_clean(self) -> None:
        assert self.files() == [], f"data dir not clean: {self.files()}"
        if self.baseline is not None:
            assert self.settled_changes() == {}, "node (VM root netns) changed"

    def log_tail(self, n: int = 30) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text().splitlines()[-n:])

    def close(self) -> None:
        cmds = [f"netns del {p.name}" for p in self.pods if os.path.exists(p.path)]
        cmds += [f"netns del {self.fabric}"]
        cmds += [f"link del dev {n}" for n in reversed(self._dummies)]
        sh("ip", "-force", "-batch", "-", input="\n".join(cmds) + "\n", check=False)
        errors = []
        for fn in reversed(self._undo):
            try:
                fn()
            except (AssertionError, RuntimeError) as exc:
                errors.append(str(exc))
        assert not errors, f"could not put the VM back: {errors}"


@contextlib.contextmanager
def vm_rig(tmp: Path, binary: Sequence[str]) -> Any:
    """The rig of one test: yields it, then checks it clean and removes what it made."""
    rig = VmRig(tmp, binary)
    failed: AssertionError | None = None
    try:
        yield rig
        try:
            rig.assert_clean()
        except AssertionError as exc:
            failed = exc
    finally:
        rig.close()
    assert netns_named(rig.prefix) == [], "netns left behind"
    if failed is not None:
        raise AssertionError(f"{failed}\nplugin log:\n{rig.log_tail()}")
