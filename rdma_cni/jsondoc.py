"""Bounded JSON decoding: where bytes from a file or a pod author become a JSON value.

One rule set for every reader (records, config files, the pod annotation): a size
limit checked before parsing, undecodable bytes, invalid JSON and nesting too deep
for the parser all read as one :class:`JsonRefused` with a short reason, and the
top-level type is checked. So do numbers JSON has not got: Python's parser takes
``NaN`` and ``Infinity`` and reads ``1e999`` as infinite, and what is read here may be
written out again (a prevResult in the result), where ``json.dumps`` would print them
as no JSON parser reads them. Stdlib only: DEL and the pass-through path use it.
"""

from __future__ import annotations

import json
from typing import Any


def copied(doc: Any) -> Any:
    """A deep copy of a JSON value (what ``decode`` gives, or built of the same types)
    by json's C codec, several times faster than ``copy.deepcopy``; a value that is not
    plain JSON is copied by ``copy.deepcopy``."""
    try:
        return json.loads(json.dumps(doc))
    except (TypeError, ValueError, RecursionError):
        import copy

        return copy.deepcopy(doc)


class JsonRefused(ValueError):  # noqa: N818 - a reason, wrapped by each caller's error
    """Why a document was refused; ``str()`` is a short reason for a message."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value - value != 0.0:  # inf or nan
        raise ValueError(f"{text[:40]} is out of range for a number")
    return value


#: the C scanner with both hooks (made once: ``json.loads`` with them builds one per call)
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def decode(raw: bytes | str, limit: int, expect: type,
           wrong_type: str = "not the expected JSON type") -> Any:
    """``raw`` parsed as JSON whose top level is an ``expect`` (dict or list);
    ``wrong_type`` is the reason when it is another type."""
    size = len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw)
    if size > limit:
        raise JsonRefused(f"larger than {_size(limit)}")
    try:
        text = raw if isinstance(raw, str) else raw.decode(json.detect_encoding(raw),
                                                           "surrogatepass")
        doc = _DECODER.decode(text)
    except RecursionError:
        raise JsonRefused("not valid JSON: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise JsonRefused(f"not valid JSON: {_short(e)}") from None
    if not isinstance(doc, expect):
        raise JsonRefused(wrong_type)
    return doc


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and limit % (1 << 20) == 0 else f"{limit} bytes"


def _short(e: Exception) -> str:
    text = str(e)
    return text if len(text) <= 120 else text[:117] + "..."
