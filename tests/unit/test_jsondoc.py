"""Bounded JSON decoding shared by the store, the config readers and the annotation."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdma_cni import jsondoc
from rdma_cni.errors import ConfigError
from rdma_cni.models.subconfig import read_json_object
from rdma_cni.store import files


@pytest.mark.parametrize(("raw", "reason"), [
    (b'{"a": 1}' + b" " * 100, "larger than 100 bytes"),
    (b"\xff\xfe", "not valid JSON"),
    (b"{", "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    (b"[1]", "wanted an object"),
])
def test_refusals_name_the_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(jsondoc.JsonRefused, match=reason):
        jsondoc.decode(raw, 100 if len(raw) > 100 and raw.startswith(b"{") else 1 << 21,
                       dict, "wanted an object")


def test_a_str_is_measured_in_utf8_bytes() -> None:
    assert jsondoc.decode('["é"]', 6, list) == ["é"]  # 6 bytes, 5 characters
    with pytest.raises(jsondoc.JsonRefused, match="larger than 5 bytes"):
        jsondoc.decode('["é"]', 5, list)


def test_deep_nesting_in_a_config_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.conflist"
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_json_object(str(path))


def test_deep_nesting_in_a_record_reads_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "rec.json"
    path.write_bytes(b"{\"a\":" * 50_000 + b"1" + b"}" * 50_000)
    with pytest.raises(files.Corrupt, match="record not valid JSON"):
        files.read_record(str(path))
