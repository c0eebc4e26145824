"""A response's headers read without the ``email`` package: http.client parses every
response's header block with ``email.parser`` (a feed parser for MIME messages, line by line
through regular expressions and a generator), which was 8% of the manager's CPU in a burst
of 500 services, for about 20 requests per service. It knows nothing of TPUs.

Written by hand because neither http.client nor urllib3 lets a caller choose how headers
are parsed: ``HTTPResponse.begin`` calls the module's ``parse_headers``. ``Response.begin``
is CPython's own (3.11 to 3.13 agree on it), with ``parse_headers`` replaced by this
module's, which builds the same ``HTTPMessage`` from a block of well-formed field lines and
hands any other block (a folded line, a line that is not a field) to the ``email`` parser,
as http.client does.
"""

from __future__ import annotations

import email.parser
import http.client
import re
from typing import IO

#: a field line as the email parser takes one: a name of printable characters other than
#: the colon (and no space), then the colon
_FIELD = re.compile(rb"[!-9;-~]+:")
_END = (b"\r\n", b"\n", b"")


def parse_headers(fp: IO[bytes]) -> http.client.HTTPMessage:
    """``http.client.parse_headers``: the same message, made directly when every line of
    the block is a field line."""
    lines = http.client._read_headers(fp)  # type: ignore[attr-defined]  # its limits too
    message = http.client.HTTPMessage()
    fields = []
    for raw in lines:
        if raw in _END:
            break
        match = _FIELD.match(raw)
        if match is None or b"\r" in raw.rstrip(b"\r\n"):
            return _parsed_by_email(lines)  # the email parser also ends a line at a lone CR
        end = match.end()
        # As the email parser's compat32 policy stores a field: the name as sent, the value
        # without the blanks before it and the line end after it.
        fields.append(
            (
                raw[: end - 1].decode("iso-8859-1"),
                raw[end:].decode("iso-8859-1").lstrip(" \t").rstrip("\r\n"),
            )
        )
    for name, value in fields:
        message[name] = value
    return message


def _parsed_by_email(lines: list[bytes]) -> http.client.HTTPMessage:
    text = b"".join(lines).decode("iso-8859-1")
    parsed: http.client.HTTPMessage = email.parser.Parser(_class=http.client.HTTPMessage).parsestr(
        text
    )
    return parsed


class Response(http.client.HTTPResponse):
    """``http.client.HTTPResponse`` whose headers ``parse_headers`` reads."""

    def begin(self) -> None:
        started: object = self.headers  # None until begun (typeshed says otherwise)
        if started is not None:
            return
        # Read until a response other than 100 Continue, skipping each one's headers.
        while True:
            version, status, reason = self._read_status()  # type: ignore[attr-defined]
            if status != http.client.CONTINUE:
                break
            http.client._read_headers(self.fp)  # type: ignore[attr-defined]
        self.code = self.status = status
        self.reason = reason.strip()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11
        else:
            raise http.client.UnknownProtocol(version)
        self.headers = self.msg = parse_headers(self.fp)
        transfer = self.headers.get("transfer-encoding")
        self.chunked = bool(transfer and transfer.lower() == "chunked")
        if self.chunked:
            self.chunk_left = None
        self.will_close = self._check_close()  # type: ignore[attr-defined]
        # A Content-Length is ignored with chunked encoding (RFC 9112 6.3).
        self.length = None
        length = self.headers.get("content-length")
        if length and not self.chunked:
            try:
                self.length = int(length)
            except ValueError:
                self.length = None
            else:
                if self.length < 0:
                    self.length = None
        if (
            status in (http.client.NO_CONTENT, http.client.NOT_MODIFIED)
            or 100 <= status < 200
            or self._method == "HEAD"  # type: ignore[attr-defined]
        ):
            self.length = 0
        # Open, not chunked and no length: the body ends when the connection closes.
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True
