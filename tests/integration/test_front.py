"""The native front (front/rdma-cni-front.c) as `install` lays it out:
<bin>/rdma-cni -> rdma-cni.versions/<version>-<digest>/rdma-cni-front, the host's plugin beside it.

It forwards every CNI request to `rdma-cni serve` and relays the answer; whenever
the server is absent, refuses, hangs past the deadline, dies mid-reply or answers
garbage it execs the bundle, which runs the request in-process, exactly once.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cnirunner import rdma_blocks, sh, vpc_result
from support.resident import FakeServer, Serve

from rdma_cni.tools import bundle

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def bin_dir(installed_plugin: list[str]) -> Path:
    """The session's CNI bin dir, laid out by install's own functions."""
    dest = Path(installed_plugin[0]).parent
    name = bundle.current_tree(str(dest))
    assert name is not None
    assert (dest / "rdma-cni").resolve() == (dest / "rdma-cni.versions" / name / "rdma-cni-front")
    return dest


def _front(bin_dir: Path) -> list[str]:
    return [str(bin_dir / "rdma-cni")]


@pytest.fixture
def serve(rig, built_binary: list[str],  # type: ignore[no-untyped-def]
          tmp_path: Path) -> Iterator[Serve]:
    s = Serve(rig.node.ns, tmp_path / "r.sock", tmp_path / "serve.log",
              argv=list(built_binary))
    try:
        yield s
    finally:
        s.stop()


def _hang(conn: socket.socket) -> None:
    del conn  # never answer


def _half_reply(conn: socket.socket) -> None:
    body = b"A" + struct.pack("=iI", 0, 100) + b'{"cniVersion":"0.4.0"'
    conn.sendall(struct.pack("=I", len(body) + 200) + body)
    conn.close()  # killed mid-reply


def _garbage(conn: socket.socket) -> None:
    body = b"A" + struct.pack("=iI", 0, 1 << 30) + b"x"
    conn.sendall(struct.pack("=I", len(body)) + body)


def _add_del(rig, bin_dir: Path, sock: str, env: dict[str, str] | None = None,  # type: ignore[no-untyped-def]
             ) -> float:
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=_front(bin_dir), residentSocket=sock)
    chain.env = env or {}
    start = time.monotonic()
    add = chain.add("c1", pod.path, rdma_blocks(1))
    took = time.monotonic() - start
    assert add.rc == 0, (add.out, add.err)
    assert pod.addrs("eth1") == ["198.51.100.2/26"]
    assert chain.check("c1").rc == 0
    assert chain.delete("c1").rc == 0
    assert sorted(pod.links()) == ["eth0", "lo"]
    return took


def test_front_forwards_add_check_del_and_pass_through(rig, bin_dir: Path,  # type: ignore[no-untyped-def]
                                                       serve: Serve) -> None:
    rig.nic()
    _add_del(rig, bin_dir, str(serve.sock))
    assert (serve.served("ADD"), serve.served("CHECK"), serve.served("DEL")) == (1, 1, 1)
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=_front(bin_dir), residentSocket=str(serve.sock))
    add = chain.add("c2", pod.path, [{"cniConf": {"name": "other"}}])
    assert add.rc == 0 and len(add.out["interfaces"]) == 1
    assert serve.served("ADD") == 2  # the server decides pass-through too
    assert chain.delete("c2").rc == 0


def test_front_without_server_runs_the_bundle(rig, bin_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rig.nic()
    _add_del(rig, bin_dir, str(tmp_path / "absent.sock"))
    _add_del(rig, bin_dir, "")  # forwarding disabled


def test_front_falls_back_when_the_server_refuses(rig, bin_dir: Path,  # type: ignore[no-untyped-def]
                                                  built_binary: list[str],
                                                  tmp_path: Path) -> None:
    other = f"{rig.node.prefix}x"
    sh("ip", "netns", "add", other)
    try:
        s = Serve(other, tmp_path / "o.sock", tmp_path / "o.log",
                  argv=list(built_binary))
        try:
            rig.nic()
            _add_del(rig, bin_dir, str(s.sock))
            assert s.served("ADD") == 0
        finally:
            s.stop()
    finally:
        sh("ip", "netns", "del", other)


@pytest.mark.parametrize("act", [_hang, _half_reply, _garbage], ids=["hung", "killed", "garbage"])
def test_front_falls_back_once_on_a_broken_server(rig, bin_dir: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                  act: Callable[[socket.socket], None]) -> None:
    rig.nic()
    fake = FakeServer(tmp_path / "f.sock", act)
    try:
        took = _add_del(rig, bin_dir, str(fake.path), {"RDMA_CNI_RESIDENT_TIMEOUT": "1"})
        if act is _hang:
            assert 1.0 <= took < 15
        assert fake.accepted == 3  # ADD, CHECK, DEL each tried once; the bundle never retried
    finally:
        fake.close()


def test_front_passes_subcommands_to_the_bundle(bin_dir: Path) -> None:
    out = subprocess.run([str(bin_dir / "rdma-cni"), "--version"], capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.startswith("rdma-cni ")
    about = subprocess.run([str(bin_dir / "rdma-cni")], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
    assert about.returncode == 0 and about.stdout == "" and "rdma-cni" in about.stderr


def test_a_request_through_the_front_logs_to_its_config_s_log_file(  # type: ignore[no-untyped-def]
        rig, bin_dir: Path, serve: Serve) -> None:
    """The way a runtime runs it (the installed front forwarding to ``serve``): the
    request's lines go to its config's ``logFile`` in its ``logFormat``, not to the
    server's own log."""
    import json

    rig.nic()
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=_front(bin_dir), residentSocket=str(serve.sock),
                      logFormat="json")
    assert chain.add("c1", pod.path, rdma_blocks(1)).rc == 0
    assert chain.delete("c1").rc == 0
    assert (serve.served("ADD"), serve.served("DEL")) == (1, 1)
    text = " ".join(json.loads(line)["msg"] for line in rig.log_file.read_text().splitlines())
    assert "DEL of vpc-cni/c1 released" in text, text
    own = serve.log.read_text()
    assert "released" not in own and "resident ADD" in own, own


