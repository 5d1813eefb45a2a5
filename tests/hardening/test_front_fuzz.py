"""Bounded random-input test of the native front's parsers (front/rdma-cni-front.c),
built with AddressSanitizer and UBSan: the config scans that find ``residentSocket`` and
the ``cniVersion`` of the front's own errors, and the server-reply parser, each checked
against the Python reference on the same bytes (json.loads,
rdma_cni.resident.protocol.decode_reply).

Properties: no crash or sanitizer report on any input; on every input Python parses
as a JSON object the front agrees (same socket path, or "absent", or it declines an
escaped or over-long value, which sends the request to the bundle); every reply the
front accepts Python accepts with the same exit status and lengths, and vice versa.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness import bump

from rdma_cni.cni import versions
from rdma_cni.resident import protocol

SUITE = "front-fuzz"
REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "front" / "rdma-cni-front.c"
N_INPUTS = int(os.environ.get("RDMA_CNI_FRONT_FUZZ_INPUTS", "20000"))


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    out = tmp_path_factory.mktemp("front") / "front-fuzz"
    subprocess.run(["gcc", "-O1", "-g", "-DFRONT_FUZZ", "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=all", "-o", str(out), str(SOURCE)], check=True,
                   capture_output=True, timeout=300)
    return out


def _run(driver: Path, records: list[tuple[bytes, bytes]]) -> list[str]:
    data = b"".join(k + struct.pack("=I", len(d)) + d for k, d in records)
    proc = subprocess.run([str(driver)], input=data, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == len(records)
    return lines


def _value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(9 if depth < 4 else 5)
    if pick == 0:
        return rng.choice([None, True, False, 0, -1.5e10, 7])
    if pick in (1, 2):
        return rng.choice(["", "/run/x.sock", "a\"b", "é", "\\", "/tmp/" + "x" * 120,
                           "\u2028", "/r/s.sock"])
    if pick in (3, 4):
        return rng.randrange(-10**6, 10**6)
    if pick in (5, 6):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["residentSocket", "name", "x", "resident\\Socket", "r\u00e9"]):
            _value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _config(rng: random.Random) -> bytes:
    doc = _value(rng)
    if rng.random() < 0.7:
        doc = {"cniVersion": "0.4.0", "residentSocket": _value(rng), "other": _value(rng)}
    text = json.dumps(doc, ensure_ascii=rng.random() < 0.5,
                      indent=rng.choice([None, 1])).encode()
    if rng.random() < 0.4:  # mutate: flip, cut, duplicate bytes
        b = bytearray(text)
        for _ in range(rng.randrange(1, 4)):
            op, i = rng.randrange(3), rng.randrange(len(b) + 1)
            if op == 0 and b:
                b[min(i, len(b) - 1)] = rng.randrange(256)
            elif op == 1:
                del b[i:]
            else:
                b[i:i] = b[max(0, i - 5):i]
        text = bytes(b)
    return text


def _expected_socket(text: bytes) -> tuple[int, str] | None:
    """Python's answer, or None when Python cannot parse it either."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return (-1, "")
    if "residentSocket" not in doc:
        return (0, "")
    value = doc["residentSocket"]
    if not isinstance(value, str) or len(value.encode()) >= 108:
        return (-1, "")
    return (1, value)


def test_config_scan_agrees_with_python(driver: Path) -> None:
    rng = random.Random(16)
    inputs = [_config(rng) for _ in range(N_INPUTS)]
    inputs += [b"", b"{", b"{}", b"[]", b'{"residentSocket":""}', b"{" * 5000 + b"}" * 5000,
               b'{"residentSocket":"/a","residentSocket":"/b"}', b'\xff{"a":1}']
    lines = _run(driver, [(b"S", t) for t in inputs])
    agreed = 0
    for text, line in zip(inputs, lines, strict=True):
        rc, _, hexval = line.partition(" ")
        want = _expected_socket(text)
        if want is None:
            continue
        got = (int(rc), bytes.fromhex(hexval).decode("utf-8", "replace") if hexval else "")
        # declining (-1) is always safe: the bundle then decides; a path or "absent"
        # must be exactly Python's
        assert got[0] == -1 or got == want, (text[:200], got, want)
        agreed += got == want
    assert agreed > N_INPUTS // 3
    bump(SUITE, "config inputs", len(inputs))


_VERSIONS: list[object] = [*versions.SUPPORTED, "0.2.0", "", "1.1.0 ", 7, None, "x" * 20]


