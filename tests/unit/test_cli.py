"""cli: the about text comes from the subcommand table, a subcommand's failure is one
line, and messages show input values without Python reprs or None."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rdma_cni import cli
from rdma_cni.errors import shown


def test_about_lists_the_table_including_new_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cli.SUBCOMMANDS, "probe", "rdma_cni.tools.probe")
    text = cli.about()
    listed = [line.split()[0] for line in text.split("subcommands:\n")[1].split("\n\n")[0]
              .splitlines()]
    assert listed == list(cli.SUBCOMMANDS)
    assert "exit codes: 0 ok, 1 failure, 2 usage error" in text


@pytest.mark.parametrize(("body", "code", "needle"), [
    ("raise RuntimeError('disk on fire\\nsecond line')", 1, "unexpected RuntimeError: disk"),
    ("from rdma_cni.errors import ConfigError\n    raise ConfigError('bad mode')", 1,
     "bad mode"),
    ("open('/nonexistent/x')", 1, "No such file or directory: /nonexistent/x"),
    ("return 3", 3, None),
])
def test_subcommand_failure_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], body: str,
                                        code: int, needle: str | None) -> None:
    (tmp_path / "fakecmd.py").write_text(f"def main(argv):\n    {body}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("fakecmd", None)
    monkeypatch.setitem(cli.SUBCOMMANDS, "fake", "fakecmd")
    assert cli.main(["fake"]) == code
    out, err = capsys.readouterr()
    assert out == ""
    if needle:
        assert err.count("\n") == 1 and err.startswith("rdma-cni fake: ") and needle in err, err
        assert "Traceback" not in err


def test_unknown_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nope\x1b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and '"nope\\u001b"' in err and "doctor" in err


def test_shown() -> None:
    assert shown(None) == "(missing)"
    assert shown("eth\n1") == '"eth\\n1"'
    assert shown(5) == "5" and shown(True) == "true"
    assert shown({"b": 1, "a": None}) == '{"a": null, "b": 1}'
    assert len(shown("x" * 500)) == 64 and shown("x" * 500).endswith("...")
    assert shown(object()).startswith('"<object')


def test_usage_errors_quote_like_json(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["agent", "--interval", "soon"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == ('rdma-cni agent: argument --interval: invalid float value: "soon" '
                   "(see `rdma-cni agent --help`)\n")


def test_config_errors_show_no_python_types_or_reprs() -> None:
    from rdma_cni.errors import ConfigError
    from rdma_cni.models.netconf import load_netconf

    for bad, needle in (({"mode": "bogus"}, 'mode: Input should be "shared"'),
                        ({"mode": "shared", "routing": None}, "routing: Input should be a "
                                                              "valid dictionary")):
        with pytest.raises(ConfigError) as exc:
            load_netconf({"cniVersion": "1.0.0", "name": "n", "type": "rdma-cni", **bad})
        assert needle in exc.value.msg and "'" not in exc.value.msg, exc.value.msg
        assert "instance of" not in exc.value.msg and "None" not in exc.value.msg
