"""The plugin as installed on a host needs nothing from the host's userland.

The host tree (build.spec, scripts/host_tree.py) carries the C library and the loader it
was built with (Debian 12: glibc 2.36), and the front runs the in-process plugin through
them. Shown three ways, with the resident server absent (the front falls back):

- an older userland: the tree laid into a Debian 11 root (glibc 2.31, ``debootstrap``,
  scripts/old-userland.sh) and ADD, CHECK and DEL run through ``chroot`` against a
  stand-in NIC and a pod netns of this kernel;
- no userland at all: a root holding only the CNI bin dir (no libc, no loader, no /etc,
  no /usr), which holds for any host older than a root we can build here;
- what is mapped: ``/proc/PID/maps`` of an ADD held by a kubelet that never answers,
  run in the Debian 11 root: every file the process maps is in the tree, the C library
  among them, and nothing of the root's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cnirunner import (
    HOST_TREE,
    REPO,
    install_host_tree,
    k8s_args,
    plugin_invocation,
    pod_networks,
    rdma_blocks,
    vpc_result,
)

from rdma_cni.tools import bundle

pytestmark = pytest.mark.root
OLD_ROOT = REPO / ".work" / "roots" / "bullseye"
BIN = "opt/cni/bin"
# Run inside `ip netns exec <node>` (a private mount namespace of its own: every mount
# here ends with the process). The pod netns (/run/netns, nsfs mounts: --rbind), the
# test's data dir and log (its tmp dir, at the same path), /proc, /sys of the node netns
# and /dev are the kernel's, as on any host; everything else comes from the root.
CHROOT = """set -e
root=$1; tmp=$2
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount --rbind /run/netns "$root/run/netns"
mkdir -p "$root$tmp"
mount --bind "$tmp" "$root$tmp"
exec chroot "$root" /opt/cni/bin/rdma-cni
"""


@pytest.fixture(scope="module")
def old_root() -> Iterator[Path]:
    """The Debian 11 root with the session's host tree installed into its CNI bin dir."""
    subprocess.run([str(REPO / "scripts" / "old-userland.sh")], check=True,
                   capture_output=True, timeout=900)
    libc = sorted(p.name for p in (OLD_ROOT / "lib" / "x86_64-linux-gnu").glob("libc-*.so"))
    assert libc == ["libc-2.31.so"], libc  # older than the plugin's own 2.36
    yield from _with_plugin(OLD_ROOT)


@pytest.fixture
def bare_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("bare")
    for d in ("proc", "sys", "dev", "run/netns"):
        (root / d).mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("../run")
    yield from _with_plugin(root)


def _with_plugin(root: Path) -> Iterator[Path]:
    bin_dir = root / BIN
    assert not bin_dir.exists() or not os.listdir(bin_dir), f"{bin_dir} is not empty"
    (root / "run" / "netns").mkdir(parents=True, exist_ok=True)
    install_host_tree(bin_dir, HOST_TREE)
    try:
        yield root
    finally:
        shutil.rmtree(bin_dir, ignore_errors=True)


def _runner(root: Path, tmp: Path) -> list[str]:
    return ["sh", "-c", CHROOT, "rdma-cni-chroot", str(root), str(tmp)]


def _add_check_del(rig, root: Path) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0")
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=_runner(root, rig.tmp))
    res = chain.add("c1", pod.path, rdma_blocks(1))
    assert res.rc == 0, res
    addrs = [i["address"] for i in res.out["ips"]]
    assert "198.51.100.2/26" in addrs, res.out
    assert pod.addrs("eth1") == ["198.51.100.2/26"]  # what the kernel shows
    check = chain.check("c1")
    assert check.rc == 0, check
    gone = chain.delete("c1")
    assert gone.rc == 0, gone
    assert "eth1" not in pod.links()
    assert rig.files() == []


def test_add_check_del_in_a_debian_11_userland(rig, old_root: Path) -> None:  # type: ignore[no-untyped-def]
    _add_check_del(rig, old_root)


def test_add_check_del_with_no_userland_at_all(rig, bare_root: Path) -> None:  # type: ignore[no-untyped-def]
    assert sorted(os.listdir(bare_root)) == ["dev", "opt", "proc", "run", "sys", "var"]
    _add_check_del(rig, bare_root)


