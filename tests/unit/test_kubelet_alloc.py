"""Kubelet allocation sources (PodResources, checkpoint) and allocation rules."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support

from support.fakes.kubelet import FakeKubelet

from rdma_cni.adapters.kubelet import checkpoint_devices, pod_resources_devices
from rdma_cni.errors import (
    AllocationError,
    Code,
    IOFailure,
    NicUnavailable,
    SourceSilent,
    TryAgain,
)
from rdma_cni.node.allocation import (
    SRC_CHECKPOINT,
    SRC_CONFIG,
    SRC_DEVICE_ID,
    SRC_NONE,
    SRC_POD_RESOURCES,
    PodRef,
    assign,
    kubelet_sources,
    lookup,
)

RES = "vke.volcengine.com/rdma"


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(pr_socket=str(tmp_path / "kubelet.sock")).start()
    yield fake
    fake.stop()


def _query(k: FakeKubelet, ns: str = "team", name: str = "job-0", timeout: float = 5.0):
    assert k.pr_socket
    return pod_resources_devices(k.pr_socket, ns, name, RES, timeout)


# --- PodResources --------------------------------------------------------------

def test_get_returns_resource_ids_across_containers(kubelet: FakeKubelet) -> None:
    kubelet.set_pod("team", "job-0", {RES: ["0000:3b:00.0@1"], "nvidia.com/gpu": ["G0"]})
    kubelet.set_pod("team", "job-0", {RES: ["0000:5e:00.0@0"]}, container="sidecar")
    kubelet.set_pod("team", "other", {RES: ["0000:af:00.0"]})
    assert _query(kubelet) == ["0000:3b:00.0@1", "0000:5e:00.0@0"]
    assert kubelet.calls == ["Get"]


@pytest.mark.parametrize("mode", ["unimplemented", "disabled"])
def test_list_fallback_when_get_unavailable(kubelet: FakeKubelet, mode: str) -> None:
    kubelet.get_mode = mode
    kubelet.set_pod("team", "job-0", {RES: ["eth1", "eth2"]})
    kubelet.set_pod("other-ns", "job-0", {RES: ["eth3"]})
    assert _query(kubelet) == ["eth1", "eth2"]
    assert kubelet.calls == ["Get", "List"]


def test_pod_without_resource_is_empty(kubelet: FakeKubelet) -> None:
    kubelet.set_pod("team", "job-0", {"nvidia.com/gpu": ["G0"]})
    assert _query(kubelet) == []


@pytest.mark.parametrize("mode", ["ok", "unimplemented"])
def test_pod_not_listed_is_empty(kubelet: FakeKubelet, mode: str) -> None:
    kubelet.get_mode = mode
    kubelet.set_pod("team", "someone-else", {RES: ["eth1"]})
    assert _query(kubelet) == []


def test_missing_socket_is_none(tmp_path: Path) -> None:
    assert pod_resources_devices(str(tmp_path / "nope.sock"), "a", "b", RES, 1.0) is None


def test_deadline_is_try_again(kubelet: FakeKubelet) -> None:
    kubelet.delay = 1.0
    with pytest.raises(TryAgain) as exc:
        _query(kubelet, timeout=0.2)
    assert exc.value.code == Code.TRY_AGAIN_LATER
    assert "team/job-0" in str(exc.value) and "deadline" in str(exc.value)


def test_a_socket_nothing_listens_on_is_silence_naming_it(tmp_path: Path) -> None:
    """A restarting kubelet: its socket is there, nothing listens (code 11, and
    :func:`lookup` asks the checkpoint)."""
    sock = tmp_path / "kubelet.sock"
    sock.write_text("")  # exists, but nothing listens
    with pytest.raises(SourceSilent) as exc:
        pod_resources_devices(str(sock), "team", "job-0", RES, 2.0)
    assert str(sock) in str(exc.value) and "UNAVAILABLE" in str(exc.value)
    assert exc.value.code == Code.TRY_AGAIN_LATER


def test_a_full_listen_queue_is_tried_again_until_the_deadline(tmp_path: Path) -> None:
    """A busy kubelet's queue is full (connect: EAGAIN): the query keeps trying until
    its deadline instead of failing at once."""
    import socket
    import time

    path = str(tmp_path / "kubelet.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(0)
    queued = []
    try:
        for _ in range(8):  # fill the queue; nobody accepts
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.setblocking(False)
            try:
                c.connect(path)
            except BlockingIOError:
                c.close()
                break
            queued.append(c)
        start = time.monotonic()
        with pytest.raises(SourceSilent):
            pod_resources_devices(path, "team", "job-0", RES, 0.5)
        assert time.monotonic() - start >= 0.45
    finally:
        for c in queued:
            c.close()
        server.close()


# --- checkpoint ------------------------------------------------------------------

def _checkpoint(tmp_path: Path, entries: list[dict]) -> str:
    doc = {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {RES: ["a", "b"]}},
           "Checksum": 12345}
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_text(json.dumps(doc))
    return str(path)


def _entry(uid: str, ids: object, res: str = RES, cont: str = "main") -> dict:
    return {"PodUID": uid, "ContainerName": cont, "ResourceName": res,
            "DeviceIDs": ids, "AllocResp": "CgA="}


def test_checkpoint_numa_map_form(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, [
        _entry("uid-1", {"1": ["0000:af:00.0"], "0": ["0000:3b:00.0"]}),
        _entry("uid-1", {"0": ["G0"]}, res="nvidia.com/gpu"),
        _entry("uid-2", {"0": ["0000:5e:00.0"]}),
    ])
    assert checkpoint_devices(path, "uid-1", RES) == ["0000:3b:00.0", "0000:af:00.0"]


def test_checkpoint_list_form(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, [_entry("uid-1", ["eth2", "eth1"]),
                                  _entry("uid-1", ["eth3"], cont="init")])
    assert checkpoint_devices(path, "uid-1", RES) == ["eth2", "eth1", "eth3"]


def test_checkpoint_pod_absent_and_null_entries(tmp_path: Path) -> None:
    assert checkpoint_devices(_checkpoint(tmp_path, [_entry("x", ["eth1"])]), "uid-1", RES) == []
    path = tmp_path / "cp"
    path.write_text('{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":1}')
    assert checkpoint_devices(str(path), "uid-1", RES) == []


def test_checkpoint_missing_is_none(tmp_path: Path) -> None:
    assert checkpoint_devices(str(tmp_path / "absent"), "uid-1", RES) is None


@pytest.mark.parametrize("text", [
    "not json", "[]", '{"Data": 3}',
    '{"Data":{"PodDeviceEntries":{}}}',
    json.dumps({"Data": {"PodDeviceEntries": [_entry("uid-1", "eth1")]}}),
    json.dumps({"Data": {"PodDeviceEntries": [_entry("uid-1", {"0": [1]})]}}),
    json.dumps({"Data": {"PodDeviceEntries": ["uid-1"]}}),
])
def test_checkpoint_malformed_is_io_failure(tmp_path: Path, text: str) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_text(text)
    with pytest.raises(IOFailure) as exc:
        checkpoint_devices(str(path), "uid-1", RES)
    assert str(path) in str(exc.value)
    assert exc.value.code == Code.IO_FAILURE


def test_errors_are_distinct_types() -> None:
    assert AllocationError.code == Code.NO_ALLOCATION


# --- allocation order ------------------------------------------------------------

def _src(value: list[str] | None, calls: list[str], name: str):
    def source() -> list[str] | None:
        calls.append(name)
        return value
    return source


def test_device_id_wins_and_skips_kubelet() -> None:
    calls: list[str] = []
    ans = lookup(device_id="0000:3b:00.0", pod_resources=_src(["x"], calls, "pr"),
                 checkpoint=_src(["y"], calls, "cp"))
    assert (ans.ids, ans.source) == (["0000:3b:00.0"], SRC_DEVICE_ID)
    assert calls == []


def test_pod_resources_before_checkpoint() -> None:
    calls: list[str] = []
    ans = lookup(pod_resources=_src(["eth2"], calls, "pr"), checkpoint=_src(["y"], calls, "cp"))
    assert (ans.ids, ans.source) == (["eth2"], SRC_POD_RESOURCES)
    assert calls == ["pr"]


def test_checkpoint_when_api_absent_or_empty() -> None:
    calls: list[str] = []
    ans = lookup(pod_resources=_src(None, calls, "pr"), checkpoint=_src(["eth3"], calls, "cp"))
    assert (ans.ids, ans.source) == (["eth3"], SRC_CHECKPOINT)
    ans = lookup(pod_resources=_src([], calls, "pr"), checkpoint=_src(None, calls, "cp"))
    assert (ans.ids, ans.source) == ([], SRC_POD_RESOURCES)


def test_a_silent_kubelet_leaves_it_to_the_checkpoint() -> None:
    """PodResources does not answer (a kubelet restarting): the checkpoint's devices;
    when it knows none of the pod's, or there is none, the silence (try again), never
    "the pod holds none"."""
    def silent() -> list[str] | None:
        raise SourceSilent("failed to query pod resources: UNAVAILABLE")

    calls: list[str] = []
    ans = lookup(pod_resources=silent, checkpoint=_src(["eth3"], calls, "cp"))
    assert (ans.ids, ans.source) == (["eth3"], SRC_CHECKPOINT)
    for none in ([], None):
        with pytest.raises(SourceSilent):
            lookup(pod_resources=silent, checkpoint=_src(none, calls, "cp"))


def test_no_source_at_all_is_none_and_config_forces_none() -> None:
    calls: list[str] = []
    ans = lookup(pod_resources=_src(None, calls, "pr"), checkpoint=_src(None, calls, "cp"))
    assert (ans.ids, ans.source) == (None, SRC_NONE)
    ans = lookup(allocation="config", device_id="eth1", pod_resources=_src(["x"], calls, "pr2"))
    assert (ans.ids, ans.source) == (None, SRC_CONFIG)
    assert "pr2" not in calls


def test_kubelet_sources_end_to_end(kubelet: FakeKubelet, tmp_path: Path) -> None:
    kubelet.set_pod("team", "job-0", {RES: ["eth2@3"]})
    assert kubelet.pr_socket
    pr_src, cp_src = kubelet_sources(PodRef("team", "job-0", "uid-1"), RES,
                                     pod_resources_socket=kubelet.pr_socket,
                                     checkpoint_file=str(tmp_path / "absent"), timeout=5)
    assert lookup(pod_resources=pr_src, checkpoint=cp_src).ids == ["eth2@3"]
    cp_file = _checkpoint(tmp_path, [_entry("uid-1", ["eth1"])])
    pr_src, cp_src = kubelet_sources(PodRef("team", "job-0", "uid-1"), RES,
                                     pod_resources_socket=str(tmp_path / "none.sock"),
                                     checkpoint_file=cp_file, timeout=5)
    ans = lookup(pod_resources=pr_src, checkpoint=cp_src)
    assert (ans.ids, ans.source) == (["eth1"], SRC_CHECKPOINT)


@pytest.mark.parametrize("pod", [PodRef("", "", ""), PodRef("team", "", ""),
                                 PodRef("team", "job-0", ""), PodRef("", "", "uid-1")])
def test_a_request_naming_no_pod_is_listed_by_no_source_that_exists(
        kubelet: FakeKubelet, tmp_path: Path, pod: PodRef) -> None:
    """DESIGN §8: NICs come from config order only where no kubelet source exists. A
    request without the pod's name (or UID) cannot be looked up, which is not the same:
    where the socket or the checkpoint exists it is allocated nothing (101)."""
    kubelet.set_pod("team", "job-0", {RES: ["eth2@3"]})
    cp_file = _checkpoint(tmp_path, [_entry("uid-1", ["eth1"])])
    absent = str(tmp_path / "absent")
    assert kubelet.pr_socket
    for socket, checkpoint in ((kubelet.pr_socket, absent), (absent, cp_file),
                               (kubelet.pr_socket, cp_file)):
        pr_src, cp_src = kubelet_sources(pod, RES, pod_resources_socket=socket,
                                         checkpoint_file=checkpoint, timeout=5)
        ans = lookup(pod_resources=pr_src, checkpoint=cp_src)
        if (pod.name and socket != absent) or (pod.uid and checkpoint != absent):
            assert ans.ids, (socket, checkpoint)  # the source that can name it does
        else:
            assert ans.ids == [], (socket, checkpoint)
    pr_src, cp_src = kubelet_sources(pod, RES, pod_resources_socket=absent,
                                     checkpoint_file=absent, timeout=5)
    assert lookup(pod_resources=pr_src, checkpoint=cp_src).ids is None  # no source at all


def test_no_pod_and_runtime_values_in_allocation_messages() -> None:
    with pytest.raises(AllocationError) as exc:
        assign("shared", NICS, [], 1, resolve=_resolve, pod="", resource=RES)
    assert "names no pod" in str(exc.value)
    hostile = "eth1@\x1b[2J\nFAKE" + "A" * 5000
    with pytest.raises(AllocationError) as exc:
        assign("shared", NICS, [hostile], 2, resolve=_resolve, pod="ns/p\x1b\r", resource=RES)
    msg = str(exc.value)
    assert len(msg) < 600 and not any(ord(c) < 0x20 for c in msg), msg
    assert "ns/p\\x1b\\x0d" in msg, msg


# --- assign ---------------------------------------------------------------------------

@dataclass(frozen=True)
class N:
    netdev: str
    pci: str | None = None


NICS = [N("eth1", "0000:3b:00.0"), N("eth2", "0000:5e:00.0"), N("eth3", None),
        N("eth4", "0000:d8:00.0")]


def _resolve(dev_id: str) -> N:
    for nic in NICS:
        if dev_id in (nic.pci, nic.netdev):
            return nic
    raise AllocationError(f"unknown device ID {dev_id}")


def _assign(mode: str, ids: list[str] | None, n: int, **kw) -> list[str]:
    return assign(mode, NICS, ids, n, resolve=_resolve, pod="team/job-0", resource=RES, **kw)


def test_block_i_gets_sorted_device_i() -> None:
    ids = ["0000:5e:00.0", "eth3", "0000:3b:00.0"]
    assert _assign("shared", ids, 2) == ["eth1", "eth2"]
    assert _assign("exclusive", ids, 3) == ["eth1", "eth2", "eth3"]


def test_suffixes_stripped_and_deduplicated() -> None:
    ids = ["0000:5e:00.0@3", "0000:3b:00.0@1", "0000:5e:00.0@0"]
    assert _assign("shared", ids, 2) == ["eth1", "eth2"]


def test_fewer_nics_than_blocks_names_both_numbers() -> None:
    with pytest.raises(AllocationError) as exc:
        _assign("exclusive", ["0000:5e:00.0@1", "0000:5e:00.0@2"], 2)
    assert exc.value.code == Code.NO_ALLOCATION
    msg = str(exc.value)
    assert "2 RDMA interfaces" in msg and "1 distinct NIC" in msg and "team/job-0" in msg


def test_pod_without_resource_is_101() -> None:
    for mode in ("shared", "exclusive", "shared-multi", "shared-host"):
        with pytest.raises(AllocationError) as exc:
            _assign(mode, [], 1)
        assert f"pod team/job-0 has no {RES} allocated" in str(exc.value)


def test_unknown_id_propagates() -> None:
    with pytest.raises(AllocationError, match=r"unknown device ID 0000:00:00\.0"):
        _assign("shared", ["0000:00:00.0"], 1)


def test_shared_multi_round_robin() -> None:
    ids = ["0000:5e:00.0@7", "0000:3b:00.0@2"]
    assert _assign("shared-multi", ids, 5) == ["eth1", "eth2", "eth1", "eth2", "eth1"]


def test_shared_host_every_nic_when_resource_present() -> None:
    assert _assign("shared-host", ["host-3"], 1) == ["eth1", "eth2", "eth3", "eth4"]


def test_unallocated_takes_free_nics_in_order() -> None:
    assert _assign("shared", None, 2, busy={"eth1"}) == ["eth2", "eth3"]
    assert _assign("shared-multi", None, 6, busy={"eth1"}) == [
        "eth1", "eth2", "eth3", "eth4", "eth1", "eth2"]
    assert _assign("shared-host", None, 1) == ["eth1", "eth2", "eth3", "eth4"]
    with pytest.raises(NicUnavailable) as exc:
        _assign("exclusive", None, 3, busy={"eth1", "eth4"})
    assert "only 2 of 4" in str(exc.value) and "eth1, eth4" in str(exc.value)
    with pytest.raises(AllocationError, match="has 4 NICs"):
        _assign("exclusive", None, 5)
