"""Logging handlers: a size-capped file (``logFile``) and warnings on stderr. Never
stdout. Imported only when something is logged (see :mod:`rdma_cni.log`)."""

from __future__ import annotations

import logging
import sys
from typing import Any

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}
MAX_BYTES = 5 * 1024 * 1024
BACKUPS = 2
_FORMAT = "%(asctime)s %(process)d %(levelname)s %(message)s"


class _Brief(logging.Formatter):
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


def _add_file(logger: logging.Logger, path: str, level: int) -> None:
    from logging.handlers import RotatingFileHandler

    try:
        handler = RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, delay=False)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        logger.debug("cannot open log file %s: %s", path, exc)
        return
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger.addHandler(handler)
