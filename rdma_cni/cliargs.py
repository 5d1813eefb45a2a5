"""The command line every subcommand shares (README "Command line").

One parser class: ``--help`` describes every option and the exit codes,
``--version`` prints the version and the git commit of the build, ``--config FILE``
means the plugin's conflist entry everywhere, and a usage error is one line on
stderr with exit code 2 (argparse prints the whole usage block by default).

Kept light: it runs on the subcommands' start-up path, never on the CNI one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from rdma_cni import __version__

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EPILOG = "exit codes: 0 ok, 1 failure (one line on stderr says what to fix), 2 usage error"
CONFIG_HELP = ("JSON object shaped like the plugin's conflist entry (default: the rdma-cni "
               "entry of the first CNI config in /etc/cni/net.d)")
COMMIT_FILE = "BUILD_COMMIT"  # written by scripts/build.sh next to this module
VERSIONS_FILE = "BUILD_VERSIONS"  # written into each bundle by scripts/bundle_versions.py


def seconds(low: float, high: float) -> Callable[[str], float]:
    """An option's type: a number of seconds from ``low`` to ``high`` (a NaN, an infinity,
    0 for a poll period: a usage error, not a busy loop or a traceback later)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected seconds from {low:g} to {high:g}, got {json.dumps(text)}")
        return value
    return parse


def say(msg: str, cmd: str = "install") -> None:
    """A subcommand's one-line message on stderr (install's progress, ``--watch``)."""
    sys.stderr.write(f"rdma-cni {cmd}: {msg}\n")
    sys.stderr.flush()


def commit() -> str:
    """The git commit the build was made from; ``unknown`` outside a git checkout."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), COMMIT_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            value = f.read(100).strip()
    except OSError:
        return "unknown"
    return value if value and value.replace("-", "").isalnum() else "unknown"


def version_text(verbose: bool = False) -> str:
    """``rdma-cni X (commit C)``; ``verbose``: also what the build bundled, one line each
    (scripts/bundle_versions.py records it beside this module)."""
    head = f"rdma-cni {__version__} (commit {commit()})"
    if not verbose:
        return head
    import json

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), VERSIONS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            built = json.load(f)
        lines = [f"python {built['python']}", f"c library {built['c_library']}"]
        lines += [f"{name} {ver}" for name, ver in built["packages"].items()]
        lines += [f"debian {name} {ver}" for name, ver in built.get("debian", {}).items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        lines = ["bundled versions: not recorded (not a build of ./scripts/build.sh)"]
    return "\n".join([head, *lines])


class Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error naming the fix, exit code 2."""

    def error(self, message: str) -> NoReturn:
        import re

        message = re.sub(r"'([^'\\]*)'", r'"\1"', message)  # argparse quotes with repr
        sys.stderr.write(f"{self.prog}: {' '.join(message.split())} "
                         f"(see `{self.prog} --help`)\n")
        sys.exit(EXIT_USAGE)


def parser(prog: str, description: str, *, config: bool = True,
           config_help: str = CONFIG_HELP, log_format: bool = False) -> Parser:
    """A subcommand's parser with ``--version``, (unless ``config`` is False)
    ``--config`` and (with ``log_format``, the long-running ones) ``--log-format``."""
    p = Parser(prog=prog, description=description, epilog=EPILOG)
    p.add_argument("--version", action="version", version=version_text(),
                   help="print the version and the git commit of the build, then exit")
    if config:
        p.add_argument("--config", metavar="FILE", help=config_help)
    if log_format:
        p.add_argument("--log-format", choices=("text", "json"), default="text",
                       help="log lines on stderr as text or as JSON objects (default text)")
    return p


def fail(prog: str, message: str, as_json: bool = False) -> int:
    """Report a failure: one line on stderr; with ``--json`` also ``{"error": ...}`` on
    stdout, so a JSON consumer still gets JSON. Returns the exit code 1."""
    line = " ".join(message.split())
    if as_json:
        import json

        sys.stdout.write(json.dumps({"error": line}) + "\n")
    sys.stderr.write(f"{prog}: {line}\n")
    return EXIT_FAILURE
