"""Security of the resident server (issue 27 items 3, 5 and 9): it serves a request only
when it sees the caller's store and kubelet files, no other user can ever reach it or
have it act on a path, and a malformed header is answered as such.

`serve` runs as the DaemonSet runs it, in the node netns; for item 3 in a mount
namespace of its own (``unshare --mount``) where the data dir or the kubelet's
directory is another (empty) tmpfs. Oracle: the addresses in the pods (`ip -j`), the
CNI codes, the files on disk, what `serve` logged.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cnirunner import PYTHON, rdma_blocks, run_plugin
from security_rig import as_user, own_fds, private_mounts, raw_request
from support.fakes.kubelet import FakeKubelet
from support.resident import Serve, image_of
from support.rigs import Rig

from rdma_cni.resident import protocol

pytestmark = pytest.mark.root
RESOURCE = "vke.volcengine.com/rdma"


def _server_argv(client: list[str] | None) -> list[str]:
    """The server of the client: the image's bundle for the front, this checkout else."""
    if client is None:
        return [str(PYTHON), "-m", "rdma_cni"]
    return image_of(client)


def test_serve_seeing_another_data_dir_declines(rig: Rig, client: list[str] | None,
                                                tmp_path: Path) -> None:
    """`serve` whose data dir is another directory than the caller's: without the check
    a resident ADD and an in-process ADD handed out the same address."""
    rig.nic()
    pod_a, pod_b = rig.pod(), rig.pod()
    rig.data_dir.mkdir(parents=True, exist_ok=True)
    serve = Serve(rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log",
                  argv=private_mounts([rig.data_dir], _server_argv(client)))
    try:
        resident = rig.chain("shared-multi", binary=client, residentSocket=str(serve.sock))
        in_proc = rig.chain("shared-multi", binary=client, residentSocket="")
        in_proc.cache = resident.cache
        assert resident.add("c1", pod_a.path, rdma_blocks(1)).rc == 0
        assert in_proc.add("c2", pod_b.path, rdma_blocks(1)).rc == 0
        assert (pod_a.addrs("eth1"), pod_b.addrs("eth1")) == (["198.51.100.2/26"],
                                                              ["198.51.100.3/26"])
        assert resident.delete("c1").rc == 0 and resident.delete("c2").rc == 0
        assert serve.served("ADD") == 0 and serve.served("DEL") == 0
        assert "resident server declines ADD: dataDir" in serve.log.read_text()
    finally:
        serve.stop()


@pytest.fixture
def kubelet_dir(tmp_path: Path) -> Iterator[tuple[Path, FakeKubelet]]:
    """A kubelet whose PodResources API lists another pod only (not ``p1``)."""
    d = tmp_path / "kubelet"
    d.mkdir()
    k = FakeKubelet(pr_socket=str(d / "pr.sock")).start()
    k.set_pod("default", "other", {RESOURCE: ["rnic0@0"]})
    try:
        yield d, k
    finally:
        k.stop()


def test_serve_not_seeing_the_kubelet_declines(rig: Rig, client: list[str] | None,
                                               tmp_path: Path,
                                               kubelet_dir: tuple[Path, FakeKubelet]) -> None:
    """Without the check a `serve` that cannot see the kubelet's socket gave a NIC to a
    pod with no allocation (rc 0, "no kubelet allocation source"); in-process: 101."""
    rig.nic()
    pod = rig.pod()
    d, k = kubelet_dir
    serve = Serve(rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log",
                  argv=private_mounts([d], _server_argv(client)))
    try:
        chain = rig.chain("shared-multi", binary=client, residentSocket=str(serve.sock),
                          kubelet={"podResourcesSocket": k.pr_socket,
                                   "checkpointFile": str(d / "absent-checkpoint"),
                                   "devicePluginDir": str(d)})
        add = chain.add("c1", pod.path, rdma_blocks(1))
        assert add.code == 101, add
        assert sorted(pod.links()) == ["eth0", "lo"]
        assert serve.served("ADD") == 0
        assert "declines ADD: kubelet.podResourcesSocket" in serve.log.read_text()
        assert chain.delete("c1").rc == 0
    finally:
        serve.stop()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user may enter, as /run/rdma-cni on a node (pytest's temp dirs
    are root's alone, which would hide the socket whatever its mode)."""
    d = Path(tempfile.mkdtemp(prefix="rdma-cni-sec."))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d)


PROBE = r"""
import os, socket, stat, sys, time
root, until = sys.argv[1], time.monotonic() + float(sys.argv[2])
while time.monotonic() < until:
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            try:
                if not stat.S_ISSOCK(os.lstat(p).st_mode):
                    continue
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(p)
                print("connected", p, flush=True)
            except OSError:
                pass
    time.sleep(0.005)
"""


