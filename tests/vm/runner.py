"""Run the VM test tier: boot a Debian kernel once under virtme-ng, run pytest -m vm inside.

Usage (from anywhere; also via scripts/vm-run.sh):
    python tests/vm/runner.py [--timeout S] [--exec CMD] [-- ] [pytest args...]

Exit status: pytest's, or 124 when the overall deadline passed, or 125 when the VM
could not be prepared, booted, or did not report a status.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[2]
GUEST_MODULES = ("virtio_net", "dummy", "veth", "ipvlan", "macvlan", "rdma_rxe", "ib_uverbs")
SENTINEL = "@@RDMA_CNI_VM_EXIT="
SENTINEL_RE = re.compile(re.escape(SENTINEL) + r"(\d+)@@")
#: the guest script's first line: a VM that stops before it printed this never booted
STARTED = "@@RDMA_CNI_VM_STARTED@@"
EXIT_TIMEOUT = 124
EXIT_INFRA = 125
DEFAULT_TIMEOUT = 45 * 60  # the tier: 13 min on an idle machine, past 25 on a loaded one
#: trixie-backports' kernel, the default (rxe with per-netns sockets); RDMA_CNI_VM_KERNEL
#: picks a Debian 12 one instead (scripts/vm-prepare.sh)
NEXT_RELEASE = "7.3.4+deb13-amd64"


@dataclass
class VmConfig:
    """Everything needed to build the vng command line (pure data)."""

    vng: str
    kernel: str
    udev_rules: str
    run_dir: str
    repo: str
    use_kvm: bool
    memory: str = "2G"
    cpus: int = 2
    extra_rwdirs: list[str] = field(default_factory=list)


def work_dir() -> Path:
    return Path(os.environ.get("RDMA_CNI_VM_DIR", str(REPO / ".work" / "vm")))


def guest_python() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def kvm_usable(sys_root: str = "/") -> bool:
    """Real KVM only: a PVM hypervisor (kvm_pvm) hangs generic guest kernels."""
    forced = os.environ.get("RDMA_CNI_VM_KVM")
    if forced in ("0", "1"):
        return forced == "1"
    root = Path(sys_root)
    if (root / "sys/module/kvm_pvm").exists():
        return False
    kvm = root / "dev/kvm"
    return kvm.exists() and os.access(kvm, os.R_OK | os.W_OK)


def guest_script(command: str, status_file: str, modules: Sequence[str] = GUEST_MODULES) -> str:
    """POSIX sh run inside the guest: load modules, run `command`, report its status."""
    mods = " ".join(shlex.quote(m) for m in modules)
    return "\n".join(
        [
            "#!/bin/sh",
            f"echo '{STARTED}'",
            f"modprobe -a {mods} || echo 'vm-run: warning: modprobe failed' >&2",
            "export RDMA_CNI_IN_VM=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1",
            "export HYPOTHESIS_STORAGE_DIRECTORY=/tmp/hypothesis",
            f"cd {shlex.quote(str(REPO))} || exit 125",
            command,
            "rc=$?",
            f"echo $rc > {shlex.quote(status_file)}",
            "sync 2>/dev/null",
            f'echo "{SENTINEL}$rc@@"',
            "",
        ]
    )


def names_target(args: Sequence[str], repo: Path = REPO) -> bool:
    """Whether the pytest args name a test path (else the runner adds tests/vm)."""
    return any(not a.startswith("-") and (repo / a.split("::")[0]).exists() for a in args)


def pytest_command(python: str, args: Sequence[str], repo: Path = REPO) -> str:
    """pytest inside the guest; collecting only tests/vm keeps emulated startup short."""
    base = [python, "-m", "pytest", "-p", "no:cacheprovider", "-m", "vm"]
    target = [] if names_target(args, repo) else ["tests/vm"]
    return shlex.join([*base, *args, *target])


def vng_command(cfg: VmConfig, guest_cmd: str) -> list[str]:
    cmd = [
        cfg.vng,
        "--force-9p",
        "--run",
        cfg.kernel,
        f"--rodir=/usr/lib/udev/rules.d={cfg.udev_rules}",
        f"--rwdir={cfg.run_dir}",
        "--network",
        "loop",
        "--no-dhcp",
        "--memory",
        cfg.memory,
        "--cpus",
        str(cfg.cpus),
        "--cwd",
        cfg.repo,
    ]
    for d in cfg.extra_rwdirs:
        cmd.append(f"--rwdir={d}")
    if not cfg.use_kvm:
        cmd.append("--disable-kvm")
    return [*cmd, "--exec", guest_cmd]


def parse_status(status_text: str | None, output_tail: str) -> int | None:
    """Guest exit status: the status file first, else the last sentinel line."""
    if status_text is not None and status_text.strip().isdigit():
        return int(status_text.strip())
    found = SENTINEL_RE.findall(output_tail)
    return int(found[-1]) if found else None


# --- side effects below -------------------------------------------------------


def find_vng() -> str:
    for cand in (Path(sys.executable).parent / "vng", REPO / ".venv" / "bin" / "vng"):
        if cand.exists():
            return str(cand)
    found = shutil.which("vng")
    if found is None:
        raise RuntimeError("vng (virtme-ng) not found: pip install virtme-ng into .venv")
    return found


def kernel_stamp(work: Path) -> Path:
    """The file naming the guest kernel's image (written by scripts/vm-prepare.sh)."""
    return work / ("kernel" if os.environ.get("RDMA_CNI_VM_KERNEL") else f"kernel-{NEXT_RELEASE}")


def needs_prepare(work: Path) -> bool:
    stamp = kernel_stamp(work)
    if not stamp.is_file() or not Path(stamp.read_text().strip()).is_file():
        return True
    if not (work / "udev-rules").is_dir():
        return True
    return any(shutil.which(b) is None for b in ("qemu-system-x86_64", "udevadm", "busybox"))