class _MuteKubelet:
    """A PodResources socket that accepts and never answers: the ADD waits on it."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(4)
        self.accepted = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            conn, _ = self.sock.accept()
            self.conns.append(conn)
            self.accepted.set()

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.sock.close()


def _mapped_files(pid: int) -> dict[tuple[int, int], str]:
    """(device, inode) -> path as maps prints it, of every file ``pid`` maps."""
    out: dict[tuple[int, int], str] = {}
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/") or fields[5].startswith("/memfd:"):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        st = os.stat(f"/proc/{pid}/map_files/{start:x}-{end:x}")
        out[(st.st_dev, st.st_ino)] = fields[5]
    return out


def test_the_held_plugin_maps_only_files_of_its_tree(rig, old_root: Path) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0")
    pod = rig.pod()
    kubelet = _MuteKubelet(rig.tmp / "kubelet.sock")
    chain = rig.chain("shared-multi", binary=_runner(old_root, rig.tmp),
                      kubelet={"podResourcesSocket": str(rig.tmp / "kubelet.sock"),
                               "checkpointFile": str(rig.tmp / "none"),
                               "devicePluginDir": str(rig.tmp)})
    conf = chain.conf(vpc_result(pod.path), pod_networks(rdma_blocks(1)))
    argv, env = plugin_invocation("ADD", container_id="c1", netns=pod.path,
                                  cni_args=k8s_args("default", "p1", "c1"),
                                  node_ns=rig.node.ns, binary=_runner(old_root, rig.tmp))
    (rig.tmp / "stdin.json").write_text(json.dumps(conf))
    with open(rig.tmp / "stdin.json", "rb") as stdin:
        proc = subprocess.Popen(argv, env=env, stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd="/")
    try:
        assert kubelet.accepted.wait(30), "the ADD never asked the kubelet"
        # ip netns exec, sh, chroot, the front and the loader all exec in place: one PID,
        # now the plugin. Each mapping's file by identity (map_files), not by the path
        # maps prints, which depends on the reader's root.
        mapped = _mapped_files(proc.pid)
    finally:
        kubelet.close()  # the ADD fails now: no kubelet answer
        out, err = proc.communicate(timeout=30)
    tree = old_root / BIN / "rdma-cni.versions"
    ours = {(st.st_dev, st.st_ino): p for p in tree.rglob("*")
            if p.is_file() and not p.is_symlink() for st in [p.stat()]}
    outside = sorted(name for ident, name in mapped.items() if ident not in ours)
    assert outside == [], f"mapped from outside the tree: {outside}"
    names = {os.path.basename(ours[i]) for i in mapped}
    assert {"libc.so.6", "ld-linux-x86-64.so.2", "libpython3.11.so.1.0"} <= names, names
    root_libc = {(st.st_dev, st.st_ino) for p in (old_root / "lib/x86_64-linux-gnu").glob(
        "libc*.so*") for st in [p.stat()]}
    assert not root_libc & set(mapped)  # the Debian 11 root's C library: never
    assert proc.returncode != 0 and b"kubelet" in out, (out, err)


def _second_build(tmp: Path) -> Path:
    """The session's host tree with one file more: another version as install sees it."""
    tree = tmp / "v2"
    shutil.copytree(HOST_TREE, tree, symlinks=True)
    (tree / "_internal" / "UPGRADE-MARK").write_text("v2\n")
    return tree


def _held_add(rig, plugin: Path, kubelet_sock: Path):  # type: ignore[no-untyped-def]
    """An ADD through ``plugin`` that waits on a kubelet that never answers."""
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=[str(plugin)],
                      kubelet={"podResourcesSocket": str(kubelet_sock),
                               "checkpointFile": str(rig.tmp / "none"),
                               "devicePluginDir": str(rig.tmp)})
    conf = chain.conf(vpc_result(pod.path), pod_networks(rdma_blocks(1)))
    argv, env = plugin_invocation("ADD", container_id="c1", netns=pod.path,
                                  cni_args=k8s_args("default", "p1", "c1"),
                                  node_ns=rig.node.ns, binary=[str(plugin)])
    (rig.tmp / "stdin.json").write_text(json.dumps(conf))
    with open(rig.tmp / "stdin.json", "rb") as stdin:
        return subprocess.Popen(argv, env=env, stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd="/")