def test_no_other_user_reaches_the_socket_while_it_is_made(rig: Rig, open_dir: Path,
                                                           tmp_path: Path) -> None:
    """Under umask 000, with the window between ``listen`` and the socket's final mode
    widened to 3 s (strace delays the return of ``listen``), user nobody tries to connect
    to every socket in the directory all along."""
    prober = subprocess.Popen(
        ["ip", "netns", "exec", rig.node.ns, "setpriv", "--reuid=65534", "--regid=65534",
         "--clear-groups", "/usr/bin/python3", "-c", PROBE, str(open_dir), "8"],
        stdout=subprocess.PIPE, text=True)
    argv = ["sh", "-c", 'umask 000 && exec "$@"', "sh", "strace", "-f", "--seccomp-bpf",
            "-o", "/dev/null", "-e", "trace=listen",
            "-e", "inject=listen:delay_exit=3000000", str(PYTHON), "-m", "rdma_cni"]
    sock = open_dir / "rdma-cni.sock"
    serve = Serve(rig.node.ns, sock, tmp_path / "serve.log", argv=argv)
    try:
        assert stat.S_IMODE(sock.lstat().st_mode) == 0o600
        assert sorted(p.name for p in open_dir.iterdir()) == ["rdma-cni.sock"]
        out, _ = prober.communicate(timeout=30)
    finally:
        for pid in _children(serve.proc.pid):  # serve itself: strace would let it run on
            os.kill(pid, signal.SIGTERM)
        serve.stop()
    assert out == "", out


def _children(pid: int) -> list[int]:
    return [int(c) for t in Path(f"/proc/{pid}/task").iterdir()
            for c in (t / "children").read_text().split()]


SEND = r"""
import array, os, socket, sys, time
frame = bytes.fromhex(sys.argv[2])
fds = [os.open("/proc/thread-self/ns/net", os.O_RDONLY), os.open("/", os.O_PATH)]
with socket.socket(socket.AF_UNIX) as s:
    s.settimeout(10)
    s.connect(sys.argv[1])
    time.sleep(0.3)  # a refusal comes at once: read it whole, not reset by unread data
    try:
        s.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                             array.array("i", fds).tobytes())])
    except BrokenPipeError:
        pass  # refused at once: the answer is already waiting
    reply = b""
    while chunk := s.recv(65536):
        reply += chunk
print(reply[4:5].decode() or "-")
"""


def test_another_user_cannot_have_serve_act_on_a_path(rig: Rig, open_dir: Path,
                                                      tmp_path: Path) -> None:
    """Even where the socket's mode would let user nobody in (made 0666 here), `serve`
    refuses the connection: a STATUS naming root's file as ``metricsFile`` would have
    root overwrite it. And no config, the runtime's included, has the plugin overwrite a
    file that is not its metrics file."""
    victim = open_dir / "precious"
    victim.write_text("root's data\n")
    serve = Serve(rig.node.ns, open_dir / "r.sock", tmp_path / "serve.log")
    try:
        os.chmod(serve.sock, 0o666)
        conf = {"cniVersion": "1.1.0", "name": "n", "mode": "shared-multi",
                "dataDir": str(tmp_path / "data"), "metricsFile": str(victim)}
        frame = protocol.encode_request({"CNI_COMMAND": "STATUS"},
                                        json.dumps(conf).encode())
        sent = as_user(rig.node.ns, SEND, str(serve.sock), frame.hex())
        assert sent.stdout.strip() == "R", sent
        assert serve.served("STATUS") == 0
        assert "refused a connection from uid 65534" in serve.log.read_text()
    finally:
        serve.stop()
    status = run_plugin("STATUS", {**conf, "residentSocket": ""}, node_ns=rig.node.ns)
    assert status.rc == 0, status
    assert victim.read_text() == "root's data\n"


def test_a_deeply_nested_header_is_answered_as_malformed(rig: Rig, tmp_path: Path) -> None:
    serve = Serve(rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log")
    fds = own_fds()
    try:
        reply = raw_request(serve.sock, b"[" * 50000, fds=fds)
        assert reply.startswith(b"Rmalformed request"), reply[:200]
        time.sleep(0.2)
        assert "RecursionError" not in serve.stderr and "Traceback" not in serve.stderr
        assert "nested too deeply" in serve.log.read_text()
        assert serve.proc.poll() is None
    finally:
        for fd in fds:
            os.close(fd)
        serve.stop()
