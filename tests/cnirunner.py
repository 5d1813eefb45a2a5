"""Drive rdma-cni the way libcni does, against throwaway network namespaces.

Reusable by every root test tier (native integration, VM tier, containerd,
hardening):

- :func:`run_plugin` runs one CNI command (built binary or ``python -m rdma_cni``),
  optionally inside a "node" netns via ``ip netns exec`` (the plugin then treats
  that netns as the host), and returns ``(rc, parsed_stdout, stderr)``.
- :class:`Chain` chains the plugin after a vpc-cni-shaped primary exactly as libcni
  does: ADD gets the primary's result as ``prevResult`` at the list's cniVersion,
  the final result is cached, DEL and CHECK get the cached result as ``prevResult``,
  GC gets ``cni.dev/valid-attachments``.
- :class:`Node` builds a node netns, stand-in NICs (veth ends whose peers live in a
  "fabric" netns; ``kind="dummy"``/other kinds for the VM tier), pod netns (with an
  ``eth0`` mimicking the primary) and takes ``ip -j`` snapshots for before/after checks.

Only documentation ranges are used by the defaults (198.51.100.0/24, 203.0.113.0/24,
198.18.0.0/15), always inside namespaces made here.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from support.netns import ip_json
from support.proc import plugin_env, sh

REPO = Path(__file__).resolve().parents[1]
BINARY = REPO / "dist" / "rdma-cni" / "rdma-cni"  # the image's bundle: every subcommand
HOST_TREE = REPO / "dist" / "rdma-cni-host"  # the host's CNI-only plugin, as built
PYTHON = REPO / ".venv" / "bin" / "python"
NETNS_DIR = "/var/run/netns"
ANNOTATION = "k8s.volcengine.com/pod-networks"
CAP_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"
VALID_ATTACHMENTS = "cni.dev/valid-attachments"
HPC_NET = "198.18.0.0/15"  # the fabric ("HPC") network the stand-in NICs route to

_counter = itertools.count()


# --- running commands (sh and ip_json: support.proc, support.netns) -------------
def wait_oper_up(ns: str, dev: str, timeout: float = 5.0) -> None:
    """Wait until ``dev`` has carrier (operstate UP), so snapshots do not race it."""
    deadline = time.monotonic() + timeout
    while ip_json(ns, "link", "show", "dev", dev)[0].get("operstate") != "UP":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{dev} in {ns} did not come up")
        time.sleep(0.01)


def in_ns(ns: str, *argv: str, check: bool = True) -> str:
    return sh("ip", "netns", "exec", ns, *argv, check=check)


def as_pod_process(ns: str, script: str, caps: str = "net_admin") -> str:
    """Run the sh ``script`` in netns ``ns`` as a pod's process: root whose capabilities
    are only ``caps`` (the bounding set of everything it runs); its stdout."""
    return in_ns(ns, "setpriv", "--bounding-set", f"-all,+{caps}", "--", "sh", "-c", script)


_SPOOF = """
unshare -U -n sleep 600 >/dev/null 2>&1 &
hideout=$!
sleep 1
ip link set dev {dev} netns $hideout
ip link add name {dev}{index} address {mac} type veth peer name {dev}peer
ip link set dev {dev} alias '{alias}'
ip addr add {cidr} dev {dev}
ip link set dev {dev} up
ip link set dev {dev}peer up
echo $hideout
"""


def hide_and_spoof(ns: str, dev: str, cidr: str, same_index: bool = False) -> int:
    """What a pod with CAP_NET_ADMIN can do to the exclusive NIC ``dev`` it was given:
    hide it in a netns of its own (in a user namespace it makes: no other capability
    needed) and make a veth with its name, MAC, alias and address ``cidr`` (and with
    ``same_index``, its index in the pod too: the hiding place freed it; without, an
    index far from it, since the kernel may hand the freed one out again). The PID of
    the process that holds the hiding place (its netns dies with it)."""
    real = ip_json(ns, "link", "show", "dev", dev)[0]
    index = f" index {real['ifindex'] + (0 if same_index else 1000)}"
    script = _SPOOF.format(dev=dev, mac=real["address"], alias=real.get("ifalias", ""),
                           cidr=cidr, index=index)
    hideout = int(as_pod_process(ns, script).split()[-1])
    assert os.path.exists(f"/proc/{hideout}") and ip_json(ns, "link", "show", "dev",
                                                          f"{dev}peer"), (
        f"the pod's process could not hide {dev} and make its look-alike")
    return hideout


def python_command() -> list[str]:
    return [str(PYTHON if PYTHON.exists() else "python3"), "-m", "rdma_cni"]


def binary_command() -> list[str]:
    return [str(BINARY)]


class PluginRun(NamedTuple):
    rc: int
    out: Any  # parsed stdout (None when empty; the raw text when not JSON)
    err: str

    @property
    def code(self) -> int | None:
        """The CNI error code of a failed run, else None."""
        return self.out.get("code") if isinstance(self.out, dict) and self.rc else None


def plugin_invocation(
    cmd: str,
    *,
    container_id: str = "",
    netns: str | None = None,
    ifname: str = "eth0",
    cni_args: str = "",
    node_ns: str | None = None,
    binary: Sequence[str] | str | None = None,
    env: Mapping[str, str] | None = None,
    cni_path: str = "/opt/cni/bin",
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of one CNI command, as :func:`run_plugin` runs it."""
    if binary is None:
        argv = python_command()
    elif isinstance(binary, str):
        argv = [binary]
    else:
        argv = list(binary)
    if node_ns:
        argv = ["ip", "netns", "exec", node_ns, *argv]
    full_env = plugin_env(CNI_COMMAND=cmd, CNI_PATH=cni_path, PYTHONDONTWRITEBYTECODE="1")
    if binary is None:  # this checkout's package, not whatever the venv installed
        full_env["PYTHONPATH"] = str(REPO)
    if container_id:
        full_env["CNI_CONTAINERID"] = container_id
        full_env["CNI_IFNAME"] = ifname
    if netns is not None:
        full_env["CNI_NETNS"] = netns
    if cni_args:
        full_env["CNI_ARGS"] = cni_args
    full_env.update(env or {})
    return argv, full_env


