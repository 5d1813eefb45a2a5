"""Logging handlers: the log file (``logFile``) and warnings on stderr. Never stdout.
Imported only when something is logged (see :mod:`rdma_cni.log`).

Every line is escaped (:func:`rdma_cni.errors.escaped`): a newline, a carriage return
or a terminal escape in a key, a value or a path from a pod author or the runtime shows
as ``\\x0a``, ``\\x0d``, ``\\x1b`` and can never forge a line. A traceback (file only)
is indented under its record, each of its lines escaped the same way. With
``logFormat: json`` each line is one JSON object instead (:class:`JsonLines`).

The file records pod names, namespaces and addresses: it is created 0600 whatever the
umask, and an existing one loses any permission for others (``LOG_MODE``).

Many processes write one file (every exec of the plugin, each ``serve`` process), so
Python's ``RotatingFileHandler``, which supports one writer, is not used:
:class:`SharedFile` appends each line with one ``write`` to an ``O_APPEND`` descriptor,
reopens the path when another process (or logrotate, by rename) has replaced the file,
and rotates under an exclusive ``flock`` of the file it has open, only if the path
still names that file. A line written to the old file before a writer notices lands in
the rotated ``.1``: no line is lost. logrotate with ``copytruncate`` works too.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import stat
import sys
import threading
import time
from typing import Any

from rdma_cni.confdefaults import DEFAULTS
from rdma_cni.errors import escaped, shown

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}
MAX_BYTES = 5 * 1024 * 1024
BACKUPS = 2
_FORMAT = "%(asctime)s %(process)d %(levelname)s %(message)s"
#: mode of a log file the plugin creates (group and others get nothing)
LOG_MODE = 0o600


class _Escaping(logging.Formatter):
    """One line per record, its message escaped; a traceback indented below it."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = escaped(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    return "\n".join("    " + escaped(line) for line in text.splitlines())


class JsonLines(logging.Formatter):
    """``logFormat: json``: one JSON object per line for log collectors: ``time`` (UTC,
    RFC 3339 with ms), ``pid``, ``level``, ``msg``, and ``exc`` with a traceback. JSON's
    own escaping keeps every record on one line."""

    def format(self, record: logging.LogRecord) -> str:
        t = time.gmtime(record.created)
        doc: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z",
            "pid": record.process, "level": record.levelname.lower(),
            "msg": record.getMessage()}
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=True)


class _Brief(_Escaping):
    """One line per record: tracebacks go to the log file only, never to stderr."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


def formatter(fmt: str, log_format: object = "text") -> logging.Formatter:
    return JsonLines() if log_format == "json" else _Escaping(fmt)


#: the test seam of :func:`default_file` (listed with the others in rdma_cni/testhooks.py)
TEST_LOG_FILE = "RDMA_CNI_TEST_LOG_FILE"


def default_file() -> str:
    """``logFile`` for a config that names none or cannot be read: the node's log, or the
    file a test names in ``RDMA_CNI_TEST_LOG_FILE`` (rdma_cni/testhooks.py)."""
    return os.environ.get(TEST_LOG_FILE) or DEFAULTS["logFile"]


def setup(conf: dict[str, Any] | None = None, stderr_level: int = logging.WARNING) -> None:
    """Configure the ``rdma_cni`` logger from a raw config dict (tolerates bad values)."""
    conf = conf or {}
    logger = logging.getLogger("rdma_cni")
    logger.handlers.clear()
    logger.propagate = False
    level = _LEVELS.get(str(conf.get("logLevel", DEFAULTS["logLevel"])).lower(), logging.INFO)
    logger.setLevel(min(level, stderr_level))
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(stderr_level)
    err.setFormatter(_Brief("rdma-cni: %(levelname)s %(message)s"))
    logger.addHandler(err)
    path = conf.get("logFile", default_file())
    if isinstance(path, str) and path:
        _add_file(logger, path, level, conf.get("logFormat", DEFAULTS["logFormat"]))


class SharedFile(logging.Handler):
    """A log file many processes append to, rotated by whichever writer finds it full
    (see the module's docstring). ``max_bytes`` 0: never rotated here (logrotate)."""

    def __init__(self, path: str, max_bytes: int = MAX_BYTES, backups: int = BACKUPS) -> None:
        super().__init__()
        self.path, self.max_bytes, self.backups = path, max_bytes, backups
        self._fd = -1
        self._io = threading.Lock()
        self._open()

    def _open(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                     LOG_MODE)
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o007:
            os.fchmod(fd, mode & ~0o007)
        old, self._fd = self._fd, fd
        if old >= 0:
            os.close(old)

    def is_stdout(self) -> bool:
        """The file open is the one fd 1 names."""
        try:
            out = os.fstat(1)
        except OSError:  # fd 1 closed
            return False
        own = os.fstat(self._fd)
        return (own.st_dev, own.st_ino) == (out.st_dev, out.st_ino)

    def _moved(self) -> bool:
        """The path no longer names the file this process has open."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return True
        own = os.fstat(self._fd)
        return (st.st_dev, st.st_ino) != (own.st_dev, own.st_ino)

    def _rotate(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            if not self._moved() and os.fstat(self._fd).st_size >= self.max_bytes:
                for i in range(self.backups - 1, 0, -1):
                    with contextlib.suppress(FileNotFoundError):
                        os.rename(f"{self.path}.{i}", f"{self.path}.{i + 1}")
                os.rename(self.path, f"{self.path}.1")
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
            with self._io:
                if self._moved():
                    self._open()
                if self.max_bytes and os.fstat(self._fd).st_size + len(line) > self.max_bytes:
                    self._rotate()
                    self._open()
                os.write(self._fd, line)
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        with self._io:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        super().close()


def daemon(fmt: str, level: int = logging.INFO, log_format: object = "text") -> None:
    """Logging of a long-running subcommand (agent, device plugin, exporter): stderr
    only, every line escaped like the plugin's (or JSON lines)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt, log_format))
    logging.basicConfig(level=level, handlers=[handler])


def open_file(path: str, level: int, log_format: object = "text") -> SharedFile | None:
    """The log file handler for ``path``; None (the reason logged) when it cannot be opened,
    and when it is this process's stdout (``/dev/stdout``, ``/proc/self/fd/1``, the file
    stdout is redirected to): the answer's one document must be all there is on it."""
    try:
        handler = SharedFile(path)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        logging.getLogger("rdma_cni").debug("cannot open log file %s: %s", path, exc)
        return None
    if handler.is_stdout():
        handler.close()
        _say_once(f"rdma-cni: logFile {shown(path, 256)} is stdout, where the answer goes: "
                  "nothing is logged there (warnings still go to stderr)\n")
        return None
    handler.setLevel(level)
    handler.setFormatter(formatter(_FORMAT, log_format))
    return handler


_said: set[str] = set()


def _say_once(text: str) -> None:
    """``text`` on stderr, once per process."""
    if text not in _said:
        _said.add(text)
        with contextlib.suppress(OSError, ValueError, AttributeError):  # None: fd 2 closed
            sys.stderr.write(text)
            sys.stderr.flush()


def _add_file(logger: logging.Logger, path: str, level: int, log_format: object) -> None:
    handler = open_file(path, level, log_format)
    if handler is not None:
        logger.addHandler(handler)


def level_of(name: object) -> int:
    return _LEVELS.get(str(name).lower(), logging.INFO)
