"""Framing of the resident protocol (pure; stdlib only, on the exec path).

Request:  u32 header length, header JSON {"v":1,"env":{...}}, u32 stdin length, stdin.
          Ancillary SCM_RIGHTS: [client netns fd, pod netns fd (when CNI_NETNS opened)].
Reply:    u32 length, JSON {"exit": int, "stdout": str, "stderr": str} or {"refuse": reason}.
"""

from __future__ import annotations

import json
import struct
from typing import Any

VERSION = 1
MAX_FRAME = 2 << 20
_LEN = struct.Struct("=I")
DEFAULT_SOCKET = "/run/rdma-cni/rdma-cni.sock"
#: the environment a request carries (nothing else of the client's is forwarded)
FORWARDED = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS",
             "CNI_PATH")


def encode_request(env: dict[str, str], stdin: bytes) -> bytes:
    header = json.dumps({"v": VERSION, "env": env}).encode()
    return _LEN.pack(len(header)) + header + _LEN.pack(len(stdin)) + stdin


def decode_request(data: bytes) -> tuple[dict[str, str], bytes]:
    (hlen,) = _LEN.unpack_from(data, 0)
    header = json.loads(data[4:4 + hlen])
    (slen,) = _LEN.unpack_from(data, 4 + hlen)
    stdin = data[8 + hlen: 8 + hlen + slen]
    if header.get("v") != VERSION or len(stdin) != slen:
        raise ValueError("bad resident request frame")
    env = header.get("env")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ValueError("bad resident request environment")
    return {k: v for k, v in env.items() if k in FORWARDED}, stdin


def request_size(prefix: bytes) -> int | None:
    """Total frame size once the first 4 + hlen + 4 bytes are known, else None."""
    if len(prefix) < 4:
        return None
    (hlen,) = _LEN.unpack_from(prefix, 0)
    if len(prefix) < 8 + hlen:
        return None
    (slen,) = _LEN.unpack_from(prefix, 4 + hlen)
    return 8 + hlen + slen


def encode_reply(doc: dict[str, Any]) -> bytes:
    body = json.dumps(doc).encode()
    return _LEN.pack(len(body)) + body


def reply_size(prefix: bytes) -> int | None:
    if len(prefix) < 4:
        return None
    return 4 + _LEN.unpack_from(prefix, 0)[0]


def decode_reply(data: bytes) -> dict[str, Any]:
    doc = json.loads(data[4:])
    if not isinstance(doc, dict):
        raise ValueError("bad resident reply")
    return doc