def run_plugin(cmd: str, conf: Mapping[str, Any], *, timeout: float = 60,
               **invocation: Any) -> PluginRun:
    """Run one CNI command (``invocation``: :func:`plugin_invocation`'s keywords);
    ``binary`` defaults to ``python -m rdma_cni`` from the venv."""
    argv, full_env = plugin_invocation(cmd, **invocation)
    proc = subprocess.run(argv, input=json.dumps(conf).encode(), env=full_env,
                          capture_output=True, timeout=timeout, cwd="/")
    text = proc.stdout.decode(errors="replace").strip()
    out: Any = None
    if text:
        try:
            out = json.loads(text)
        except ValueError:
            out = text
    return PluginRun(proc.returncode, out, proc.stderr.decode(errors="replace"))


def plugin_conf(mode: str, devices: Sequence[str], tmp: Path, **extra: Any) -> dict[str, Any]:
    """Our conflist entry for a test: data dir, log and operation counts under ``tmp``
    (never the node's own files), no kubelet source (NICs come from ``devices``), the
    annotation capability declared."""
    conf: dict[str, Any] = {
        "type": "rdma-cni", "mode": mode, "devices": list(devices),
        "dataDir": str(tmp / "data"), "logFile": str(tmp / "rdma-cni.log"), "logLevel": "debug",
        "metricsFile": str(tmp / "metrics"),
        "capabilities": {CAP_ANNOTATIONS: True},
        "kubelet": {"podResourcesSocket": str(tmp / "no-kubelet.sock"),
                    "checkpointFile": str(tmp / "no-checkpoint"),
                    "devicePluginDir": str(tmp)},
    }
    conf.update(extra)
    return conf


