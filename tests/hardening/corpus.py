"""The bad and hostile input corpus: one row per case, with the outcome DESIGN §8
and the CNI spec require.

``expect`` is a CNI error code, :data:`OK` (the spec says to tolerate the input:
the command succeeds) or :data:`ABOUT` (no CNI_COMMAND: the about text on stderr,
nothing on stdout, exit 0). ``needle`` must appear in the error message. Every row
runs the plugin.

A NUL character reaches the plugin only through stdin (JSON's ``\u0000``, or a raw
byte): no environment value can hold one (execve's strings end at the first NUL, and
Go's os/exec, which containerd, CRI-O and libcni use, refuses such a string before it
execs anything; what a C runtime would pass, the value cut at the NUL, is an ordinary
value rows here already cover). The ``*-nul`` rows put it in the config's paths and
names and in the annotation.

Tokens resolved against the test's world: ``@POD`` target pod netns path,
``@A_IP`` pod A's current address, ``@FILE`` a regular file, ``@DIR`` a directory,
``@DEAD`` a dead process's netns path, ``@CKPT`` the fake kubelet checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OK = "ok"
ABOUT = "about"
DROP = object()  # remove this key/variable
B1 = [{"cniConf": {"name": "rdma"}}]


def blk(**device_conf: Any) -> list[dict[str, Any]]:
    return [{"cniConf": {"name": "rdma"}, "deviceConf": device_conf}]


@dataclass(frozen=True)
class Case:
    id: str
    expect: int | str
    needle: str = ""
    cmd: str = "ADD"
    env: dict[str, Any] = field(default_factory=dict)
    conf: dict[str, Any] = field(default_factory=dict)
    blocks: Any = field(default_factory=lambda: list(B1))  # list, raw string, or None
    raw: bytes | None = None
    prev: Any = "default"
    mode: str = "shared-multi"
    uid: str = "uid-b"


def _deep(n: int) -> bytes:
    return b'{"cniVersion":"0.4.0","name":"n","mode":"shared-multi","x":' + \
        b"[" * n + b"]" * n + b"}"


PREV_031 = {"cniVersion": "0.3.1", "interfaces": [{"name": "eth0", "sandbox": "@POD"}],
            "ips": [{"version": "4", "address": "203.0.113.5/24", "interface": 0}]}
PREV_ROUTE = {"cniVersion": "0.4.0", "interfaces": [{"name": "eth0", "sandbox": "@POD"}],
              "ips": [{"version": "4", "address": "203.0.113.5/24", "interface": 0}]}
PREV_110 = {"cniVersion": "1.1.0", "interfaces": [{"name": "eth0", "sandbox": "@POD",
                                                   "mtu": 1500}],
            "ips": [{"address": "203.0.113.5/24", "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "203.0.113.1", "table": 10}]}
#: what ADD needs (CNI_PATH is optional but for GC: the plugin calls no other plugin)
ENV = ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS"]
CKPT = {"kubelet": {"podResourcesSocket": "/nonexistent/kubelet.sock",
                    "checkpointFile": "@CKPT", "devicePluginDir": "/nonexistent"}}

ENV_CASES = [
    Case("env-command-missing", ABOUT, env={"CNI_COMMAND": DROP}),
    Case("env-command-empty", ABOUT, env={"CNI_COMMAND": ""}),
    Case("env-command-unknown", 4, "CNI_COMMAND", env={"CNI_COMMAND": "FOO"}),
    Case("env-command-lowercase", 4, "CNI_COMMAND", env={"CNI_COMMAND": "add"}),
    Case("env-command-slash", 4, "CNI_COMMAND", env={"CNI_COMMAND": "../ADD"}),
    Case("env-command-newline", 4, "CNI_COMMAND", env={"CNI_COMMAND": "ADD\nDEL"}),
    Case("env-command-too-long", 4, "CNI_COMMAND", env={"CNI_COMMAND": "A" * 5000}),
    *[Case(f"env-{v.lower()[4:]}-missing", 4, v, env={v: DROP}) for v in ENV],
    *[Case(f"env-{v.lower()[4:]}-empty", 4, v, env={v: ""}) for v in ENV],
    # a pass-through ADD needs CNI_NETNS all the same (skel requires it for ADD)
    Case("env-netns-missing-pass-through", 4, "CNI_NETNS", env={"CNI_NETNS": DROP},
         blocks=None),
    Case("env-netns-empty-pass-through", 4, "CNI_NETNS", env={"CNI_NETNS": ""}, blocks=None),
    Case("env-path-missing", OK, env={"CNI_PATH": DROP}),
    Case("env-path-empty", OK, env={"CNI_PATH": ""}),
    Case("env-containerid-dotdot", 4, "CNI_CONTAINERID", env={"CNI_CONTAINERID": ".."}),
    Case("env-containerid-dot", 4, "CNI_CONTAINERID", env={"CNI_CONTAINERID": "."}),
    Case("env-containerid-slash", 4, "CNI_CONTAINERID",
         env={"CNI_CONTAINERID": "a/../../etc"}),
    Case("env-containerid-newline", 4, "CNI_CONTAINERID", env={"CNI_CONTAINERID": "ab\ncd"}),
    Case("env-containerid-too-long", 4, "CNI_CONTAINERID", env={"CNI_CONTAINERID": "a" * 1025}),
    Case("env-containerid-dash", 4, "CNI_CONTAINERID", env={"CNI_CONTAINERID": "-rf"}),
    Case("env-ifname-16", 4, "CNI_IFNAME", env={"CNI_IFNAME": "e" * 16}),
    Case("env-ifname-slash", 4, "CNI_IFNAME", env={"CNI_IFNAME": "a/b"}),
    Case("env-ifname-dotdot", 4, "CNI_IFNAME", env={"CNI_IFNAME": ".."}),
    Case("env-ifname-newline", 4, "CNI_IFNAME", env={"CNI_IFNAME": "eth\n0"}),
    Case("env-netns-relative", 4, "CNI_NETNS", env={"CNI_NETNS": "var/run/netns/x"}),
    Case("env-netns-newline", 4, "CNI_NETNS", env={"CNI_NETNS": "@POD\n"}),
    Case("env-netns-too-long", 4, "CNI_NETNS", env={"CNI_NETNS": "/" + "a" * 5000}),
    Case("env-netns-dotdot-file", 4, "CNI_NETNS",
         env={"CNI_NETNS": "/var/run/netns/../../../etc/hostname"}),
    Case("env-netns-regular-file", 4, "CNI_NETNS", env={"CNI_NETNS": "@FILE"}),
    Case("env-netns-directory", 4, "CNI_NETNS", env={"CNI_NETNS": "@DIR"}),
    Case("env-netns-dead-pid", 4, "CNI_NETNS", env={"CNI_NETNS": "@DEAD"}),
    Case("env-netns-nonexistent", 4, "CNI_NETNS", env={"CNI_NETNS": "/var/run/netns/nope-x1"}),
    Case("env-netns-own", 4, "CNI_NETNS", env={"CNI_NETNS": "/proc/self/ns/net"}),
    Case("env-netns-not-net", 4, "CNI_NETNS", env={"CNI_NETNS": "/proc/self/ns/uts"}),
    Case("env-path-too-long", 4, "CNI_PATH", env={"CNI_PATH": "/a" * 10000}),
    Case("env-args-malformed", 4, "CNI_ARGS", env={"CNI_ARGS": "foo"}),
    Case("env-args-empty-key", 4, "CNI_ARGS", env={"CNI_ARGS": "=x"}),
    Case("env-args-unknown-key", 4, "CNI_ARGS", env={"CNI_ARGS": "FOO=bar;K8S_POD_NAME=p"}),
    Case("env-args-bad-ignoreunknown", 4, "CNI_ARGS", env={"CNI_ARGS": "IgnoreUnknown=maybe"}),
    Case("env-args-newline", 4, "CNI_ARGS", env={"CNI_ARGS": "IgnoreUnknown=1\nX=y"}),
    Case("env-args-too-long", 4, "CNI_ARGS", env={"CNI_ARGS": "IgnoreUnknown=1;X=" + "y" * 5000}),
    Case("env-args-unknown-ignored", OK,
         env={"CNI_ARGS": "IgnoreUnknown=1;FOO=bar;K8S_POD_NAMESPACE=d;K8S_POD_NAME=p"}),
    Case("env-args-path-values", OK,
         env={"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=../..;K8S_POD_NAME=../../etc;"
              "K8S_POD_UID=../x"}),
    Case("del-containerid-dotdot", 4, "CNI_CONTAINERID", cmd="DEL",
         env={"CNI_CONTAINERID": ".."}),
    Case("del-ifname-too-long", 4, "CNI_IFNAME", cmd="DEL", env={"CNI_IFNAME": "x" * 16}),
    Case("del-netns-regular-file", OK, cmd="DEL", env={"CNI_NETNS": "@FILE"}),
    Case("del-netns-missing", OK, cmd="DEL", env={"CNI_NETNS": DROP}),
    Case("del-network-dotdot", OK, cmd="DEL", conf={"name": "../../etc"}),
    Case("del-prevresult-malformed", OK, cmd="DEL", prev={"ips": "nope"}),
    # DEL does not use CNI_ARGS, and no ADD keeps anything under a dataDir it refuses:
    # failing would stop the chain, the primary's DEL with it (DESIGN §1, §8)
    Case("del-args-unknown", OK, cmd="DEL", env={"CNI_ARGS": "FOO=bar"}),
    Case("del-args-newline", OK, cmd="DEL", env={"CNI_ARGS": "IgnoreUnknown=1\nX=y"}),
    Case("del-datadir-relative", OK, cmd="DEL", conf={"dataDir": "var/lib/cni/rdma-cni"}),
    Case("check-netns-directory", 4, "CNI_NETNS", cmd="CHECK",
         env={"CNI_NETNS": "@DIR", "CNI_CONTAINERID": "ca"}),
]

STDIN_CASES = [
    Case("stdin-empty", 6, "decode", raw=b""),
    Case("stdin-not-json", 6, "decode", raw=b"{"),
    Case("stdin-garbage", 6, "decode", raw=b"\xff\xfe\x00\x01"),
    Case("stdin-list", 6, "object", raw=b"[]"),
    Case("stdin-string", 6, "object", raw=b'"conf"'),
    Case("stdin-null", 6, "object", raw=b"null"),
    Case("stdin-number", 6, "object", raw=b"7"),
    Case("stdin-huge", 6, "larger", raw=b'{"x":"' + b"a" * (1 << 20) + b'"}'),
    Case("stdin-deep-100000", 6, "decode", raw=_deep(100000)),
    Case("stdin-deep-70", 6, "nested", raw=_deep(70)),
    Case("version-missing", 1, "cniVersion", conf={"cniVersion": DROP}),
    Case("version-int", 1, "cniVersion", conf={"cniVersion": 1}),
    Case("version-empty", 1, "cniVersion", conf={"cniVersion": ""}),
    Case("version-0.2.0", 1, "0.2.0", conf={"cniVersion": "0.2.0"}),
    Case("version-2.0.0", 1, "2.0.0", conf={"cniVersion": "2.0.0"}),
    Case("version-short", 1, "1.1", conf={"cniVersion": "1.1"}),
    *[Case(f"version-{v}", OK, conf={"cniVersion": v})
      for v in ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")],
    Case("check-at-0.3.1", 1, "CHECK", cmd="CHECK", conf={"cniVersion": "0.3.1"}),
    Case("status-at-1.0.0", 1, "STATUS", cmd="STATUS", conf={"cniVersion": "1.0.0"}),
    Case("gc-at-0.4.0", 1, "GC", cmd="GC", conf={"cniVersion": "0.4.0"}),
    Case("unknown-top-level-keys", OK, conf={"fooBar": {"x": [1]}, "zz": None}),
    Case("mode-missing", 7, "mode", conf={"mode": DROP}),
    Case("mode-bogus", 7, "mode", conf={"mode": "bogus"}),
    Case("mode-int", 7, "mode", conf={"mode": 3}),
    Case("name-missing", 7, "name", conf={"name": DROP}),
    Case("name-int", 7, "name", conf={"name": 5}),
    Case("name-too-long", 7, "name", conf={"name": "n" * 300}),
    Case("name-dotdot", OK, conf={"name": "../../etc"}),
    Case("devices-not-list", 7, "devices", conf={"devices": "rnic0"}),
    Case("devices-path", 7, "devices", conf={"devices": ["../x"]}),
    Case("devices-lo", 7, "devices", conf={"devices": ["lo"]}),
    Case("maxinterfaces-string", 7, "maxInterfaces", conf={"maxInterfaces": "x"}),
    Case("maxinterfaces-zero", 7, "maxInterfaces", conf={"maxInterfaces": 0}),
    Case("maxinterfaces-bool", 7, "maxInterfaces", conf={"maxInterfaces": True}),
    Case("datadir-relative", 7, "dataDir", conf={"dataDir": "relative/data"}),
    *[Case(f"{key.lower()}-nul", 7, key, conf={key: "/tmp/x\x00y"})
      for key in ("dataDir", "logFile", "metricsFile", "residentSocket")],
    *[Case(f"kubelet-{key.lower()}-nul", 7, key, conf={"kubelet": {key: "/tmp/x\x00y"}})
      for key in ("podResourcesSocket", "checkpointFile", "devicePluginDir")],
    Case("del-datadir-nul", OK, cmd="DEL", conf={"dataDir": "/tmp/x\x00y"}),
    Case("name-nul", OK, conf={"name": "vpc\x00cni"}),
    Case("stdin-nul-byte-in-string", 6, "decode",
         raw=b'{"cniVersion":"0.4.0","name":"a\x00b","mode":"shared-multi"}'),
    Case("ipam-unknown-key", 7, "ipam", conf={"ipam": {"bogus": 1}}),
    Case("ipam-bad-range-key", 7, "ranges", conf={"ipam": {"ranges": {"nope": {}}}}),
    Case("routing-negative", 7, "tableBase", conf={"routing": {"tableBase": -1}}),
    Case("kubelet-unknown-key", 7, "kubelet", conf={"kubelet": {"x": "y"}}),
    Case("loglevel-bogus", 7, "logLevel", conf={"logLevel": "loud"}),
    Case("mtu-tiny", 7, "mtu", conf={"mtu": 10}),
    Case("mtu-above-nic", 7, "mtu", conf={"mtu": 9000}),
    Case("runtimeconfig-list", 7, "runtimeConfig", conf={"runtimeConfig": []}),
    Case("annotations-not-object", 7, "io.kubernetes.cri.pod-annotations",
         conf={"runtimeConfig": {"io.kubernetes.cri.pod-annotations": "x"}}),
    Case("prev-not-object", 6, "prevResult", prev=[1]),
    Case("prev-interfaces-not-list", 6, "prevResult", prev={"interfaces": {"a": 1}}),
    Case("prev-ip-without-address", 6, "prevResult", prev={"ips": [{"interface": 0}]}),
    Case("prev-ip-bad-index", 6, "prevResult",
         prev={"interfaces": [], "ips": [{"address": "203.0.113.5/24", "interface": 5}]}),
    Case("prev-dns-list", 6, "prevResult", prev={"dns": []}),
    Case("prev-0.3.1-in-1.0.0", OK, conf={"cniVersion": "1.0.0"}, prev=PREV_031),
    Case("prev-1.1.0-in-0.4.0", OK, prev=PREV_110),
    Case("prev-absent", OK, prev=None),
    Case("prev-0.2.0", 1, 'prevResult has cniVersion "0.2.0"',
         prev={"cniVersion": "0.2.0", "ip4": {"ip": "203.0.113.5/24"}}),
    Case("prev-0.2.0-pass-through", 1, "prevResult has cniVersion", blocks=None,
         prev={"cniVersion": "0.2.0", "ip4": {"ip": "203.0.113.5/24"}}),
    Case("prev-version-not-a-string", 1, "prevResult has cniVersion", prev={"cniVersion": 4}),
    Case("del-prev-0.2.0", OK, cmd="DEL", prev={"cniVersion": "0.2.0", "ip4": {}}),
    # what Python's parser takes and no JSON parser reads back (a result echoes prevResult)
    Case("prev-metric-infinity", 6, "not a json number",
         prev={**PREV_ROUTE, "routes": [{"dst": "0.0.0.0/0", "metric": float("inf")}]}),
    Case("prev-metric-nan-pass-through", 6, "not a json number", blocks=None,
         prev={**PREV_ROUTE, "routes": [{"dst": "0.0.0.0/0", "metric": float("nan")}]}),
    Case("prev-metric-overflow-pass-through", 6, "out of range", blocks=None,
         raw=b'{"cniVersion":"0.4.0","name":"n","mode":"shared-multi","prevResult":'
             b'{"cniVersion":"0.4.0","interfaces":[],"ips":[],'
             b'"routes":[{"dst":"0.0.0.0/0","metric":1e999}]}}'),
    Case("status-datadir-file", 50, "not available", cmd="STATUS",
         conf={"cniVersion": "1.1.0", "dataDir": "@FILE"}),
    Case("gc-valid-not-list", 7, "valid-attachments", cmd="GC",
         conf={"cniVersion": "1.1.0", "cni.dev/valid-attachments": {}}),
    Case("gc-valid-bad-entry", 7, "valid-attachments", cmd="GC",
         conf={"cniVersion": "1.1.0", "cni.dev/valid-attachments": [{"x": 1}]}),
    Case("check-never-added", 105, "no RDMA attachment", cmd="CHECK"),
]

ANNOTATION_CASES = [
    Case("ann-not-json", 7, "not valid JSON", blocks="["),
    Case("ann-object", 7, "list", blocks="{}"),
    Case("ann-json-string", 7, "list", blocks='"x"'),
    Case("ann-not-string", 7, "string",
         conf={"runtimeConfig": {"io.kubernetes.cri.pod-annotations": {
             "k8s.volcengine.com/pod-networks": [{"cniConf": {"name": "rdma"}}]}}}),
    Case("ann-10000-blocks", 7, "pod-networks", blocks=[{"cniConf": {"name": "x"}}] * 10000),
    Case("ann-block-not-object", 7, "not an object", blocks=[1]),
    Case("ann-block-no-cniconf", 7, "cniConf.name", blocks=[{}]),
    Case("ann-name-not-string", 7, "cniConf.name", blocks=[{"cniConf": {"name": 1}}]),
    Case("ann-unknown-key", 7, "bogus", blocks=[{"cniConf": {"name": "rdma"}, "bogus": 1}]),
    Case("ann-17-blocks", 106, "maxInterfaces", blocks=B1 * 17),
    Case("ann-over-max-3", 106, "maxInterfaces", blocks=B1 * 3, conf={"maxInterfaces": 2}),
    *[Case(f"ifname-{tag}", 7, "ifName", blocks=blk(ifName=name)) for tag, name in
      (("eth0", "eth0"), ("lo", "lo"), ("16-chars", "x" * 16), ("dotdot-x", "../x"),
       ("dot", "."), ("empty", ""), ("space", "a b"), ("int", 5))],
    Case("ifname-in-pod", 103, "inpod", blocks=blk(ifName="inpod")),
    Case("ifname-twice", 103, "dup1", blocks=blk(ifName="dup1") * 2),
    Case("ifname-nul", 7, "ifName", blocks=blk(ifName="eth\x001")),
    Case("mac-nul", 7, "mac", blocks=blk(mac="02:00:00:00:00:01\x00")),
    Case("ips-nul", 7, "IPv4", blocks=blk(ips=["198.51.100.9\x00"])),
    Case("ann-key-nul", 7, "not permitted", blocks=[{"cniConf": {"name": "rdma"}, "a\x00b": 1}]),
    Case("mac-multicast", 7, "unicast", blocks=blk(mac="01:00:5e:00:00:01")),
    Case("mac-zero", 7, "unicast", blocks=blk(mac="00:00:00:00:00:00")),
    Case("mac-broadcast", 7, "unicast", blocks=blk(mac="ff:ff:ff:ff:ff:ff")),
    Case("mac-malformed", 7, "mac", blocks=blk(mac="02:00:00:00:00")),
    Case("mac-exclusive", 2, "mac", blocks=blk(mac="02:00:00:00:00:01"), mode="exclusive"),
    Case("ips-outside-subnet", 102, "198.51.100.200", blocks=blk(ips=["198.51.100.200"])),
    Case("ips-host-address", 102, "198.51.100.1", blocks=blk(ips=["198.51.100.1"])),
    Case("ips-gateway", 102, "198.51.100.62", blocks=blk(ips=["198.51.100.62"])),
    Case("ips-other-pod", 102, "@A_IP", blocks=blk(ips=["@A_IP"])),
    Case("ips-network", 102, "198.51.100.0", blocks=blk(ips=["198.51.100.0"])),
    Case("ips-broadcast", 102, "198.51.100.63", blocks=blk(ips=["198.51.100.63"])),
    Case("ips-ipv6", 7, "IPv4", blocks=blk(ips=["2001:db8::1"])),
    Case("ips-garbage", 7, "IPv4", blocks=blk(ips=["not-an-ip"])),
    Case("ips-two-for-one", 2, "ips", blocks=blk(ips=["198.51.100.10", "198.51.100.11"])),
    Case("ips-exclusive", 2, "ips", blocks=blk(ips=["198.51.100.10"]), mode="exclusive"),
    Case("other-blocks-opaque", OK,
         blocks=[{"cniConf": {"name": "other"}, "deviceConf": {"ifName": "../../x", "z": 1}},
                 *B1]),
]

ALLOCATION_CASES = [
    Case("alloc-shared-2-of-1", 101, "distinct NICs", blocks=B1 * 2, mode="shared",
         conf=CKPT, uid="uid-one"),
    Case("alloc-exclusive-2-of-1", 101, "distinct NICs", blocks=B1 * 2, mode="exclusive",
         conf=CKPT, uid="uid-one"),
    Case("alloc-no-entry", 101, "allocated", conf=CKPT, uid="uid-nobody"),
    Case("alloc-host-lo", 101, "lo", conf=CKPT, uid="uid-lo"),
    Case("alloc-host-iface", 101, "hostif", conf=CKPT, uid="uid-hostif"),
    Case("alloc-deviceid-host-iface", 101, "hostif",
         conf={"runtimeConfig": {"deviceID": "hostif"}}),
    Case("alloc-deviceid-path", 101, "rnic0", conf={"runtimeConfig": {"deviceID": "../rnic0"}}),
    Case("alloc-exclusive-busy-nic", 104, "rnic1", mode="exclusive",
         conf={**CKPT, "devices": ["rnic0", "rnic1"]}, uid="uid-c"),
    Case("alloc-exclusive-config-busy", 104, "rnic1", mode="exclusive",
         conf={"devices": ["rnic1"]}),
]

CORPUS: list[Case] = ENV_CASES + STDIN_CASES + ANNOTATION_CASES + ALLOCATION_CASES
