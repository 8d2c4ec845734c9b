"""Plain HTTP GETs for the control plane of a run (/metrics scrapes, the server's version), over
the standard library's `http.client`: a run needs nothing more, and importing httpx for it cost
~0.1 s of CPU per `replay run` (httpx also loads its command-line extras, rich and pygments).

Like the driver's default transport, it connects directly (no proxy from the environment).
"""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

__all__ = ["GetError", "PlainGetter", "get_once"]


class GetError(Exception):
    """A GET that got no response: refused, reset, timed out, not HTTP (`str`: the cause;
    `timed_out`: the server took the connection, or not even that, and said nothing in time;
    `refused`: nothing listens at that address)."""

    def __init__(self, why: str, *, timed_out: bool = False, refused: bool = False) -> None:
        super().__init__(why)
        self.timed_out = timed_out
        self.refused = refused


class PlainGetter:
    """GETs to one server over a kept-alive connection, reopened once when the server closed it
    between two GETs. Not thread-safe: one user at a time (the recorder holds a lock)."""

    def __init__(self, url: str, timeout_s: float):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise GetError(f"not an http(s) URL: {url!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        if self.https:
            import ssl  # the CA store is loaded for https servers only (~0.1 s)

            return http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout_s, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)

    def get(self, url: str) -> tuple[int, bytes]:
        """(status, body) of GET `url` (same server); GetError on any transport failure."""
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for attempt in (0, 1):
            fresh = self._conn is None
            if self._conn is None:
                self._conn = self._connect()
            try:
                self._conn.request("GET", target, headers={"Accept": "*/*"})
                r = self._conn.getresponse()
                return r.status, r.read()
            except (OSError, http.client.HTTPException) as e:
                self.close()
                # a kept-alive connection the server closed meanwhile: one retry on a new one
                if fresh or attempt == 1 or isinstance(e, TimeoutError):
                    why = f"{type(e).__name__}: {e}"
                    raise GetError(
                        why,
                        timed_out=isinstance(e, TimeoutError),
                        refused=isinstance(e, ConnectionRefusedError),
                    ) from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> PlainGetter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def get_once(url: str, timeout_s: float) -> tuple[int, bytes]:
    """One GET on its own connection."""
    with PlainGetter(url, timeout_s) as g:
        return g.get(url)
