"""The node image as built (scripts/image.sh) carries what `rdma-cni verify` needs, checked
in one ``podman run`` of it: the bundle imports pyverbs (verify gets past its pyverbs check
to the peer connection, which nothing answers: without pyverbs it stops at "pyverbs is not
usable"), and libibverbs finds the Soft-RoCE provider: ``/etc/libibverbs.d/rxe.driver``
names ``rxe``, and ``librxe-rdmav<N>.so`` is in the provider dir, ``N`` the provider ABI
of the bundle's libibverbs (its ``IBVERBS_PRIVATE_<N>`` symbol version)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from podman import Podman

pytestmark = [pytest.mark.root, pytest.mark.node]
LIBIBVERBS = "/opt/rdma-cni/_internal/libibverbs.so.1"  # the bundle's, which pyverbs loads
PROBE = "\necho ---\n".join([
    "cat /etc/libibverbs.d/rxe.driver",
    f"grep -ao 'IBVERBS_PRIVATE_[0-9]*' {LIBIBVERBS} | sort -u",
    "ls /usr/lib/*/libibverbs/librxe-rdmav*.so",
    # lo is a "rail" with an address; nothing listens on 127.0.0.1:9
    "rdma-cni verify --ifaces lo --peer 127.0.0.1 --port 9 --timeout 1 --json",
])


def test_the_image_carries_pyverbs_and_the_rxe_provider(image_rig: dict[str, Any]) -> None:
    podman: Podman = image_rig["podman"]
    out = podman.run("run", "--rm", "--network", "none", image_rig["image"], "sh", "-c",
                     PROBE, check=False, timeout=120)
    shown = f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    driver, abi, providers, verify = out.stdout.split("---\n")
    assert driver.split() == ["driver", "rxe"], shown
    (version,) = re.findall(r"^IBVERBS_PRIVATE_(\d+)$", abi, re.M) or [None]
    assert version is not None, shown
    assert f"librxe-rdmav{version}.so" in [Path(p).name for p in providers.split()], shown
    assert out.returncode == 1 and json.loads(verify) == {
        "error": "failed to connect to the peer 127.0.0.1:9: [Errno 111] Connection refused"
    }, shown
