"""Coverage-guided fuzzing (atheris/libFuzzer) of the parsers and the dispatcher.

Run by test_fuzz.py as ``python fuzz_atheris.py -max_total_time=T -print_final_stats=1
-artifact_prefix=DIR/ [CORPUS_DIR]``; the first input byte picks the target. An
exception other than a CniError is a crash: libFuzzer writes the input to DIR and
exits non-zero.

Every ``rdma_cni`` module is first imported inside ``instrument_imports`` (through
fuzz_targets), so libFuzzer sees the package's branches: its ``cov:`` figure counts
them, and the test requires it to grow past the seed corpus's (an uninstrumented run
reports no ``cov:`` at all and never adds a unit).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

if "rdma_cni" in sys.modules:  # already imported: its code would run uninstrumented
    raise SystemExit("fuzz_atheris: rdma_cni was imported before instrumentation")
with atheris.instrument_imports(include=["rdma_cni"]):
    import fuzz_targets

# the dispatcher logs every refused input: kept off stderr (logging's last resort)
logging.getLogger("rdma_cni").addHandler(logging.NullHandler())
logging.getLogger("rdma_cni").propagate = False

NAMES = sorted(fuzz_targets.BYTE_TARGETS)


def one(data: bytes) -> None:
    if not data:
        return
    target = fuzz_targets.BYTE_TARGETS[NAMES[data[0] % len(NAMES)]]
    fuzz_targets.guarded(target, data[1:])


SEEDS = [
    b'{"cniVersion":"0.4.0","name":"n","type":"rdma-cni","mode":"shared-multi",'
    b'"devices":["rnic0"],"ipam":{"ranges":{"198.51.100.0/24":{"rangeStart":"198.51.100.9",'
    b'"exclude":["198.51.100.20/30"]}}},"routing":{"tableBase":100},"kubelet":{}}',
    b"IgnoreUnknown=1;K8S_POD_NAMESPACE=d;K8S_POD_NAME=p;K8S_POD_UID=u",
    b'[{"cniConf":{"name":"rdma"},"deviceConf":{"ifName":"eth9","mac":"02:00:00:00:00:01",'
    b'"ips":["198.51.100.9"]}},{"cniConf":{"name":"other"}}]',
    b'{"Data":{"PodDeviceEntries":[{"PodUID":"uid-1","ContainerName":"c","ResourceName":'
    b'"vke.volcengine.com/rdma","DeviceIDs":{"0":["0000:3b:00.0@1"]}}],"RegisteredDevices":{}},'
    b'"Checksum":0}',
    b'{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"version":"4",'
    b'"address":"203.0.113.5/24","interface":0}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{}}',
    b"CNI_COMMAND=ADD\nCNI_CONTAINERID=c1\nCNI_NETNS=/var/run/netns/x\nCNI_IFNAME=eth0\n"
    b'CNI_PATH=/opt/cni/bin\nCNI_ARGS=IgnoreUnknown=1\n\n{"cniVersion":"1.1.0","name":"n",'
    b'"mode":"shared","prevResult":{"cniVersion":"1.1.0","ips":[]}}',
]


def write_seeds(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(SEEDS):
        for t in range(len(NAMES)):
            (directory / f"seed{i}-{t}").write_bytes(bytes([t]) + seed)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and not args[-1].startswith("-"):
        write_seeds(Path(args[-1]))
    atheris.Setup([sys.argv[0], *args], one)
    atheris.Fuzz()
