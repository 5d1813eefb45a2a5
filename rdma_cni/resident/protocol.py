"""Framing of the resident protocol (pure; stdlib only, on the exec path).

Request:  u32 header length, header JSON {"v":3,"env":{...}}, u32 stdin length, stdin.
          Ancillary SCM_RIGHTS: [client netns fd, client root dir fd (O_PATH),
          pod netns fd (when CNI_NETNS is set)].
Reply:    u32 length, then 'A' i32 exit, u32 n, stdout bytes, u32 m, stderr bytes
          (relayed byte for byte), or 'R' and the reason of a refusal.
Integers in host byte order. Speakers: this package's client and the native front
(front/rdma-cni-front.c), which parses the same frames.

Version 3 added the root dir: the server resolves the config's store and kubelet paths
from it to prove it sees the caller's files (:mod:`rdma_cni.resident.view`). A request of
another version is refused ('R'), so a caller of either version runs it in-process.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from rdma_cni import defaults

VERSION = 3
MAX_FRAME = 2 << 20
MAX_HEADER = 64 << 10
#: the descriptors of a request, in order (the pod's netns only when CNI_NETNS is set)
FD_NETNS, FD_ROOT, FD_POD = 0, 1, 2
MAX_FDS = 3
_LEN = struct.Struct("=I")
_EXIT = struct.Struct("=i")
DEFAULT_SOCKET = defaults.RESIDENT_SOCKET
#: the environment a request carries (nothing else of the client's is forwarded)
FORWARDED = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS",
             "CNI_PATH")


def encode_request(env: dict[str, str], stdin: bytes) -> bytes:
    header = json.dumps({"v": VERSION, "env": env}).encode()
    return _LEN.pack(len(header)) + header + _LEN.pack(len(stdin)) + stdin


def decode_request(data: bytes) -> tuple[dict[str, str], bytes]:
    """The environment and stdin of a request; ValueError when the frame is malformed
    (a header nested too deeply for the decoder included), of another version, or
    carries anything but string values."""
    (hlen,) = _LEN.unpack_from(data, 0)
    if hlen > MAX_HEADER:
        raise ValueError("bad resident request frame: header too large")
    try:
        header = json.loads(data[4:4 + hlen])
    except RecursionError:
        raise ValueError("bad resident request frame: header nested too deeply") from None
    (slen,) = _LEN.unpack_from(data, 4 + hlen)
    stdin = data[8 + hlen: 8 + hlen + slen]
    if not isinstance(header, dict) or len(stdin) != slen:
        raise ValueError("bad resident request frame")
    if header.get("v") != VERSION:
        raise ValueError(f"resident protocol version {str(header.get('v'))[:8]} is not "
                         f"{VERSION}")
    env = header.get("env")
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ValueError("bad resident request environment")
    return {k: v for k, v in env.items() if k in FORWARDED}, stdin


def request_size(prefix: bytes) -> int | None:
    """Total frame size once the first 4 + hlen + 4 bytes are known, else None (a header
    longer than MAX_HEADER: MAX_FRAME + 1, which the reader refuses at once)."""
    if len(prefix) < 4:
        return None
    (hlen,) = _LEN.unpack_from(prefix, 0)
    if hlen > MAX_HEADER:
        return MAX_FRAME + 1
    if len(prefix) < 8 + hlen:
        return None
    (slen,) = _LEN.unpack_from(prefix, 4 + hlen)
    return 8 + hlen + slen


def _bytes(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def encode_reply(doc: dict[str, Any]) -> bytes:
    if "refuse" in doc:
        body = b"R" + _bytes(str(doc["refuse"]))
    else:
        out, err = _bytes(doc.get("stdout", "")), _bytes(doc.get("stderr", ""))
        body = (b"A" + _EXIT.pack(int(doc.get("exit", 1))) + _LEN.pack(len(out)) + out +
                _LEN.pack(len(err)) + err)
    return _LEN.pack(len(body)) + body


def reply_size(prefix: bytes) -> int | None:
    if len(prefix) < 4:
        return None
    return 4 + _LEN.unpack_from(prefix, 0)[0]


def decode_reply(data: bytes) -> dict[str, Any]:
    """The inverse of :func:`encode_reply` (``data`` includes the length prefix)."""
    body = data[4:]
    if body[:1] == b"R":
        return {"refuse": body[1:].decode("utf-8", "replace")}
    if len(body) < 13 or body[:1] != b"A":
        raise ValueError("bad resident reply")
    (code,) = _EXIT.unpack_from(body, 1)
    (olen,) = _LEN.unpack_from(body, 5)
    if olen > len(body) - 13:
        raise ValueError("bad resident reply")
    (elen,) = _LEN.unpack_from(body, 9 + olen)
    if elen != len(body) - 13 - olen or not 0 <= code <= 255:
        raise ValueError("bad resident reply")
    text = body[9:9 + olen].decode("utf-8", "surrogateescape")
    err = body[13 + olen:].decode("utf-8", "surrogateescape")
    return {"exit": code, "stdout": text, "stderr": err}


def relayable(command: str, reply: dict[str, Any]) -> bool:
    """Whether a caller may relay ``reply`` as the plugin's answer: a refusal never; an
    ADD success only with its result, a failure only with its error document (each one
    JSON object on stdout); other successes as they are. Anything else: in-process."""
    if "refuse" in reply:
        return False
    if reply.get("exit") == 0 and command != "ADD":
        return True
    out = str(reply.get("stdout", "")).strip()
    if not out.startswith("{"):
        return False
    try:
        return isinstance(json.loads(out), dict)
    except (ValueError, RecursionError):
        return False
