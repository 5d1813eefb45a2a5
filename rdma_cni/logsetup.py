"""Logging handlers: a size-capped file (``logFile``) and warnings on stderr. Never
stdout. Imported only when something is logged (see :mod:`rdma_cni.log`).

Every line is escaped (:func:`rdma_cni.errors.escaped`): a newline, a carriage return
or a terminal escape in a key, a value or a path from a pod author or the runtime shows
as ``\\x0a``, ``\\x0d``, ``\\x1b`` and can never forge a line. A traceback (file only)
is indented under its record, each of its lines escaped the same way.

The file records pod names, namespaces and addresses: it is created 0600 whatever the
umask, and an existing one loses any permission for others (``LOG_MODE``).
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from logging.handlers import RotatingFileHandler
from typing import Any

from rdma_cni.errors import escaped

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


class _Brief(_Escaping):
    """One line per record: tracebacks go to the log file only, never to stderr."""

    def format(self, record: logging.LogRecord) -> str:
        saved = record.exc_info, record.exc_text, record.stack_info
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved


def setup(conf: dict[str, Any] | None = None, stderr_level: int = logging.WARNING) -> None:
    """Configure the ``rdma_cni`` logger from a raw config dict (tolerates bad values)."""
    conf = conf or {}
    logger = logging.getLogger("rdma_cni")
    logger.handlers.clear()
    logger.propagate = False
    level = _LEVELS.get(str(conf.get("logLevel", "info")).lower(), logging.INFO)
    logger.setLevel(min(level, stderr_level))
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(stderr_level)
    err.setFormatter(_Brief("rdma-cni: %(levelname)s %(message)s"))
    logger.addHandler(err)
    path = conf.get("logFile", "/var/log/rdma-cni.log")
    if isinstance(path, str) and path:
        _add_file(logger, path, level)


class _PrivateFile(RotatingFileHandler):
    """A rotating file created ``LOG_MODE`` (rotation's new files too), whatever the
    umask; an existing file readable or writable by others loses those bits."""

    def _open(self) -> Any:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        fd = os.open(self.baseFilename, flags, LOG_MODE)
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            if mode & 0o007:
                os.fchmod(fd, mode & ~0o007)
            return os.fdopen(fd, "a", encoding=self.encoding or "utf-8", errors=self.errors)
        except BaseException:
            os.close(fd)
            raise


def daemon(fmt: str, level: int = logging.INFO) -> None:
    """Logging of a long-running subcommand (agent, device plugin, exporter): stderr
    only, every line escaped like the plugin's."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Escaping(fmt))
    logging.basicConfig(level=level, handlers=[handler])


def _add_file(logger: logging.Logger, path: str, level: int) -> None:
    try:
        handler = _PrivateFile(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, delay=False,
                               errors="backslashreplace")
    except OSError as exc:
        logger.debug("cannot open log file %s: %s", path, exc)
        return
    handler.setLevel(level)
    handler.setFormatter(_Escaping(_FORMAT))
    logger.addHandler(handler)
