"""Reading the plugin's stdout as libcni reads it: Go's encoding/json has no ``NaN`` or
``Infinity``, which Python's parser takes by default."""

from __future__ import annotations

import json
from typing import Any


def _not_json(name: str) -> Any:
    raise AssertionError(f"stdout holds {name}, which is not JSON")


#: a decoder that fails the test on ``NaN``, ``Infinity`` and ``-Infinity``
STRICT = json.JSONDecoder(parse_constant=_not_json)
