"""Where ``serve`` writes a request's log lines: the file the request's own config names.

In-process, a request logs to its config's ``logFile`` at its ``logLevel`` and
``logFormat``. So does a request ``serve`` answers: its thread's records go to that file
when ``serve`` sees the caller's file there (the same walk from the caller's root and
from its own as for the data dir, :func:`rdma_cni.resident.view.identity`) and the path
is absolute (a relative one names a file under the caller's working directory, which
``serve`` does not know); otherwise,
and for everything that is not a request's, they go to ``serve``'s own log, with one
line a minute saying why. Files are opened once and kept (a few: one per network).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from rdma_cni import logsetup
from rdma_cni.confdefaults import CHOICES, DEFAULTS
from rdma_cni.resident import view

#: open request log files kept at most (one per network's config, usually one)
MAX_FILES = 8


class RequestLog(logging.Handler):
    """``serve``'s file handler: routes each record to its request's file, else ``own``."""

    def __init__(self, own: logging.Handler | None,
                 warn: Callable[[str, str], None]) -> None:
        super().__init__(logging.DEBUG)
        self.own = own
        self.warn = warn
        self.local = threading.local()
        self.files: dict[tuple[str, int, str], logging.Handler | None] = {}
        self.users: dict[logging.Handler, int] = {}  # requests writing to each file now
        self.retired: set[logging.Handler] = set()  # evicted, closed once unused
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def route(self, conf: dict[str, Any] | None, caller_root: int) -> Iterator[None]:
        """Records of this thread go to the log file of the request's config
        (:func:`rdma_cni.resident.view.decoded`) for the ``with`` block."""
        target = self.local.target = self._target(conf, caller_root)
        try:
            yield
        finally:
            self.local.target = None
            self._release(target)

    def emit(self, record: logging.LogRecord) -> None:
        target = getattr(self.local, "target", None) or self.own
        if target is not None and record.levelno >= target.level:
            target.handle(record)

    def _target(self, conf: dict[str, Any] | None,
                caller_root: int) -> logging.Handler | None:
        path, level, fmt = _settings(conf)
        if not path:
            return _Nowhere()  # "" turns the file off, as in-process
        if not path.startswith("/"):  # the caller's cwd decides which file: not ours
            self.warn(f"log:{path}", f"resident server: the request's logFile "
                      f"{json.dumps(path)} is not an absolute path: the request's lines "
                      "go to the server's log")
            return None
        try:
            own_root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                same = view.same(caller_root, own_root, path)
            finally:
                os.close(own_root)
        except (OSError, ValueError):  # ValueError: a NUL in the path
            same = False
        if not same:
            self.warn(f"log:{path}", f"resident server: the request's logFile "
                      f"{json.dumps(path)} is another file in its mounts than in the "
                      "caller's: the request's lines go to the server's log")
            return None
        return self._file(path, level, fmt)

    def _file(self, path: str, level: int, fmt: str) -> logging.Handler | None:
        """The file's handler (kept), counted as in use until :meth:`_release`."""
        key = (path, level, fmt)
        with self._lock:
            if key not in self.files:
                if len(self.files) >= MAX_FILES:
                    self._evict()
                self.files[key] = logsetup.open_file(path, level, fmt)
            handler = self.files[key]
            if handler is not None:
                self.users[handler] = self.users.get(handler, 0) + 1
            return handler

    def _evict(self) -> None:
        """Under the lock: the file opened first goes, closed once no request writes to it
        (closed at once, a request still logging there lost its lines)."""
        old = self.files.pop(next(iter(self.files)))
        if old is not None and self.users.get(old):
            self.retired.add(old)
        elif old is not None:
            old.close()

    def _release(self, target: logging.Handler | None) -> None:
        with self._lock:
            if target is None or target not in self.users:
                return
            self.users[target] -= 1
            if not self.users[target]:
                del self.users[target]
                if target in self.retired:
                    self.retired.discard(target)
                    target.close()

    def close(self) -> None:
        with self._lock:
            for handler in [*self.files.values(), *self.retired]:
                if handler is not None:
                    handler.close()
            self.files.clear()
            self.retired.clear()
        super().close()


class _Nowhere(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.CRITICAL + 1)

    def emit(self, record: logging.LogRecord) -> None:
        pass


def _settings(conf: dict[str, Any] | None) -> tuple[str, int, str]:
    """(logFile, level, logFormat) of a request config, with the plugin's defaults."""
    conf = conf or {}
    path = conf.get("logFile", logsetup.default_file())
    fmt = conf.get("logFormat", DEFAULTS["logFormat"])
    return (path if isinstance(path, str) else logsetup.default_file(),
            logsetup.level_of(conf.get("logLevel", DEFAULTS["logLevel"])),
            fmt if fmt in CHOICES["logFormat"] else DEFAULTS["logFormat"])
