"""Responses read by ``ome.runtime.httpheaders`` read as http.client reads them: the same
headers (names, values, order, duplicates), the same body framing, and the same remaining
bytes, for well-formed header blocks and odd ones alike."""

from __future__ import annotations

import http.client
import io
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from urllib3.exceptions import HeaderParsingError
from urllib3.util.response import assert_header_parsing

from ome.runtime.httpheaders import Response, parse_headers

names = st.sampled_from(
    [
        b"Content-Type",
        b"content-length",
        b"Audit-Id",
        b"Warning",
        b"X-Kubernetes-Pf-Flowschema-Uid",
        b"Set-Cookie",
        b"a",
    ]
)
values = st.sampled_from(
    [
        b"application/json",
        b"12",
        b"",
        b"  spaced  ",
        b"\tleading tab",
        b"caf\xe9",
        b"a:b:c",
        b'299 - "x"',
    ]
)
good_line = st.builds(lambda n, v: n + b":" + v + b"\r\n", names, values)
odd_line = st.sampled_from(
    [
        b" folded continuation\r\n",
        b"\tfolded with a tab\r\n",
        b"no colon here\r\n",
        b": empty name\r\n",
        b"From someone\r\n",
        b"Bad Name: space in the name\r\n",
        b"X-Lone: carriage\rreturn\r\n",
        b"LF-Only: line\n",
    ]
)
blocks = st.lists(st.one_of(good_line, good_line, good_line, odd_line), max_size=8)
ends = st.sampled_from([b"\r\n", b"\n"])


def both(block: bytes) -> tuple[Any, Any, bytes, bytes]:
    ours_fp, theirs_fp = io.BytesIO(block), io.BytesIO(block)
    ours, theirs = parse_headers(ours_fp), http.client.parse_headers(theirs_fp)
    return ours, theirs, ours_fp.read(), theirs_fp.read()


def header_check(message: Any) -> str:
    try:
        assert_header_parsing(message)
    except HeaderParsingError as e:
        return type(e).__name__
    return "ok"


@given(blocks, ends, st.binary(max_size=20))
def test_a_header_block_reads_as_http_client_reads_it(
    lines: list[bytes], end: bytes, rest: bytes
) -> None:
    block = b"".join(lines) + end + rest
    ours, theirs, ours_left, theirs_left = both(block)
    assert isinstance(ours, http.client.HTTPMessage)
    assert list(ours.items()) == list(theirs.items())
    assert ours_left == theirs_left == rest
    assert [type(d) for d in ours.defects] == [type(d) for d in theirs.defects]
    assert header_check(ours) == header_check(theirs), "urllib3 judges them alike"


def test_well_formed_fields_keep_their_names_order_and_duplicates() -> None:
    block = b"Content-Type: application/json\r\nWarning: one\r\nwarning:two\r\nX: \r\n\r\n"
    ours, theirs, _, _ = both(block)
    assert list(ours.items()) == [
        ("Content-Type", "application/json"),
        ("Warning", "one"),
        ("warning", "two"),
        ("X", ""),
    ]
    assert ours.get_all("warning") == theirs.get_all("warning") == ["one", "two"]


class _Socket:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(io.BytesIO(self.data))  # type: ignore[arg-type]


responses = st.sampled_from(
    [
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nContent-Length: 9\r\n\r\n"
        b"2\r\n{}\r\n0\r\n\r\n",
        b"HTTP/1.1 201 Created\r\nConnection: close\r\n\r\nbody until close",
        b"HTTP/1.1 200 OK\r\n\r\nno length, kept open: read to the end",
        b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc",
        b"HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\nX-Skipped: yes\r\n\r\nHTTP/1.1 409 Conflict\r\n"
        b"Content-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\nrest",
        b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\nrest",
        b"HTTP/1.1 500 Internal Server Error\r\n folded: start\r\nContent-Length: 1\r\n\r\nx",
    ]
)


@given(responses, st.sampled_from(["GET", "HEAD", "POST"]))
def test_a_response_frames_its_body_as_http_client_does(raw: bytes, method: str) -> None:
    ours = Response(_Socket(raw), method=method)  # type: ignore[arg-type]
    theirs = http.client.HTTPResponse(_Socket(raw), method=method)  # type: ignore[arg-type]
    ours.begin()
    theirs.begin()
    for attribute in ("status", "reason", "version", "chunked", "length", "will_close"):
        assert getattr(ours, attribute) == getattr(theirs, attribute), attribute
    assert list(ours.headers.items()) == list(theirs.headers.items())
    assert ours.read() == theirs.read()
    ours.begin()  # a second begin does nothing, as http.client's
    assert ours.status == theirs.status


def test_an_unknown_protocol_is_refused_as_http_client_refuses_it() -> None:
    raw = b"HTTP/2.0 200 OK\r\n\r\n"
    for cls in (Response, http.client.HTTPResponse):
        response = cls(_Socket(raw))  # type: ignore[arg-type]
        try:
            response.begin()
        except http.client.UnknownProtocol as e:
            assert str(e) == "HTTP/2.0"
        else:
            raise AssertionError(f"{cls.__name__} accepted HTTP/2.0")