def test_an_upgrade_keeps_the_running_tree_and_prunes_it_after(rig, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rig.nic("rnic0")
    bin_dir = tmp_path / "bin"
    plugin = install_host_tree(bin_dir)
    old = bundle.current_tree(str(bin_dir))
    kubelet = _MuteKubelet(rig.tmp / "kubelet.sock")
    proc = _held_add(rig, plugin, rig.tmp / "kubelet.sock")
    try:
        assert kubelet.accepted.wait(30), "the ADD never asked the kubelet"
        with bundle.install_lock(str(bin_dir)):  # what install does, step by step
            new, copied = bundle.install_tree(str(_second_build(tmp_path)), str(bin_dir))
            assert copied and new != old
            assert bundle.switch_link(str(bin_dir), new)
            assert bundle.prune(str(bin_dir)) == ([], [old])  # the ADD runs from it
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert f"/rdma-cni.versions/{old}/_internal/libpython" in maps
        assert f"/rdma-cni.versions/{new}/" not in maps  # never a file of the other version
    finally:
        kubelet.close()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1 and b"kubelet" in out
    assert bundle.prune(str(bin_dir)) == ([old], [])  # nothing runs from it now
    assert sorted(os.listdir(bin_dir / "rdma-cni.versions")) == [".install.lock", new]


def _front_waiting(rig, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A pod's ADD through the installed plugin, its front exec'd from the tree the link
    names and waiting for its stdin: (pod, bin dir, that tree, chain, config, process)."""
    rig.nic("rnic0")
    pod = rig.pod()
    bin_dir = tmp_path / "bin"
    plugin = install_host_tree(bin_dir)
    old = bundle.current_tree(str(bin_dir))
    chain = rig.chain("shared-multi", binary=[str(plugin)])
    conf = chain.conf(vpc_result(pod.path), pod_networks(rdma_blocks(1)))
    argv, env = plugin_invocation("ADD", container_id="c1", netns=pod.path,
                                  cni_args=k8s_args("default", "p1", "c1"),
                                  node_ns=rig.node.ns, binary=[str(plugin)])
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd="/")
    assert proc.stdin is not None
    deadline = time.monotonic() + 10  # the front is up and waits for its stdin
    while "rdma-cni-front" not in os.readlink(f"/proc/{proc.pid}/exe"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return pod, bin_dir, old, chain, conf, proc


def _del(chain, pod, conf: dict, out: bytes) -> None:  # type: ignore[no-untyped-def,type-arg]
    """The DEL of ``_front_waiting``'s ADD, as the runtime sends it (its cached result)."""
    chain.cache[("c1", "eth0")] = {"conf": conf, "result": json.loads(out),
                                   "args": k8s_args("default", "p1", "c1"), "netns": pod.path}
    assert chain.delete("c1").rc == 0


def test_a_front_whose_tree_was_pruned_as_it_started_runs_the_current_one(
        rig, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The runtime exec'd the old tree's front just before the link switched, and the old
    tree was pruned before the front reached its lock: the front runs the plugin the link
    names now (argv[0], as libcni execs it) instead of failing."""
    pod, bin_dir, old, chain, conf, proc = _front_waiting(rig, tmp_path)
    with bundle.install_lock(str(bin_dir)):
        new, _ = bundle.install_tree(str(_second_build(tmp_path)), str(bin_dir))
        bundle.switch_link(str(bin_dir), new)
        assert bundle.prune(str(bin_dir)) == ([old], [])
    assert not (bin_dir / "rdma-cni.versions" / old).exists()
    out, err = proc.communicate(json.dumps(conf).encode(), timeout=60)
    assert proc.returncode == 0, (out, err)
    assert json.loads(out)["ips"][-1]["address"] == "198.51.100.2/26"
    assert pod.addrs("eth1") == ["198.51.100.2/26"]
    _del(chain, pod, conf, out)


def test_a_front_whose_tree_is_being_removed_runs_the_current_one(
        rig, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The prune has begun (``.in-use`` unlinked first, then the files) when the front,
    exec'd from that tree just before the link switched, reaches its lock: it took the
    tree for a build's (no ``.in-use``) and ran the half-removed bundle, which failed to
    load its libpython and printed nothing a runtime reads (exit 255)."""
    pod, bin_dir, old, chain, conf, proc = _front_waiting(rig, tmp_path)
    with bundle.install_lock(str(bin_dir)):
        new, _ = bundle.install_tree(str(_second_build(tmp_path)), str(bin_dir))
        bundle.switch_link(str(bin_dir), new)
    going = bin_dir / "rdma-cni.versions" / old  # the prune's first steps, caught midway
    (going / ".in-use").unlink()
    for lib in (going / "_internal").glob("libpython*"):
        lib.unlink()
    out, err = proc.communicate(json.dumps(conf).encode(), timeout=60)
    assert proc.returncode == 0, (out, err)
    assert pod.addrs("eth1") == ["198.51.100.2/26"]
    _del(chain, pod, conf, out)


def test_the_host_tree_holds_the_cni_path_alone(tmp_path: Path) -> None:
    """At most 40 MB, none of the DaemonSet's libraries, and the subcommands that run in
    the image answer one line saying so (exit 2), while the CNI commands work."""
    plugin = install_host_tree(tmp_path / "bin")
    tree = plugin.resolve().parent
    size = sum(p.lstat().st_size for p in tree.rglob("*") if not p.is_dir())
    assert size <= 40e6, f"{size / 1e6:.1f} MB"
    internal = {p.name for p in (tree / "_internal").iterdir()}
    assert not internal & {"kubernetes", "prometheus_client", "grpc", "pyverbs", "yaml",
                           "libcrypto.so.3", "libssl.so.3"}, internal
    assert not (tree / "_internal" / "rdma_cni" / "kube").exists()
    assert not (tree / "_internal" / "rdma_cni" / "tools").exists()
    env = {"PATH": "/usr/bin:/bin"}
    for sub in ("doctor", "device-plugin", "serve", "install", "agent", "exporter"):
        res = subprocess.run([str(plugin), sub, "--help"], capture_output=True, text=True,
                             env=env, timeout=60)
        assert (res.returncode, res.stdout) == (2, ""), (sub, res)
        assert res.stderr.count("\n") == 1 and "runs CNI commands only" in res.stderr, res
    version = subprocess.run([str(plugin)], input='{"cniVersion":"1.1.0"}', text=True,
                             capture_output=True, env={**env, "CNI_COMMAND": "VERSION"},
                             timeout=60)
    assert version.returncode == 0 and json.loads(version.stdout)["cniVersion"] == "1.1.0"


def _lock() -> dict[str, str]:
    lock = (REPO / "requirements" / "bundle.txt").read_text()
    return {m.group(1).lower().replace("_", "-"): m.group(2)
            for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", lock, re.M)}


@pytest.mark.parametrize("which", ["host plugin", "image bundle"])
def test_version_verbose_lists_what_the_build_bundled(tmp_path: Path, built_binary: list[str],
                                                      which: str) -> None:
    plugin = (str(install_host_tree(tmp_path / "bin")) if which == "host plugin"
              else built_binary[0])
    res = subprocess.run([plugin, "--version", "--verbose"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert res.returncode == 0, res
    lines = res.stdout.splitlines()
    assert lines[0].startswith("rdma-cni ") and lines[1].startswith("python 3.")
    where = "in the bundle" if which == "host plugin" else "the host"
    assert lines[2].startswith("c library glibc ") and lines[2].endswith(f"({where})"), lines[2]
    got = dict(line.split(" ", 1) for line in lines[3:] if not line.startswith("debian "))
    debian = dict(line.split(" ")[1:3] for line in lines[3:] if line.startswith("debian "))
    # the Debian packages its libraries and pyverbs come from, at the versions dpkg has
    carried = {"libpython3.11", "libstdc++6"} | (
        {"libc6"} if which == "host plugin" else {"python3-pyverbs", "libibverbs1"})
    assert carried <= set(debian), debian
    for name in carried:
        dpkg = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", name],
                              capture_output=True, text=True, timeout=60, check=True).stdout
        assert debian[name] == dpkg, (name, debian[name], dpkg)
    lock = _lock()
    wrong = {n: v for n, v in got.items() if n != "rdma-cni" and lock.get(n) != v}
    assert wrong == {}, f"bundled versions that are not the locked ones: {wrong}"
    assert {"pyroute2", "pydantic-core", "h2", "protobuf"} <= set(got)
    assert ("kubernetes" in got) == (which == "image bundle")
