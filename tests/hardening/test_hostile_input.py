"""The bad and hostile input corpus (corpus.py: 174 inputs) through the built binary as
`install` lays it out (<bin>/rdma-cni is the native front, the bundle beside it), each
input twice (342 runs of the plugin): with forwarding off (the front execs the bundle,
which runs in-process) and through a running `rdma-cni serve` (the front forwards; the
server must survive every case). The figures count inputs, and runs per path.

One node netns for the whole module: rnic0 (shared-multi parent, pod A attached),
rnic1 (exclusive NIC serving pod C), hostif (a host interface that is no RDMA NIC),
pod B (the target, with an extra link ``inpod``). Every error case must give exactly
its code, a message naming the problem, exit status 1, one JSON document on stdout,
and leave the node, the pods, our netns and the whole temp tree (data dir included,
by content hash; log and metrics excluded) byte-for-byte as before. Tolerated inputs
must succeed, and their DEL must restore the same fingerprint.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cnirunner import (
    HPC_NET,
    Node,
    Pod,
    install_host_tree,
    pod_networks,
    sh,
    vpc_result,
    wait_oper_up,
)
from corpus import ABOUT, CORPUS, DROP, OK, Case
from harness import (
    bump,
    checkpoint,
    diff,
    fingerprint,
    plugin_conf,
    pod_ipv4,
    put,
    run_raw,
)
from support.resident import Serve

pytestmark = pytest.mark.root
SUITE = "hostile-input"


@dataclass
class World:
    tmp: Path
    node: Node
    pod_a: Pod
    pod_b: Pod
    pod_c: Pod
    a_ip: str
    dead: str
    binary: list[str]
    socket: str = ""  # the resident server's, or "" (in-process)

    @property
    def route(self) -> str:
        """Which path the plugin's runs take (the figures are counted per path)."""
        return "through serve" if self.socket else "in-process"

    def tokens(self) -> dict[str, str]:
        return {"@POD": self.pod_b.path, "@A_IP": self.a_ip, "@FILE": str(self.tmp / "afile"),
                "@DIR": str(self.tmp / "adir"), "@DEAD": self.dead,
                "@CKPT": str(self.tmp / "ckpt.json")}

    def resolve(self, value: Any) -> Any:
        if isinstance(value, str):
            for token, real in self.tokens().items():
                value = value.replace(token, real)
            return value
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        return value

    def fingerprint(self) -> dict[str, Any]:
        pods = [p.name for p in (self.pod_a, self.pod_b, self.pod_c)]
        return fingerprint(self.node.ns, pods, self.node.prefix, self.tmp,
                           exclude=[self.tmp / "log"])


def _attach(binary: list[str], node: Node, tmp: Path, mode: str, devices: list[str],
            cid: str, pod: Pod) -> None:
    conf = {**plugin_conf(mode, devices, tmp), "name": "vpc-cni", "cniVersion": "0.4.0",
            "prevResult": vpc_result(pod.path),
            "runtimeConfig": {"io.kubernetes.cri.pod-annotations":
                              pod_networks([{"cniConf": {"name": "rdma"}}])}}
    env = _env("ADD", cid, pod.path, "uid-" + cid)
    run = run_raw(binary, env, json.dumps(conf).encode(), node.ns)
    assert run.rc == 0, run


def _env(cmd: str, cid: str, netns: str, uid: str) -> dict[str, str]:
    return {"CNI_COMMAND": cmd, "CNI_CONTAINERID": cid, "CNI_NETNS": netns,
            "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin",
            "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pb;"
                        f"K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID={uid}"}


def _dead_netns() -> str:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return f"/proc/{proc.pid}/ns/net"


def _installed(tmp: Path) -> list[str]:
    return [str(install_host_tree(tmp / "bin"))]


@pytest.fixture(scope="module", params=["inproc", "resident"])
def world(built_binary: list[str], tmp_path_factory: pytest.TempPathFactory,
          request: pytest.FixtureRequest) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("hostile")
    node = Node()
    serve_argv = list(built_binary)  # serve runs from the image's bundle, as on a node
    built_binary = _installed(tmp)
    serve: Serve | None = None
    try:
        if request.param == "resident":  # its socket and log outside the fingerprinted tree
            side = tmp_path_factory.mktemp("serve")
            serve = Serve(node.ns, side / "r.sock", side / "serve.log",
                          argv=serve_argv)
        node.add_nic("rnic0", "198.51.100.1/26", routes=[(HPC_NET, "198.51.100.62")])
        node.add_nic("rnic1", "198.51.100.65/26", routes=[("198.19.0.0/16", "198.51.100.126")])
        node.add_nic("hostif", "198.18.5.1/24")
        (tmp / "afile").write_text("not a netns\n")
        (tmp / "adir").mkdir()
        (tmp / "ckpt.json").write_text(checkpoint({
            "uid-one": ["rnic0"], "uid-lo": ["lo"], "uid-hostif": ["hostif"],
            "uid-c": ["rnic1"]}))
        pod_a, pod_b, pod_c = node.add_pod(), node.add_pod(), node.add_pod()
        sh("ip", "-n", pod_b.name, "link", "add", "inpod", "type", "veth", "peer", "name",
           f"i{pod_b.name}"[-15:], "netns", node.fabric)
        _attach(built_binary, node, tmp, "shared-multi", ["rnic0", "rnic1"], "ca", pod_a)
        _attach(built_binary, node, tmp, "exclusive", ["rnic1"], "cc", pod_c)
        for pod in (pod_a, pod_c):  # carrier comes late (linkwatch): before the first snapshot
            wait_oper_up(pod.name, "eth1")
        a_ip = pod_ipv4(pod_a.name)[0][1]
        yield World(tmp, node, pod_a, pod_b, pod_c, a_ip, _dead_netns(), built_binary,
                    str(serve.sock) if serve else "")
        if serve is not None:
            assert serve.proc.poll() is None, "the resident server died during the corpus"
            assert serve.served("ADD") > 0, "nothing reached the resident server"
        for cid, pod, mode in (("cc", pod_c, "exclusive"), ("ca", pod_a, "shared-multi")):
            conf = {**plugin_conf(mode, ["rnic0", "rnic1"], tmp), "name": "vpc-cni",
                    "cniVersion": "0.4.0"}
            run = run_raw(built_binary, _env("DEL", cid, pod.path, "uid-" + cid),
                          json.dumps(conf).encode(), node.ns)
            assert run.rc == 0, run
        assert "rnic1" in node.links(), "exclusive NIC did not come back"
        assert not list((tmp / "data" / "state").glob("*")), "state left"
    finally:
        if serve is not None:
            serve.stop()
        node.close()