def test_front_is_a_static_musl_binary(bin_dir: Path) -> None:
    """Every CNI call execs the front: it is static (no loader, no host library) and built
    against musl, not glibc, whose static start-up probes the CPU with dozens of CPUID
    instructions, each a trap to the hypervisor on a virtual machine (bench/README.md,
    "The front's exec")."""
    data = (bin_dir / "rdma-cni").resolve().read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2  # 64-bit
    phoff, phentsize, phnum = (struct.unpack_from("<Q", data, 0x20)[0],
                               *struct.unpack_from("<HH", data, 0x36))
    types = {struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)}
    assert 3 not in types and 2 not in types  # PT_INTERP, PT_DYNAMIC: nothing to load
    assert b"glibc" not in data.lower() and b"GLIBC_" not in data


@pytest.mark.parametrize(("command", "shell", "code"), [
    ("DEL", "<&-", 1), ("VERSION", "<&-", 0), ("VERSION", ">&-", 1)])
def test_front_with_a_closed_stdin_or_stdout(bin_dir: Path, command: str, shell: str,
                                             code: int) -> None:
    """A closed stdin: code 5 (nothing to forward), VERSION still answers; a closed
    stdout: one line on stderr. Never a traceback."""
    res = subprocess.run(["sh", "-c", f'exec "$@" {shell}', "sh", "env", "-i",
                          f"CNI_COMMAND={command}", "CNI_CONTAINERID=c1", "CNI_IFNAME=eth0",
                          str(bin_dir / "rdma-cni")], capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == code, res
    assert "Traceback" not in res.stderr
    if shell == ">&-":
        assert res.stderr == "rdma-cni: the answer could not be written to stdout: " \
                             "stdout is closed\n"
    elif command == "DEL":
        doc = json.loads(res.stdout)
        assert doc["code"] == 5 and doc["msg"].startswith(
            "rdma-cni: failed to read network config from stdin")
    else:
        assert json.loads(res.stdout)["cniVersion"]


@pytest.mark.parametrize(("config", "version"), [
    (b'{"cniVersion":"0.3.1","name":"n","residentSocket":""}', "0.3.1"),
    (b'{"residentSocket":"","cniVersion":"0.4.0"}', "0.4.0"),
    (b'{"cniVersion":"1.0.0","residentSocket":""}', "1.0.0"),
    (b'{"cniVersion":"0.2.0","residentSocket":""}', "1.1.0"),
    (b'{"cniVersion":7,"residentSocket":""}', "1.1.0"), (b"not json", "1.1.0"),
    (None, "1.1.0")],
    ids=["0.3.1", "0.4.0", "1.0.0", "unsupported", "not-a-string", "undecodable", "no-stdin"])
def test_the_front_s_own_error_is_in_the_config_s_version(
        built_binary: list[str], tmp_path: Path, config: bytes | None, version: str) -> None:
    """The front's own error (here: no bundle beside it to run) is in the config's
    cniVersion, as the spec asks and as the bundle answers; a runtime of 0.3.x or 0.4.0
    may refuse a 1.x document. It said 1.0.0 whatever the config said. A config it
    cannot read: the latest, as the bundle answers then. (``residentSocket`` "": the
    front never tries a server.)"""
    front = tmp_path / "rdma-cni-front"  # alone: no bundle "rdma-cni" beside it
    front.write_bytes((Path(built_binary[0]).parent.parent / "rdma-cni-host" /
                       "rdma-cni-front").read_bytes())
    front.chmod(0o755)
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0",
           "CNI_NETNS": "/proc/self/ns/net"}
    if config is None:
        env["CNI_COMMAND"] = "DEL"  # stdin closed: nothing read
    res = subprocess.run([str(front)], input=config, capture_output=True, timeout=60,
                         env=env, check=False,
                         stdin=subprocess.DEVNULL if config is None else None)
    doc = json.loads(res.stdout)
    assert res.returncode == 1 and doc["code"] == 5, res
    assert doc["cniVersion"] == version, doc