def _expected_version(text: bytes) -> str | None:
    """The bundle's version for an error: the config's when supported, else the latest
    (dispatch._serve); None when Python cannot parse the config either."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    value = doc.get("cniVersion") if isinstance(doc, dict) else None
    return value if isinstance(value, str) and value in versions.SUPPORTED else versions.LATEST


def test_error_version_scan_agrees_with_python(driver: Path) -> None:
    """The front's own error document is in the config's cniVersion, read as Python
    reads it, or the latest (declining an escaped value or key is safe)."""
    rng = random.Random(29)
    inputs = []
    for _ in range(N_INPUTS):
        text = _config(rng)
        if rng.random() < 0.6:
            value = rng.choice([*_VERSIONS, "ESCAPED"])
            new = b'"0.4\\u002e0"' if value == "ESCAPED" else json.dumps(value).encode()
            text = text.replace(b'"0.4.0"', new, 1)
        inputs.append(text)
    inputs += [b"", b'{"cniVersion":"0.3.1","cniVersion":"1.0.0"}', b'{"cniVersion":"0.3.1"',
               b'{"cniVersion":"0.3.1"} x', b'{"a":{"cniVersion":"0.3.1"}}']
    lines = _run(driver, [(b"C", t) for t in inputs])
    agreed = 0
    for text, got in zip(inputs, lines, strict=True):
        assert got in versions.SUPPORTED, (text[:200], got)
        want = _expected_version(text)
        if want is None:
            continue
        assert got == want or got == versions.LATEST, (text[:200], got, want)
        agreed += got == want and want != versions.LATEST
    assert agreed > N_INPUTS // 5
    assert lines[N_INPUTS:] == ["1.1.0", "1.0.0", "1.1.0", "1.1.0", "1.1.0"]
    bump(SUITE, "version inputs", len(inputs))


def _reply(rng: random.Random) -> bytes:
    out = os.urandom(rng.randrange(50))
    err = os.urandom(rng.randrange(20))
    frame = protocol.encode_reply({"exit": rng.choice([0, 1, 7, 255]),
                                   "stdout": out.decode("latin-1"),
                                   "stderr": err.decode("latin-1")})
    body = bytearray(frame[4:])
    if rng.random() < 0.6:
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(body))
            if rng.random() < 0.5:
                body[i] = rng.randrange(256)
            else:
                del body[i:i + rng.randrange(1, 6)]
    return bytes(body)


def test_reply_parse_agrees_with_python(driver: Path) -> None:
    rng = random.Random(61)
    bodies = [_reply(rng) for _ in range(N_INPUTS)] + [b"", b"A", b"R", b"Rno", b"A" + b"\xff" * 12]
    lines = _run(driver, [(b"R", b) for b in bodies])
    for body, line in zip(bodies, lines, strict=True):
        rc, code, olen, elen = (int(x) for x in line.split())
        try:
            doc = protocol.decode_reply(struct.pack("=I", len(body)) + body)
        except (ValueError, struct.error):
            assert rc == -1, body
            continue
        if "refuse" in doc:
            assert rc == 0
        else:
            assert (rc, code) == (1, doc["exit"]), body
            assert olen + elen == len(body) - 13
    bump(SUITE, "reply inputs", len(bodies))


def _python_one_object(text: bytes) -> bool:
    """One JSON object, as libcni reads stdout (no NaN or Infinity, valid escapes)."""
    def refuse(name: str) -> Any:
        raise ValueError(name)

    try:
        doc = json.loads(text.decode("utf-8"), parse_constant=refuse)
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict)


def test_the_relay_check_agrees_with_python(driver: Path) -> None:
    """An ADD answer is relayed only when it is one JSON object (front_relayable). The
    front's check took any run of ``+-.0-9eEtrufalsn`` for a value and any escape for
    one: ``{"interfaces":tru,"ips":-}`` from a broken or foreign server went to the
    runtime as the ADD's result."""
    rng = random.Random(23)
    inputs = [_config(rng) for _ in range(N_INPUTS)]
    inputs += [b'{"cniVersion":"1.0.0","interfaces":tru,"ips":-}', b'{"code":7,"msg":nul}',
               b'{"a":01}', b'{"a":1.}', b'{"a":.5}', b'{"a":+1}', b'{"a":1e}', b'{"a":"\\x"}',
               b'{"a":"\\u12"}', b'{"a":NaN}', b'{"a":-Infinity}', b'{"a":truefalse}',
               b'{"a":-0.5e-3,"b":[true,false,null],"c":"\\u00e9\\n"}', b"{} {}", b"[]"]
    lines = _run(driver, [(b"V", t) for t in inputs])
    mismatches = [(t[:120], line) for t, line in zip(inputs, lines, strict=True)
                  if (line == "1") != _python_one_object(t)
                  and not (line == "1" and not _valid_utf8(t))]
    assert mismatches == []
    assert lines[N_INPUTS:N_INPUTS + 2] == ["0", "0"]
    bump(SUITE, "relay inputs", len(inputs))


def _valid_utf8(text: bytes) -> bool:
    """The front does not check UTF-8 (Go's encoding/json, as libcni reads stdout, takes
    invalid bytes as U+FFFD)."""
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