# --- libcni-like chaining -------------------------------------------------------
def pod_networks(blocks: Sequence[Mapping[str, Any]] | str) -> dict[str, str]:
    """The pod annotations map carrying ``k8s.volcengine.com/pod-networks``."""
    return {ANNOTATION: blocks if isinstance(blocks, str) else json.dumps(list(blocks))}


def rdma_blocks(n: int, name: str = "rdma", **device_conf: Any) -> list[dict[str, Any]]:
    block: dict[str, Any] = {"cniConf": {"name": name}}
    if device_conf:
        block["deviceConf"] = device_conf
    return [copy.deepcopy(block) for _ in range(n)]


def vpc_result(sandbox: str, ip: str = "203.0.113.5/24", version: str = "0.4.0",
               gateway: str = "203.0.113.1") -> dict[str, Any]:
    """A vpc-cni-shaped primary result (odd ``mac`` value, as the field's primary sends)."""
    ips: dict[str, Any] = {"address": ip, "interface": 0, "gateway": gateway}
    if version.startswith("0."):
        ips["version"] = "4"
    return {
        "cniVersion": version,
        "interfaces": [{"name": "eth0", "sandbox": sandbox, "mac": "not-a-mac"}],
        "ips": [ips],
        "routes": [{"dst": "0.0.0.0/0", "gw": gateway}],
        "dns": {},
    }


