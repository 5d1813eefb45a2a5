"""The stand-ins of rdma_cni.lightpkg.py: what the in-process ADD leaves out
(pyroute2's ``config`` imports ``multiprocessing`` and ``platform``), and that a
stand-in completes itself once, whole, for any other user, threads included."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdma_cni.lightpkg import light_module, light_package

ROOT = Path(__file__).resolve().parents[2]


def _probe(code: str) -> object:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True, cwd=str(ROOT)).stdout
    return json.loads(out)


def test_the_rtnetlink_codec_imports_neither_multiprocessing_nor_platform() -> None:
    """``pyroute2.config`` imports both for pyroute2's other users; the codec's message
    classes read three of its names (bench/README.md, figure 6)."""
    loaded = _probe(
        "import sys, json; import rdma_cni.adapters.rtnl, rdma_cni.adapters.netlink; "
        "from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg; "
        "from pyroute2.netlink.rtnl.rtmsg import rtmsg; "
        "print(json.dumps(sorted(m for m in ('multiprocessing', 'platform', 'pickle') "
        "if m in sys.modules)))")
    assert loaded == []


def test_pyroute2s_config_is_whole_for_another_user() -> None:
    got = _probe(
        "import sys, json; import rdma_cni.adapters.rtnl; "
        "from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg; "
        "import pyroute2.config as config; held = config.data_plugins_pkgs; "
        "from pyroute2.config import kernel; "
        "print(json.dumps([callable(config.MpQueue), config.data_plugins_pkgs is held, "
        "len(kernel) > 1, 'multiprocessing' in sys.modules]))")
    assert got == [True, True, True, True]


def _asked_at_once(mod: object, attr: str, n: int = 8) -> list[object]:
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(getattr(mod, attr)))
               for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


@pytest.fixture()
def slow_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package ``lightprobe`` with a module ``slow`` whose code takes a while and counts
    its runs (in ``lightprobe.runs``)."""
    pkg = tmp_path / "lightprobe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("runs = []\n")
    (pkg / "slow.py").write_text(
        "import time\nimport lightprobe\nlightprobe.runs.append(1)\ntime.sleep(0.2)\n"
        "PRESET = 'real'\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "lightprobe.slow"
    for name in ("lightprobe.slow", "lightprobe"):
        sys.modules.pop(name, None)


def test_a_stand_in_completes_once_for_threads_asking_at_once(slow_module: str) -> None:
    light_module(slow_module, {"PRESET": "kept"})
    mod = sys.modules[slow_module]
    assert mod.PRESET == "kept" and "VALUE" not in mod.__dict__
    assert _asked_at_once(mod, "VALUE") == [42] * 8
    assert sys.modules["lightprobe"].runs == [1]
    assert mod.PRESET == "kept" and "__getattr__" not in mod.__dict__
    with pytest.raises(AttributeError):
        mod.MISSING  # noqa: B018


def test_a_package_stand_in_completes_once_for_threads_asking_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "lightpkgprobe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import time, builtins\nbuiltins.__dict__.setdefault('_lightruns', []).append(1)\n"
        "time.sleep(0.2)\nVALUE = 7\n")
    (pkg / "sub.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins
    try:
        light_package("lightpkgprobe")
        from lightpkgprobe import sub  # a submodule, without the package's code
        assert sub.X == 1 and "_lightruns" not in builtins.__dict__
        mod = sys.modules["lightpkgprobe"]
        assert _asked_at_once(mod, "VALUE") == [7] * 8
        assert builtins.__dict__["_lightruns"] == [1]
    finally:
        builtins.__dict__.pop("_lightruns", None)
        for name in ("lightpkgprobe.sub", "lightpkgprobe"):
            sys.modules.pop(name, None)


def test_the_exec_d_plugin_logs_without_traceback_until_an_error_report(
        tmp_path: Path) -> None:
    """``logging`` imports ``traceback`` (with ``tokenize``, ``linecache`` and
    ``textwrap``) for what only an error report uses: the exec'd plugin logs a failed
    ADD's line without loading it."""
    blocks = json.dumps([{"cniConf": {"name": "rdma"}}])
    conf = {"cniVersion": "1.0.0", "name": "n", "type": "rdma-cni",
            "dataDir": str(tmp_path / "data"), "logFile": str(tmp_path / "log"),
            "mode": "shared-multi", "devices": ["x"], "residentSocket": "",
            "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {
                "k8s.volcengine.com/pod-networks": blocks}},
            "prevResult": {"cniVersion": "1.0.0", "interfaces": [], "ips": []}}
    env = {"PATH": "/usr/bin:/bin", "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1",
           "CNI_IFNAME": "eth0", "CNI_NETNS": str(tmp_path / "gone"),
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "rdma_cni"],
                          input=json.dumps(conf), env=env, capture_output=True, text=True,
                          timeout=60, cwd=str(tmp_path))
    assert proc.returncode == 1 and json.loads(proc.stdout)["code"] == 4, proc.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert "ADD failed: code 4" in (tmp_path / "log").read_text()
    assert "logging" in imported
    assert not {"traceback", "tokenize", "linecache", "textwrap"} & imported


def test_a_completion_that_failed_is_tried_again(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The real code failing once (EMFILE while it imports) left the stand-in asking
    itself for ever (RecursionError); a failed import is tried again, as Python's own.
    A name the real code asks of itself before defining it is an AttributeError."""
    pkg = tmp_path / "lightflaky"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("tries = []\n")
    (pkg / "mod.py").write_text(
        "import lightflaky\nlightflaky.tries.append(1)\n"
        "if len(lightflaky.tries) == 1:\n    raise OSError('transient')\n"
        "import sys\ntry:\n    sys.modules[__name__].LATER\nexcept AttributeError:\n"
        "    EARLY = 'attribute error'\nLATER = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        light_module("lightflaky.mod", {"A": 1})
        mod = sys.modules["lightflaky.mod"]
        with pytest.raises(OSError, match="transient"):
            mod.B  # noqa: B018
        assert mod.LATER == 2 and mod.EARLY == "attribute error" and mod.A == 1
        with pytest.raises(AttributeError):
            mod.B  # noqa: B018
    finally:
        for name in ("lightflaky.mod", "lightflaky"):
            sys.modules.pop(name, None)
