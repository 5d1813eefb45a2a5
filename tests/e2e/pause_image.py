"""A local pause image for the containerd test (no registry is reachable): a tiny
static x86-64 ELF that calls pause(2) forever (the sandbox is stopped with
SIGKILL), in a one-layer OCI image layout tarball for ``ctr images import``."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile
import time

BASE = 0x400000
# loop: mov eax, 34 (pause); syscall; jmp loop
CODE = bytes.fromhex("b822000000" "0f05" "ebf7")


def pause_elf() -> bytes:
    ehsize, phsize = 64, 56
    entry = BASE + ehsize + phsize
    size = ehsize + phsize + len(CODE)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, 0x3E, 1, entry, ehsize, 0, 0,
                                 ehsize, phsize, 1, 0, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, BASE, BASE, size, size, 0x1000)
    return header + phdr + CODE


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _desc(media: str, data: bytes) -> dict[str, object]:
    return {"mediaType": media, "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
            "size": len(data)}


def oci_archive(name: str) -> bytes:
    """An OCI image layout tarball holding one image called ``name``."""
    layer = _tar({"pause": (pause_elf(), 0o755)})
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(0)),
        "config": {"Entrypoint": ["/pause"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": _desc("application/vnd.oci.image.config.v1+json", config),
        "layers": [_desc("application/vnd.oci.image.layer.v1.tar", layer)],
    }).encode()
    mdesc = _desc("application/vnd.oci.image.manifest.v1+json", manifest)
    mdesc["annotations"] = {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}
    mdesc["platform"] = {"architecture": "amd64", "os": "linux"}
    index = json.dumps({"schemaVersion": 2, "manifests": [mdesc]}).encode()
    blobs = {f"blobs/sha256/{hashlib.sha256(b).hexdigest()}": (b, 0o644)
             for b in (layer, config, manifest)}
    return _tar({"oci-layout": (b'{"imageLayoutVersion":"1.0.0"}', 0o644),
                 "index.json": (index, 0o644), **blobs})
