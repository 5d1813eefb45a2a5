"""Issue 14 item 2: a large or unreadable state record must never free what its pod
still uses.

- A pod with many interfaces on a NIC carrying many fabric routes (BGP-learned
  routes reach this) wrote a record over the 1 MiB read limit; it was quarantined,
  the agent purged its reservations and the next pod got an address still in use.
  Now the record holds what teardown needs (no mirrored routes for sub-interfaces),
  is bounded when written and loads.
- A hand-corrupted record: its reservations stay held (the agent leaves them), and
  DEL still tears the pod's links down, found by their ``rdma-cni:<hash>`` mark, and
  returns an exclusive NIC to the node as it was.

Oracles: ``ip -j`` in the pods and the node (the rig asserts the node netns is
exactly as before), the files of the data dir."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from cnirunner import HPC_NET, PYTHON, rdma_blocks, sh

pytestmark = pytest.mark.root
GW = "198.51.100.62"
#: the field report: 17 interfaces, ~770 routes through the NIC (1.07 MB on 0.1.0)
N_IFACES, N_ROUTES = 17, 770


def _fabric_routes(rig, nic: str, n: int) -> None:  # type: ignore[no-untyped-def]
    batch = "".join(f"route add 198.19.{i // 250}.{i % 250 + 1}/32 via {GW} dev {nic}\n"
                    for i in range(n))
    sh("ip", "-n", rig.node.ns, "-batch", "-", input=batch)


def _agent_once(rig, conf: dict) -> None:  # type: ignore[no-untyped-def,type-arg]
    path = rig.tmp / "agent.json"
    path.write_text(json.dumps(conf))
    proc = subprocess.run(["ip", "netns", "exec", rig.node.ns, str(PYTHON), "-m", "rdma_cni",
                           "agent", "--config", str(path), "--once",
                           "--status-file", str(rig.tmp / "agent-status.json")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def _state_files(rig) -> list[Path]:  # type: ignore[no-untyped-def]
    return sorted((Path(rig.data_dir) / "state").glob("*.json"))


def _pod_addrs(pod) -> set[str]:  # type: ignore[no-untyped-def]
    return {a for lk, a in ((k, x) for k in pod.links() if k not in ("lo", "eth0")
                            for x in pod.addrs(k))}


def test_a_pod_on_a_nic_with_many_routes_keeps_its_addresses(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0", "198.51.100.1/26")
    _fabric_routes(rig, "rnic0", N_ROUTES)
    chain = faults.chain("shared-multi", maxInterfaces=N_IFACES)
    a, b = rig.pod(), rig.pod()
    t0 = time.monotonic()
    run = chain.add("cid-a", a.path, rdma_blocks(N_IFACES))
    assert run.rc == 0, run
    add_s = time.monotonic() - t0
    assert len(a.routes(100 + N_IFACES - 1)) == N_ROUTES + 2  # routes mirrored in the pod
    [state] = _state_files(rig)
    size = state.stat().st_size
    assert size < 64 << 10, f"state record of {size} bytes"
    _agent_once(rig, chain.plugin)
    held = _pod_addrs(a)
    assert len(held) == N_IFACES
    assert chain.add("cid-b", b.path, rdma_blocks(1)).rc == 0
    assert not _pod_addrs(b) & held, "an address of the running pod was handed out again"
    assert chain.delete("cid-a").rc == 0
    assert set(a.links()) == {"lo", "eth0"}
    assert chain.delete("cid-b").rc == 0
    print(f"\nfaults/records: {N_IFACES} interfaces x {N_ROUTES} routes: state {size} bytes, "
          f"ADD {add_s:.1f} s")


def test_a_hand_corrupted_record_keeps_its_addresses_and_del_tears_down(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0", "198.51.100.1/26")
    chain = faults.chain("shared-multi")
    a, b = rig.pod(), rig.pod()
    assert chain.add("cid-a", a.path, rdma_blocks(2)).rc == 0
    held = _pod_addrs(a)
    [state] = _state_files(rig)
    state.write_bytes(b'{"schema": 1, "key": {"network": "vpc-cni", "contain')
    _agent_once(rig, chain.plugin)
    assert chain.add("cid-b", b.path, rdma_blocks(2)).rc == 0
    assert not _pod_addrs(b) & held, "an address of the running pod was handed out again"
    assert chain.delete("cid-a").rc == 0
    assert set(a.links()) == {"lo", "eth0"}, "DEL left the pod's interfaces"
    assert [r for r in a.rules() if r.get("priority") == 20000] == []
    assert chain.delete("cid-a").rc == 0
    assert chain.delete("cid-b").rc == 0
    assert list((Path(rig.data_dir) / "corrupt").iterdir()) == []


def test_a_hand_corrupted_record_of_an_exclusive_nic_returns_it(rig, faults) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0", "198.51.100.1/26")
    chain = faults.chain("exclusive")
    pod = rig.pod()
    assert chain.add("cid-a", pod.path, rdma_blocks(1)).rc == 0
    assert "rnic0" not in rig.node.links()
    [state] = _state_files(rig)
    state.write_text(json.dumps({"schema": 1, "key": {"network": 7}}))
    assert chain.delete("cid-a").rc == 0
    assert "rnic0" in rig.node.links()
    routes = {(r["dst"], r.get("gateway")) for r in
              json.loads(sh("ip", "-n", rig.node.ns, "-j", "route", "show", "dev", "rnic0"))}
    assert (HPC_NET, GW) in routes
    assert set(pod.links()) == {"lo", "eth0"}


def test_a_corrupted_record_does_not_let_a_pod_pass_off_its_own_link_as_the_nic(  # type: ignore[no-untyped-def]
        rig, faults) -> None:
    """The pod (CAP_NET_ADMIN) hides its exclusive NIC under another name and makes a veth
    under the NIC's pod name, with our mark, an address and a route. DEL of the unreadable
    record brings back the NIC ADD recorded in its claim, with the host's configuration,
    and leaves the pod's link where it is (before: the look-alike went to the node as
    rnic0, with the pod's address, and the NIC stayed behind)."""
    rig.nic("rnic0", "198.51.100.1/26")
    chain = faults.chain("exclusive")
    pod = rig.pod()
    assert chain.add("cid-a", pod.path, rdma_blocks(1)).rc == 0
    nic = pod.links()["eth1"]
    batch = (f"link set eth1 down\nlink set eth1 name hidden0\n"
             f"link add eth1 type veth peer name fake1\nlink set eth1 alias {nic['ifalias']}\n"
             "addr add 192.0.2.77/24 dev eth1\nlink set eth1 up\n"
             "route add 198.18.0.0/24 via 192.0.2.1 dev eth1\n")
    sh("ip", "-n", pod.name, "-batch", "-", input=batch)
    [state] = _state_files(rig)
    state.write_text(json.dumps({"schema": 1, "key": {"network": 7}}))
    assert chain.delete("cid-a").rc == 0
    back = rig.node.links()["rnic0"]
    assert back["ifindex"] == nic["ifindex"]
    node_addrs = sh("ip", "-n", rig.node.ns, "-4", "-o", "addr", "show")
    assert "198.51.100.1/26" in node_addrs and "192.0.2.77" not in node_addrs
    routes = {(r["dst"], r.get("gateway")) for r in
              json.loads(sh("ip", "-n", rig.node.ns, "-j", "route", "show"))}
    assert (HPC_NET, GW) in routes and ("198.18.0.0/24", "192.0.2.1") not in routes
    assert "eth1" in pod.links() and "hidden0" not in pod.links()