def prepare(work: Path) -> str:
    """Run scripts/vm-prepare.sh when something is missing; return the kernel image path."""
    if needs_prepare(work):
        env = {**os.environ, "RDMA_CNI_VM_DIR": str(work)}
        subprocess.run([str(REPO / "scripts" / "vm-prepare.sh")], check=True, env=env)
    return kernel_stamp(work).read_text().strip()


def kill_group(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """Stop the process group we started (its leader is proc.pid), TERM then KILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


class _Pump(threading.Thread):
    """Copy the VM's output to our stdout live, keeping a tail for the sentinel."""

    def __init__(self, stream: IO[bytes], out: IO[bytes]) -> None:
        super().__init__(daemon=True)
        self.stream, self.out, self.tail = stream, out, b""
        self.started = False

    def run(self) -> None:
        for chunk in iter(lambda: self.stream.read1(4096), b""):  # type: ignore[attr-defined]
            self.out.write(chunk)
            self.out.flush()
            self.started = self.started or STARTED.encode() in self.tail[-64:] + chunk
            self.tail = (self.tail + chunk)[-8192:]


@dataclass
class Outcome:
    """One boot's end: the guest's status (or 124/125) and whether its script ran."""

    status: int
    guest_ran: bool = True


def run_vm(cmd: list[str], timeout: float, status_file: Path) -> int:
    """Boot, stream output, enforce the deadline, never leave the VM behind."""
    return boot(cmd, timeout, status_file).status


def run_vm_retrying(cmd: list[str], timeout: float, status_file: Path) -> int:
    """A boot that stops before the guest script ran (an early kernel panic under
    emulation, qemu gone) is an infrastructure failure: boot once more, with the
    kernel's console shown, so that a second one says why."""
    started = time.monotonic()
    first = boot(cmd, timeout, status_file)
    if first.guest_ran or first.status == EXIT_TIMEOUT:
        return first.status
    print(
        "vm-run: the VM stopped before the guest ran; booting once more with the "
        "kernel's console shown",
        file=sys.stderr,
    )
    verbose = [cmd[0], "--verbose", *cmd[1:]]
    return boot(verbose, max(timeout - (time.monotonic() - started), 1.0), status_file).status


def boot(cmd: list[str], timeout: float, status_file: Path) -> Outcome:
    """One boot: stream output, enforce the deadline, never leave the VM behind."""
    env = {**os.environ, "PATH": f"{Path(cmd[0]).parent}:{os.environ.get('PATH', '')}"}
    # qemu reopens stdout/stderr: a pipe is the only safe target (files get clobbered).
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    assert proc.stdout is not None
    pump = _Pump(proc.stdout, sys.stdout.buffer)
    pump.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        print(
            f"vm-run: timed out after {timeout:.0f}s; stopping VM (pid {proc.pid})", file=sys.stderr
        )
        return Outcome(EXIT_TIMEOUT)
    finally:
        kill_group(proc)
        pump.join(timeout=5)
    text = status_file.read_text() if status_file.exists() else None
    status = parse_status(text, pump.tail.decode(errors="replace"))
    if status is None:
        print(f"vm-run: the VM reported no status (vng exit {proc.returncode})", file=sys.stderr)
        return Outcome(EXIT_INFRA, pump.started)
    return Outcome(status)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        prog="vm-run",
        description=__doc__,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get("RDMA_CNI_VM_TIMEOUT", DEFAULT_TIMEOUT)),
        help="overall deadline in seconds (env RDMA_CNI_VM_TIMEOUT; default 2700)",
    )
    p.add_argument("--exec", dest="command", help="run this sh command instead of pytest")
    p.add_argument("--memory", default=os.environ.get("RDMA_CNI_VM_MEMORY", "2G"))
    p.add_argument("--cpus", type=int, default=int(os.environ.get("RDMA_CNI_VM_CPUS", "2")))
    p.add_argument("--rwdir", action="append", default=[], help="extra writable host dir")
    p.add_argument("--dry-run", action="store_true", help="print the vng command and exit")
    return p.parse_known_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    opts, rest = parse_args(sys.argv[1:] if argv is None else argv)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    work = work_dir()
    try:
        kernel = prepare(work)
        vng = find_vng()
    except (subprocess.CalledProcessError, RuntimeError, OSError) as exc:
        print(f"vm-run: cannot prepare the VM: {exc}", file=sys.stderr)
        return EXIT_INFRA
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    try:
        status_file = run_dir / "status"
        command = opts.command or pytest_command(guest_python(), rest)
        (run_dir / "guest.sh").write_text(guest_script(command, str(status_file)))
        cfg = VmConfig(
            vng=vng,
            kernel=kernel,
            udev_rules=str(work / "udev-rules"),
            run_dir=str(run_dir),
            repo=str(REPO),
            use_kvm=kvm_usable(),
            memory=opts.memory,
            cpus=opts.cpus,
            extra_rwdirs=opts.rwdir,
        )
        cmd = vng_command(cfg, f"sh {shlex.quote(str(run_dir / 'guest.sh'))}")
        if opts.dry_run:
            print(shlex.join(cmd))
            return 0
        started = time.monotonic()
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            status = run_vm_retrying(cmd, opts.timeout, status_file)
        except KeyboardInterrupt:
            print("vm-run: interrupted; VM stopped", file=sys.stderr)
            return 130
        print(
            f"vm-run: exit {status} after {time.monotonic() - started:.1f}s "
            f"(kvm={'on' if cfg.use_kvm else 'off'})",
            file=sys.stderr,
        )
        return status
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
