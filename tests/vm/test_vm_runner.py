"""Native tests (no VM) of the VM-tier runner, the tier markers and the sysfs helpers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import runner
import vmkit

REPO = Path(__file__).resolve().parents[2]


def _cfg(tmp_path: Path, use_kvm: bool) -> runner.VmConfig:
    return runner.VmConfig(
        vng="/v/vng",
        kernel="/k/vmlinuz",
        udev_rules="/u",
        run_dir=str(tmp_path),
        repo="/r",
        use_kvm=use_kvm,
    )


def test_vng_command_boots_once_with_loop_nics_and_minimal_udev(tmp_path: Path) -> None:
    cmd = runner.vng_command(_cfg(tmp_path, use_kvm=False), "sh /x/guest.sh")
    assert cmd[:4] == ["/v/vng", "--force-9p", "--run", "/k/vmlinuz"]
    assert "--rodir=/usr/lib/udev/rules.d=/u" in cmd
    assert f"--rwdir={tmp_path}" in cmd
    assert cmd[cmd.index("--network") + 1] == "loop" and "--no-dhcp" in cmd
    assert "--disable-kvm" in cmd
    assert cmd[-2:] == ["--exec", "sh /x/guest.sh"]
    assert "--disable-kvm" not in runner.vng_command(_cfg(tmp_path, use_kvm=True), "true")


def test_kvm_refused_under_pvm_hypervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RDMA_CNI_VM_KVM", raising=False)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/kvm").write_text("")
    assert runner.kvm_usable(str(tmp_path)) is True
    (tmp_path / "sys/module/kvm_pvm").mkdir(parents=True)
    assert runner.kvm_usable(str(tmp_path)) is False
    monkeypatch.setenv("RDMA_CNI_VM_KVM", "1")
    assert runner.kvm_usable(str(tmp_path)) is True


def test_the_kernel_is_trixie_backports_unless_a_debian_12_one_is_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RDMA_CNI_VM_KERNEL", raising=False)
    assert runner.kernel_stamp(tmp_path) == tmp_path / "kernel-7.3.4+deb13-amd64"
    (tmp_path / "udev-rules").mkdir()
    (tmp_path / "kernel").write_text(str(tmp_path / "udev-rules") + "\n")  # an old stamp
    assert runner.needs_prepare(tmp_path)  # does not satisfy the default
    monkeypatch.setenv("RDMA_CNI_VM_KERNEL", "bookworm")
    assert runner.kernel_stamp(tmp_path) == tmp_path / "kernel"


def test_pytest_command_defaults_to_vm_dir_only_without_a_path() -> None:
    cmd = runner.pytest_command("/py", ["-v", "-k", "gid"])
    assert cmd == "/py -m pytest -p no:cacheprovider -m vm -v -k gid tests/vm"
    cmd = runner.pytest_command("/py", ["tests/vm/test_vm_kernel.py::test_x"])
    assert cmd.endswith("-m vm tests/vm/test_vm_kernel.py::test_x")


def test_guest_script_reports_status_in_file_and_sentinel(tmp_path: Path) -> None:
    status = tmp_path / "status"
    script = runner.guest_script("exit_with() { return 3; }; exit_with", str(status), modules=())
    script = script.replace("modprobe -a ", ": ")  # no modules on this kernel
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    assert status.read_text().strip() == "3"
    assert runner.parse_status(None, out.stdout) == 3
    assert out.stdout.startswith(runner.STARTED + "\n")
    assert "RDMA_CNI_IN_VM=1" in script


def test_parse_status_prefers_file_then_last_sentinel() -> None:
    tail = f"{runner.SENTINEL}1@@\nnoise\n{runner.SENTINEL}4@@\n"
    assert runner.parse_status("0\n", tail) == 0
    assert runner.parse_status(None, tail) == 4
    assert runner.parse_status("", "no sentinel") is None


def _fake_vng(tmp_path: Path, body: str) -> str:
    vng = tmp_path / "vng"
    vng.write_text(f"#!/bin/sh\n{body}\n")
    vng.chmod(0o755)
    return str(vng)


def test_run_vm_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    vng = _fake_vng(tmp_path, f"sleep 300 & echo $! > {pidfile}; wait")
    started = time.monotonic()
    status = runner.run_vm([vng], timeout=1.0, status_file=tmp_path / "status")
    assert status == runner.EXIT_TIMEOUT
    assert time.monotonic() - started < 15
    child = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_run_vm_returns_guest_status_and_reaps_leftovers(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    body = (
        f"sleep 300 & echo $! > {pidfile}; echo '{runner.SENTINEL}7@@'; "
        "exec >/dev/null 2>&1; exit 0"
    )
    status = runner.run_vm([_fake_vng(tmp_path, body)], 30.0, tmp_path / "status")
    assert status == 7
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)


def test_run_vm_without_status_is_an_infrastructure_failure(tmp_path: Path) -> None:
    status = runner.run_vm([_fake_vng(tmp_path, "exit 255")], 30.0, tmp_path / "status")
    assert status == runner.EXIT_INFRA


def test_a_boot_that_never_ran_the_guest_is_tried_once_more_with_the_console(
        tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    body = (
        f'echo "$*" >> {calls}; case "$1" in --verbose) '
        f"echo '{runner.STARTED}'; echo '{runner.SENTINEL}0@@';; *) exit 255;; esac"
    )
    status = runner.run_vm_retrying([_fake_vng(tmp_path, body), "--run"], 30.0,
                                    tmp_path / "status")
    assert status == 0
    assert calls.read_text().splitlines() == ["--run", "--verbose --run"]


def test_a_guest_that_ran_and_died_is_not_booted_again(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    body = f"echo x >> {calls}; echo '{runner.STARTED}'; exit 255"
    status = runner.run_vm_retrying([_fake_vng(tmp_path, body)], 30.0, tmp_path / "status")
    assert status == runner.EXIT_INFRA
    assert calls.read_text().splitlines() == ["x"]


def test_vm_marker_skips_outside_and_deselects_others_inside() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RDMA_CNI_IN_VM"}
    base = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        "tests/vm/test_vm_kernel.py",
        "tests/vm/test_vm_runner.py::test_parse_status_prefers_file_then_last_sentinel",
    ]
    out = subprocess.run(base, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert "1 passed, 3 skipped" in out.stdout, out.stdout
    assert "needs the VM tier kernel (ipvlan/dummy/rdma_rxe); run scripts/vm-run.sh" in out.stdout
    inside = [*base, "--collect-only"]
    out = subprocess.run(
        inside,
        cwd=REPO,
        env={**env, "RDMA_CNI_IN_VM": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert "3/4 tests collected (1 deselected)" in out.stdout, out.stdout


def _fake_port(root: Path, slots: dict[int, tuple[str, str | None, str | None]]) -> None:
    port = root / "class/infiniband/rxe9/ports/1"
    for sub in ("gids", "gid_attrs/ndevs", "gid_attrs/types"):
        (port / sub).mkdir(parents=True)
    for i, (gid, ndev, gtype) in slots.items():
        (port / "gids" / str(i)).write_text(gid + "\n")
        if ndev is not None:
            (port / "gid_attrs/ndevs" / str(i)).write_text(ndev + "\n")
        if gtype is not None:
            (port / "gid_attrs/types" / str(i)).write_text(gtype + "\n")


def test_read_gids_parses_sysfs_and_skips_empty_slots(tmp_path: Path) -> None:
    _fake_port(
        tmp_path,
        {
            0: ("fe80:0000:0000:0000:5054:00ff:fe12:3456", "eth0", "RoCE v2"),
            1: ("0000:0000:0000:0000:0000:ffff:c633:6415", "ipv1", "RoCE v2"),
            2: ("0000:0000:0000:0000:0000:ffff:c633:6415", "ipv1", "IB/RoCE v1"),
            3: ("0000:0000:0000:0000:0000:0000:0000:0000", None, None),
        },
    )
    gids = vmkit.read_gids("rxe9", sys_root=str(tmp_path))
    assert [g.index for g in gids] == [0, 1, 2]
    found = vmkit.roce_v2_gid_for("rxe9", "198.51.100.21", "ipv1", sys_root=str(tmp_path))
    assert found is not None and found.index == 1
    assert vmkit.roce_v2_gid_for("rxe9", "198.51.100.21", "eth0", sys_root=str(tmp_path)) is None


def test_kill_group_is_a_noop_when_group_is_gone() -> None:
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait()
    runner.kill_group(proc)  # must not raise
    assert proc.returncode == 0