def test_a_front_alone_under_the_bundles_name_answers_instead_of_running_itself(
        built_binary: list[str], tmp_path: Path) -> None:
    """The front runs the bundle `rdma-cni` beside it; a front copied alone as
    `rdma-cni` (a hand-made bin dir) exec'd itself for ever, the runtime's ADD hanging
    until its own deadline. It answers code 5 at once."""
    front = tmp_path / "rdma-cni"
    front.write_bytes((Path(built_binary[0]).parent.parent / "rdma-cni-host" /
                       "rdma-cni-front").read_bytes())
    front.chmod(0o755)
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0",
           "CNI_NETNS": "/proc/self/ns/net"}
    res = subprocess.run([str(front)], input=b'{"cniVersion":"1.0.0","residentSocket":""}',
                         capture_output=True, timeout=20, env=env, check=False)
    doc = json.loads(res.stdout)
    assert res.returncode == 1 and doc["code"] == 5, res
    assert doc["msg"].endswith("this front is the only rdma-cni here"), doc


_EXEC_RAW = """import ctypes, sys
i = sys.argv.index("--")
arr = lambda xs: (ctypes.c_char_p * (len(xs) + 1))(*[x.encode() for x in xs], None)
ctypes.CDLL(None).execve(sys.argv[i + 1].encode(), arr(sys.argv[i + 1:]), arr(sys.argv[1:i]))
sys.exit("execve failed")
"""


@pytest.mark.parametrize("resident", [True, False], ids=["serve", "in-process"])
def test_duplicate_cni_variables_first_wins_on_every_path(  # type: ignore[no-untyped-def]
        rig, bin_dir: Path, serve: Serve, resident: bool) -> None:
    """An environment with a variable twice (an execve's raw list): the first entry
    counts, as Go's runtime (syscall copyenv), and so skel and libcni's plugins, read
    it; the front forwards the first to serve and CPython's os.environ keeps the first
    too, so both paths act on one value."""
    pod = rig.pod()
    chain = rig.chain("shared-multi", binary=_front(bin_dir),
                      residentSocket=str(serve.sock) if resident else "")
    stdin = json.dumps(chain.conf(vpc_result(pod.path))).encode()  # no block: pass-through

    def run(*env: str) -> tuple[int, dict[str, object]]:
        res = subprocess.run(["ip", "netns", "exec", rig.node.ns, sys.executable, "-c",
                              _EXEC_RAW, *env, "CNI_CONTAINERID=c1", "CNI_IFNAME=eth0",
                              f"RDMA_CNI_TEST_LOG_FILE={rig.log_file}", "--",
                              *_front(bin_dir)], input=stdin, capture_output=True,
                             timeout=60, check=False)
        return res.returncode, json.loads(res.stdout)

    rc, doc = run("CNI_COMMAND=VERSION", "CNI_COMMAND=ADD", f"CNI_NETNS={pod.path}")
    assert rc == 0 and "supportedVersions" in doc, doc
    rc, doc = run("CNI_COMMAND=ADD", "CNI_COMMAND=VERSION", f"CNI_NETNS={pod.path}")
    assert rc == 0 and doc["interfaces"] == vpc_result(pod.path)["interfaces"], doc
    rc, doc = run("CNI_COMMAND=ADD", "CNI_NETNS=", f"CNI_NETNS={pod.path}")
    assert rc == 1 and doc["code"] == 4 and "CNI_NETNS" in str(doc["msg"]), doc
    rc, doc = run("CNI_COMMAND=ADD", f"CNI_NETNS={pod.path}", "CNI_NETNS=")
    assert rc == 0 and "interfaces" in doc, doc
    assert serve.served("ADD") == (3 if resident else 0)