def build(world: World, case: Case) -> tuple[dict[str, str], bytes, dict[str, Any]]:
    cid = f"hc-{abs(hash(case.id)) % 10**8}"
    env: dict[str, Any] = _env(case.cmd, cid, world.pod_b.path, case.uid)
    for key, value in case.env.items():
        if value is DROP:
            env.pop(key, None)
        else:
            env[key] = world.resolve(value)
    conf = plugin_conf(case.mode, ["rnic0"], world.tmp, residentSocket=world.socket)
    conf.update(name="vpc-cni", cniVersion="0.4.0")
    version = case.conf.get("cniVersion", "0.4.0")
    prev = vpc_result(world.pod_b.path, version=version if isinstance(version, str) and
                      version in ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0") else "0.4.0") \
        if case.prev == "default" else copy.deepcopy(case.prev)
    if prev is not None:
        conf["prevResult"] = world.resolve(prev)
    if case.blocks is not None:
        conf["runtimeConfig"] = {"io.kubernetes.cri.pod-annotations":
                                 pod_networks(world.resolve(case.blocks))}
    for key, value in world.resolve(case.conf).items():
        if value is DROP:
            conf.pop(key, None)
        elif key == "runtimeConfig" and isinstance(value, dict):
            conf["runtimeConfig"] = {**conf.get("runtimeConfig", {}), **value}
        else:
            conf[key] = value
    stdin = case.raw if case.raw is not None else json.dumps(conf).encode()
    return env, stdin, conf


@pytest.mark.parametrize("case", CORPUS, ids=[c.id for c in CORPUS])
def test_hostile_input(world: World, case: Case) -> None:
    env, stdin, _ = build(world, case)
    before = world.fingerprint()
    bump(SUITE, f"runs {world.route}")
    run = run_raw(world.binary, env, stdin, world.node.ns)
    assert "Traceback" not in run.stdout and "Traceback" not in run.stderr, run
    docs = run.docs
    if case.expect == ABOUT:
        assert run.rc == 0 and docs == [] and "rdma-cni" in run.stderr, run
    elif case.expect == OK:
        _expect_ok(world, case, env, stdin, run.rc, docs, run)
    else:
        assert run.rc == 1, run
        assert len(docs) == 1, run
        assert docs[0].get("code") == case.expect, docs[0]
        needle = world.resolve(case.needle).lower()
        assert needle in docs[0].get("msg", "").lower(), docs[0]
        bump(SUITE, f"error runs {world.route}")
    changes = diff(before, world.fingerprint())
    assert not Path("/relative/data").exists(), "a relative dataDir escaped to /"
    assert changes == {}, f"{case.id} changed state: {json.dumps(changes)[:3000]}"


def _expect_ok(world: World, case: Case, env: dict[str, str], stdin: bytes, rc: int,
               docs: list[Any], run: Any) -> None:
    assert rc == 0, run
    bump(SUITE, f"tolerated runs {world.route}")
    if case.cmd != "ADD":
        assert docs == [], run
        return
    assert len(docs) == 1, run
    want = json.loads(stdin).get("cniVersion")
    assert docs[0]["cniVersion"] == want, docs[0]
    ours = [i for i in docs[0]["interfaces"] if i.get("sandbox") == world.pod_b.path
            and i["name"] != "eth0"]
    assert len(ours) == 1, docs[0]
    back = run_raw(world.binary, {**env, "CNI_COMMAND": "DEL"}, stdin, world.node.ns)
    assert back.rc == 0 and back.docs == [], back


def test_corpus_size() -> None:
    """The inputs of the corpus (each runs once per path: in-process and through serve)."""
    put(SUITE, "inputs", len(CORPUS))
    assert len(CORPUS) == 183  # the figure docs/reliability.md and the README quote
    assert len({c.id for c in CORPUS}) == len(CORPUS), "duplicate case ids"
