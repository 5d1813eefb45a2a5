"""The one error family of rdma-cni, and the CNI codes it maps to.

Every failure the plugin reports is a :class:`CniError` (or a subclass). The
dispatcher is the only place that turns exceptions into the CNI error document;
anything that is not a ``CniError`` becomes an I/O error (code 5) there, with the
traceback in the log only.

Messages name the action, the object and the cause, e.g.
``failed to move eth3 into /var/run/netns/x: device busy``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import re


class Code(IntEnum):
    # CNI spec codes
    INCOMPATIBLE_VERSION = 1
    UNSUPPORTED_FIELD = 2
    UNKNOWN_CONTAINER = 3
    INVALID_ENV = 4
    IO_FAILURE = 5
    DECODE_FAILURE = 6
    INVALID_CONFIG = 7
    TRY_AGAIN_LATER = 11
    NOT_AVAILABLE = 50
    LIMITED_CONNECTIVITY = 51
    # Plugin codes (DESIGN.md section 8)
    NIC_NETMASK = 100
    NO_ALLOCATION = 101
    NO_ADDRESS = 102
    IFNAME_IN_USE = 103
    NIC_UNAVAILABLE = 104
    CHECK_MISMATCH = 105
    TOO_MANY_INTERFACES = 106


class CniError(Exception):
    """An error reported to the runtime as a CNI error document."""

    code: Code = Code.IO_FAILURE

    def __init__(self, msg: str, details: str = "", *, code: Code | int | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.details = details
        if code is not None:
            self.code = Code(code)

    def __str__(self) -> str:
        return self.msg


class VersionError(CniError):
    code = Code.INCOMPATIBLE_VERSION


class UnsupportedField(CniError):
    code = Code.UNSUPPORTED_FIELD


class EnvError(CniError):
    code = Code.INVALID_ENV


class IOFailure(CniError):
    code = Code.IO_FAILURE


class DecodeError(CniError):
    code = Code.DECODE_FAILURE


class ConfigError(CniError):
    code = Code.INVALID_CONFIG


class TryAgain(CniError):
    code = Code.TRY_AGAIN_LATER


class SourceSilent(TryAgain):
    """A source of the pod's allocation that gave no answer (not listening, past its
    deadline): the next source may answer instead."""


class StatusError(CniError):
    code = Code.NOT_AVAILABLE


class NetmaskError(CniError):
    code = Code.NIC_NETMASK


class AllocationError(CniError):
    code = Code.NO_ALLOCATION


class AddressError(CniError):
    code = Code.NO_ADDRESS


class IfNameInUse(CniError):
    code = Code.IFNAME_IN_USE


class NicUnavailable(CniError):
    code = Code.NIC_UNAVAILABLE


class CheckMismatch(CniError):
    code = Code.CHECK_MISMATCH


class TooManyInterfaces(CniError):
    code = Code.TOO_MANY_INTERFACES


def shown(value: object, limit: int = 64) -> str:
    """A value from the input as a message shows it: JSON-quoted (control characters
    escaped, never a Python repr or ``None``), cut at ``limit`` characters."""
    import json

    if value is None:
        return "(missing)"
    try:
        text = json.dumps(value, ensure_ascii=True, sort_keys=True)
    except (TypeError, ValueError):
        text = json.dumps(str(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


_UNSAFE: re.Pattern[str] | None = None  # compiled on first use: this module is on every exec


def escaped(text: str) -> str:
    """``text`` with every character that could end, rewrite or hide a log line shown as
    an escape (``\\x0a``, ``\\u2028``): C0 and C1 controls, DEL, the Unicode line and
    paragraph separators, lone surrogates (undecodable bytes of the environment), and
    every format character (Unicode's ``Cf``: what reorders or hides what a terminal
    shows: the bidirectional controls, an override turning the rest of a line around,
    zero-width characters, the byte-order mark, the soft hyphen, tag characters).
    What the plugin logs or writes to stderr passes through it, so a key, a value or a
    path from a pod author or the runtime can never forge a line."""
    global _UNSAFE
    if _UNSAFE is None:
        import re

        _UNSAFE = re.compile(  # Cc, Zl, Zp, Cs and every Cf character of Unicode 14
            "[\x00-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891"
            "\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
            "\ufff9-\ufffb\ud800-\udfff\U000110bd\U000110cd\U00013430-\U00013438"
            "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")
    return _UNSAFE.sub(_escape_one, text)


def clipped(text: str, limit: int) -> str:
    """``text`` as a message or an error document may show it: :func:`escaped`, then
    cut at ``limit`` characters (a value from the input is never trusted to be short)."""
    text = escaped(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _escape_one(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
