"""The tests' CRI v1 messages (runtime.v1, tests/support/cri.proto), generated at run
time: the client side of a real containerd (tests/e2e, tests/node)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

PROTO = Path(__file__).resolve().parent / "cri.proto"


def load_cri(out_dir: Path, proto: Path = PROTO) -> ModuleType:
    """``<proto>_pb2`` generated from ``proto`` into ``out_dir`` (grpc_tools.protoc)."""
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{proto.parent}",
                    f"--python_out={out_dir}", str(proto)], check=True)
    sys.path.insert(0, str(out_dir))
    try:
        return importlib.import_module(proto.stem + "_pb2")
    finally:
        sys.path.remove(str(out_dir))
