"""What stands between a request and prometheus_client's WSGI app: an ``Accept`` header
the client library cannot parse (``text/plain; version=x``) is answered in the default
text format instead of raising in its encoder choice, and any exception of a request is
one escaped log line and a 500 (wsgiref printed a multi-line traceback on stderr,
past the one-line rule and ``--log-format json``)."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterable
from typing import Any

from rdma_cni.errors import escaped

log = logging.getLogger("rdma_cni.kube.exporter")
App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
FAILED = b"# HTTP 500: the exporter failed to answer; see its log\n"


def guarded(app: App) -> App:
    """``app`` whose requests never raise nor fail on a malformed ``Accept``."""
    from prometheus_client.exposition import choose_encoder

    def guard(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        accept = environ.get("HTTP_ACCEPT")
        if accept:
            try:
                choose_encoder(accept)
            except Exception:  # a version the library cannot read: the default format
                del environ["HTTP_ACCEPT"]
        try:
            return list(app(environ, start_response))
        except Exception as err:
            log.error("request %s failed: %s", escaped(str(environ.get("PATH_INFO", ""))),
                      escaped(f"{type(err).__name__}: {err}"))
            start_response("500 Internal Server Error",
                           [("Content-Type", "text/plain; charset=utf-8")],
                           _exc_info())
            return [FAILED]

    return guard


def _exc_info() -> Any:
    """The exception being handled, so a start_response already called is replaced."""
    import sys

    return sys.exc_info()


class OneLine(io.StringIO):
    """The stream wsgiref prints what failed in answering a request to (a traceback,
    a client that stopped reading): logged as one escaped line, its last, at flush."""

    def flush(self) -> None:
        text = self.getvalue().strip()
        if text:
            log.error("answering a request failed: %s", escaped(text.splitlines()[-1]))
        self.seek(0)
        self.truncate()
