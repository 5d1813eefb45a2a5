"""Whether this process runs under a chroot (e.g. the fresh-machine rig).

There ``runc exec`` resolves the command in the chroot's filesystem instead of the
container's, so a check that execs into a running container (the node tier's checks,
the agent passes of the fault suite's agent container) cannot run; it is skipped with
that reason (on a machine itself, as in CI, it runs)."""

from __future__ import annotations

import os

import pytest

REASON = ("exec into a running container is not possible under a chroot (runc resolves "
          "the command in the chroot's filesystem); it runs on the machine itself")


#: a pod's process that hides a NIC makes a user namespace (CLONE_NEWUSER), which the
#: kernel refuses to a chrooted caller (EPERM; user_namespaces(7))
USERNS_REASON = ("a user namespace cannot be made under a chroot (the kernel refuses "
                 "CLONE_NEWUSER there); it runs on the machine itself")


def under_chroot() -> bool:
    try:
        pid1, mine = os.stat("/proc/1/root/"), os.stat("/")
    except OSError:
        return False
    return (pid1.st_dev, pid1.st_ino) != (mine.st_dev, mine.st_ino)


def skip_exec_under_chroot() -> None:
    if under_chroot():
        pytest.skip(REASON)