@dataclass
class Chain:
    """The conflist ``[vpc-cni, rdma-cni]`` as libcni runs it (our plugin's half).

    ``plugin`` is our plugin's entry of the conflist (type, mode, devices, ...);
    the primary is simulated by ``primary_result`` (the runtime-visible result of
    vpc-cni). Results are cached per attachment like libcni's result cache.
    """

    plugin: dict[str, Any]
    name: str = "vpc-cni"
    cni_version: str = "0.4.0"
    node_ns: str | None = None
    binary: Sequence[str] | str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cache: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)  # the commands run, in order

    def conf(self, prev: Mapping[str, Any] | None = None,
             annotations: Mapping[str, str] | None = None,
             extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """libcni's buildOneConfig: name/cniVersion injected, runtimeConfig by capability."""
        conf = copy.deepcopy(self.plugin)
        conf["name"] = self.name
        conf["cniVersion"] = self.cni_version
        caps = conf.get("capabilities") or {}
        if annotations is not None and caps.get(CAP_ANNOTATIONS):
            conf.setdefault("runtimeConfig", {})[CAP_ANNOTATIONS] = dict(annotations)
        if prev is not None:
            conf["prevResult"] = copy.deepcopy(prev)
        conf.update(extra or {})
        return conf

    def _run(self, cmd: str, conf: Mapping[str, Any], container_id: str = "",
             netns: str | None = None, ifname: str = "eth0", cni_args: str = "",
             env: Mapping[str, str] | None = None) -> PluginRun:
        self.ran.append(cmd)
        return run_plugin(cmd, conf, container_id=container_id, netns=netns, ifname=ifname,
                          cni_args=cni_args, node_ns=self.node_ns, binary=self.binary,
                          env={**self.env, **(env or {})})

    def add(self, container_id: str, netns: str, blocks: Sequence[Mapping[str, Any]] | str,
            *, prev: Mapping[str, Any] | None = None, pod: str = "p1", namespace: str = "default",
            ifname: str = "eth0", env: Mapping[str, str] | None = None,
            extra: Mapping[str, Any] | None = None) -> PluginRun:
        """ADD with the primary's result as prevResult; cache the final result on success."""
        prev = prev if prev is not None else vpc_result(netns, version=self.cni_version)
        conf = self.conf(prev, pod_networks(blocks), extra)
        args = k8s_args(namespace, pod, container_id)
        run = self._run("ADD", conf, container_id, netns, ifname, args, env)
        if run.rc == 0:
            self.cache[(container_id, ifname)] = {"conf": conf, "result": run.out,
                                                  "args": args, "netns": netns}
        return run

    def delete(self, container_id: str, netns: str | None = None, *, ifname: str = "eth0",
               with_prev: bool = True, blocks: Sequence[Mapping[str, Any]] | str | None = None,
               env: Mapping[str, str] | None = None) -> PluginRun:
        """DEL with the cached ADD result as prevResult (libcni); success drops the cache."""
        cached = self.cache.get((container_id, ifname))
        prev = cached["result"] if cached and with_prev else None
        annotations = pod_networks(blocks) if blocks is not None else (
            cached["conf"].get("runtimeConfig", {}).get(CAP_ANNOTATIONS) if cached else None)
        conf = self.conf(prev, annotations)
        args = cached["args"] if cached else k8s_args("default", "p1", container_id)
        if netns is None:
            netns = cached["netns"] if cached else ""
        run = self._run("DEL", conf, container_id, netns, ifname, args, env)
        if run.rc == 0:
            self.cache.pop((container_id, ifname), None)
        return run

    def check(self, container_id: str, *, ifname: str = "eth0") -> PluginRun:
        cached = self.cache[(container_id, ifname)]
        conf = self.conf(cached["result"],
                         cached["conf"].get("runtimeConfig", {}).get(CAP_ANNOTATIONS))
        return self._run("CHECK", conf, container_id, cached["netns"], ifname, cached["args"])

    def status(self, extra: Mapping[str, Any] | None = None) -> PluginRun:
        return self._run("STATUS", self.conf(extra=extra))

    def gc(self, valid: Iterable[tuple[str, str]]) -> PluginRun:
        attachments = [{"containerID": c, "ifname": i} for c, i in valid]
        return self._run("GC", self.conf(extra={VALID_ATTACHMENTS: attachments}))


def k8s_args(namespace: str, pod: str, container_id: str) -> str:
    return (f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={pod};"
            f"K8S_POD_INFRA_CONTAINER_ID={container_id};K8S_POD_UID=uid-{pod}")


# --- namespaces, stand-in NICs, snapshots -----------------------------------------
def netns_path(name: str) -> str:
    return f"{NETNS_DIR}/{name}"


def unique_prefix() -> str:
    return f"rc{os.getpid() % 100000}x{next(_counter)}"


@dataclass
class Pod:
    name: str

    @property
    def path(self) -> str:
        return netns_path(self.name)

    def links(self) -> dict[str, dict[str, Any]]:
        return {lk["ifname"]: lk for lk in ip_json(self.name, "link", "show")}

    def addrs(self, dev: str | None = None) -> list[str]:
        """``ip/prefix`` of every IPv4 address (of ``dev``) in the pod."""
        args = ["-4", "addr", "show"] + (["dev", dev] if dev else [])
        return [f"{a['local']}/{a['prefixlen']}" for lk in ip_json(self.name, *args)
                for a in lk.get("addr_info", [])]

    def sysctl(self, dev: str, key: str) -> str:
        return in_ns(self.name, "cat", f"/proc/sys/net/ipv4/conf/{dev}/{key}").strip()

    def routes(self, table: str | int = "main") -> list[dict[str, Any]]:
        return ip_json(self.name, "-4", "route", "show", "table", str(table))

    def rules(self) -> list[dict[str, Any]]:
        return ip_json(self.name, "-4", "rule", "show")


class Node:
    """A node netns with stand-in NICs, a fabric netns for the peers, and pod netns."""

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or unique_prefix()
        self.ns = f"{self.prefix}n"
        self.fabric = f"{self.prefix}f"
        self.pods: list[Pod] = []
        self._n_pods = 0
        for ns in (self.ns, self.fabric):
            sh("ip", "netns", "add", ns)
        sh("ip", "-n", self.ns, "link", "set", "dev", "lo", "up")

    @property
    def path(self) -> str:
        return netns_path(self.ns)

    def add_nic(self, name: str, cidr: str | None = "198.51.100.1/26", *, mtu: int = 1500,
                routes: Sequence[tuple[str, str]] = (), kind: str = "veth",
                up: bool = True, extra_addrs: Sequence[str] = ()) -> str:
        """A stand-in RDMA NIC in the node netns; ``routes`` are (dst, via) through it."""
        if kind == "veth":
            sh("ip", "-n", self.ns, "link", "add", "name", name, "mtu", str(mtu), "type", "veth",
               "peer", "name", f"f{name}"[:15], "mtu", str(mtu), "netns", self.fabric)
            sh("ip", "-n", self.fabric, "link", "set", "dev", f"f{name}"[:15], "up")
        else:
            sh("ip", "-n", self.ns, "link", "add", "name", name, "mtu", str(mtu), "type", kind)
        for addr in ([cidr] if cidr else []) + list(extra_addrs):
            sh("ip", "-n", self.ns, "addr", "add", addr, "dev", name)
        if up:
            sh("ip", "-n", self.ns, "link", "set", "dev", name, "up")
        for dst, via in routes:
            sh("ip", "-n", self.ns, "route", "add", dst, "via", via, "dev", name)
        if up and kind == "veth":
            wait_oper_up(self.ns, name)
        return name

    def delete_nic(self, name: str) -> None:
        sh("ip", "-n", self.ns, "link", "del", "dev", name)

    def add_pod(self, eth0: str | None = "203.0.113.5/24") -> Pod:
        """A pod netns; with ``eth0`` set, a veth eth0 like the primary CNI's."""
        pod = Pod(f"{self.prefix}p{self._n_pods}")
        self._n_pods += 1
        sh("ip", "netns", "add", pod.name)
        self.pods.append(pod)
        sh("ip", "-n", pod.name, "link", "set", "dev", "lo", "up")
        if eth0:
            peer = f"v{pod.name}"[-15:]
            sh("ip", "-n", pod.name, "link", "add", "name", "eth0", "type", "veth",
               "peer", "name", peer, "netns", self.fabric)
            sh("ip", "-n", pod.name, "addr", "add", eth0, "dev", "eth0")
            sh("ip", "-n", pod.name, "link", "set", "dev", "eth0", "up")
            sh("ip", "-n", self.fabric, "link", "set", "dev", peer, "up")
            wait_oper_up(pod.name, "eth0")
            gw = eth0.rsplit(".", 1)[0] + ".1"
            sh("ip", "-n", pod.name, "route", "add", "default", "via", gw, "dev", "eth0",
               "onlink")
        return pod

    def delete_pod(self, pod: Pod) -> None:
        if os.path.exists(pod.path):
            sh("ip", "netns", "del", pod.name)
        if pod in self.pods:
            self.pods.remove(pod)

    def snapshot(self, ns: str | None = None) -> dict[str, Any]:
        return snapshot(ns or self.ns)

    def links(self) -> dict[str, dict[str, Any]]:
        return {lk["ifname"]: lk for lk in ip_json(self.ns, "link", "show")}

    def close(self) -> None:
        for pod in list(self.pods):
            self.delete_pod(pod)
        for ns in (self.ns, self.fabric):
            if os.path.exists(netns_path(ns)):
                sh("ip", "netns", "del", ns, check=False)


#: what the oracle compares of a link (``ip -j -d link``): besides its name, flags (the
#: PROMISC and ALLMULTI a user set among them), MTU, MAC and state, what its user may set
#: (queue length, alias, group, IPv6 address generation mode, alternative names). Not the
#: kernel's counts of promiscuous and all-multicast users: a macvlan on a link counts as one
#: while it lives.
_LINK_KEYS = ("ifname", "flags", "mtu", "address", "link_type", "operstate", "master",
              "txqlen", "ifalias", "group", "inet6_addr_gen_mode", "altnames")
_CONF = ("/proc/sys/net/ipv4/conf", "/proc/sys/net/ipv6/conf")
_ADDR_KEYS = ("family", "local", "prefixlen", "broadcast", "scope", "label")
#: the flags of an address the oracle compares: what a configuration sets (nodad,
#: noprefixroute, mngtmpaddr, home, optimistic) or the kernel derives from it (secondary:
#: the primary of a subnet comes first; dynamic: a finite lifetime; deprecated, dadfailed)
_ADDR_FLAGS = ("secondary", "nodad", "noprefixroute", "mngtmpaddr", "home", "optimistic",
               "dynamic", "deprecated", "dadfailed")
_ROUTE_DROP = ("expires",)
_FOREVER = 4294967295
SETTLE = 5.0  # seconds for IPv6 duplicate address detection on links with carrier


def addr_row(ifname: str, a: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the oracle compares of one address (``ip -j addr`` entry): family, address,
    prefix length, broadcast, scope, label, flags (:data:`_ADDR_FLAGS`) and whether each
    lifetime is ``forever`` or ``finite`` (a finite one counts down: its value is not
    compared). ``tentative`` is left out: every new IPv6 address is, for the second its
    duplicate address detection takes; :func:`snapshot` waits that out on links with
    carrier, where it ends, and a link without carrier keeps it by design."""
    flags = tuple(f for f in _ADDR_FLAGS if a.get(f))
    life = tuple("forever" if a.get(k, _FOREVER) == _FOREVER else "finite"
                 for k in ("valid_life_time", "preferred_life_time"))
    return (ifname, *(a.get(k) for k in _ADDR_KEYS), flags, life)


def _settled_addrs(ns: str | None, timeout: float = SETTLE) -> list[dict[str, Any]]:
    """``ip -j addr show`` once no link with carrier has a tentative address (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        links = ip_json(ns, "addr", "show")
        busy = [lk for lk in links if lk.get("operstate") in ("UP", "UNKNOWN") and
                any(a.get("tentative") for a in lk.get("addr_info", []))]
        if not busy or time.monotonic() > deadline:
            return links
        time.sleep(0.05)


def snapshot(ns: str | None) -> dict[str, Any]:
    """What a netns shows (links, addresses and routes of every family in every table,
    rules of every family), normalised.

    Interface indexes are dropped (a NIC that comes back may get a new one); routes
    and addresses refer to devices by name. Addresses are read once duplicate address
    detection has ended (see :func:`addr_row`), so the IPv6 link-local addresses the
    kernel makes for every link with carrier (and their ``local`` routes, which appear
    when DAD ends) compare equal whenever the link is as it was: they are compared too,
    since a link-local address that appears or vanishes is a change of the node (an
    IPv6 address generation mode not restored).
    """
    links = sorted(({k: lk.get(k) for k in _LINK_KEYS}
                    for lk in ip_json(ns, "-d", "link", "show")), key=lambda x: str(x["ifname"]))
    addrs = sorted(addr_row(lk["ifname"], a) for lk in _settled_addrs(ns)
                   for a in lk.get("addr_info", []))
    routes = sorted(json.dumps({k: v for k, v in r.items() if k not in _ROUTE_DROP},
                               sort_keys=True)
                    for family in ("-4", "-6")
                    for r in ip_json(ns, family, "route", "show", "table", "all"))
    rules = sorted(json.dumps(r, sort_keys=True) for family in ("-4", "-6")
                   for r in ip_json(ns, family, "rule", "show"))
    return {"links": links, "addrs": addrs, "routes": routes, "rules": rules,
            "sysctls": sysctls(ns)}


def sysctls(ns: str | None) -> list[tuple[str, str, str, str]]:
    """(interface, "ipv4"/"ipv6", key, value) of every readable file under
    ``/proc/sys/net/ipv{4,6}/conf`` of the netns ``ns`` (``all`` and ``default`` too):
    every interface's IPv4 and IPv6 settings, which the kernel makes again from the
    netns's ``default`` when a link moves into it."""
    argv = ["grep", "-rs", "^", *_CONF]
    if ns:
        argv = (["nsenter", f"--net={ns}"] if ns.startswith("/") else
                ["ip", "netns", "exec", ns]) + argv
    out = []
    for line in sh(*argv, check=False).splitlines():
        path, _, value = line.partition(":")
        parts = path.split("/")  # "", proc, sys, net, ipv4, conf, <interface>, <key>
        if len(parts) == 8:
            out.append((parts[6], parts[4], parts[7], value))
    return sorted(out)


def without(snap: Mapping[str, Any], gone: Iterable[str]) -> dict[str, Any]:
    """``snap`` minus everything of the interfaces ``gone`` (expected to have vanished)."""
    gone = set(gone)
    out = {
        "links": [lk for lk in snap["links"] if lk["ifname"] not in gone],
        "addrs": [a for a in snap["addrs"] if a[0] not in gone],
        "routes": [r for r in snap["routes"] if json.loads(r).get("dev") not in gone],
        "rules": list(snap["rules"]),
    }
    if "sysctls" in snap:  # the VM tier's snapshot reads no /proc/sys
        out["sysctls"] = [s for s in snap["sysctls"] if s[0] not in gone]
    return out


def data_files(data_dir: str | Path) -> list[str]:
    """Files under the store's state/, addrs/, ips/ (the layout up to 0.1.0) and nics/
    (what must be empty after DEL)."""
    out = []
    for sub in ("state", "addrs", "ips", "nics"):
        base = Path(data_dir) / sub
        if base.exists():
            out += [str(p.relative_to(data_dir)) for p in base.rglob("*") if p.is_file()]
    return sorted(out)


# --- oracles for one RDMA interface in a pod ------------------------------------
SYSCTLS = {"arp_ignore": "1", "arp_announce": "2", "rp_filter": "2", "arp_notify": "1"}


def link_detail(ns: str, dev: str) -> dict[str, Any]:
    return ip_json(ns, "-d", "link", "show", "dev", dev)[0]


def rule_of(ns: str, ip: str) -> list[tuple[int, str]]:
    """(priority, table) of every rule ``from ip/32`` in ``ns``."""
    return [(r["priority"], str(r["table"])) for r in ip_json(ns, "-4", "rule", "show")
            if r.get("src") == ip and r.get("srclen", 32) == 32]


def table_routes(ns: str, table: int) -> set[tuple[str, str | None, str, bool]]:
    """(dst, gateway, dev, onlink) of table ``table`` in ``ns`` (empty if it does not exist)."""
    proc = subprocess.run(["ip", "-j", "-n", ns, "-4", "route", "show", "table", str(table)],
                          capture_output=True, text=True)
    routes = json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else []
    return {(r["dst"], r.get("gateway"), r["dev"], "onlink" in r.get("flags", []))
            for r in routes}


def assert_rdma_iface(pod: Pod, name: str, *, ip: str, table: int, mtu: int,
                      hpc: Sequence[tuple[str, str]], kind: str = "macvlan",
                      priority: int = 20000) -> None:
    """The pod interface as DESIGN section 2 wants it, read with ``ip -j`` and /proc/sys."""
    link = link_detail(pod.name, name)
    assert link["linkinfo"]["info_kind"] == kind, link
    if kind == "macvlan":
        assert link["linkinfo"]["info_data"]["mode"] == "bridge", link
    assert link["mtu"] == mtu, link
    assert "UP" in link["flags"], link
    assert pod.addrs(name) == [ip], pod.addrs(name)
    for key, want in SYSCTLS.items():
        assert pod.sysctl(name, key) == want, f"{name} {key}"
    addr = ip.split("/")[0]
    assert rule_of(pod.name, addr) == [(priority, str(table))]
    from ipaddress import IPv4Interface

    routes: set[tuple[str, str | None, str, bool]] = {
        (str(IPv4Interface(ip).network), None, name, False)}
    routes |= {(dst, gw, name, True) for dst, gw in hpc}
    assert table_routes(pod.name, table) == routes


def install_host_tree(bin_dir: Path, tree: Path = HOST_TREE) -> Path:
    """Lay ``tree`` out in ``bin_dir`` with install's own functions, as ``rdma-cni install``
    does on a node (a versioned tree, the one link, nccl_env.sh); the plugin's path."""
    from rdma_cni.tools import bundle

    bin_dir.mkdir(parents=True, exist_ok=True)
    name, _ = bundle.install_tree(str(tree), str(bin_dir))
    bundle.switch_link(str(bin_dir), name)
    bundle.install_nccl_env(str(tree), str(bin_dir))
    return bin_dir / "rdma-cni"
