"""Go-style durations (``10m``, ``1h30m``, ``1.5s``): parse as Go's ``time.ParseDuration``
and print as ``Duration.String()``, because users compare what we print with Go tools and
the docs. Pure: no I/O; every module that reads or prints a duration uses this one.
"""

from __future__ import annotations

import json
from datetime import timedelta


def _quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


_NANOSECOND = 1
_MICROSECOND = 1000 * _NANOSECOND
_MILLISECOND = 1000 * _MICROSECOND
_SECOND = 1000 * _MILLISECOND
_MINUTE = 60 * _SECOND
_HOUR = 60 * _MINUTE
_UNITS = {
    "ns": _NANOSECOND,
    "us": _MICROSECOND,
    "\u00b5s": _MICROSECOND,  # U+00B5 micro sign
    "\u03bcs": _MICROSECOND,  # U+03BC Greek small letter mu
    "ms": _MILLISECOND,
    "s": _SECOND,
    "m": _MINUTE,
    "h": _HOUR,
}
_INT64_LIMIT = 1 << 63
_INT64_DIGITS = len(str(_INT64_LIMIT))
_DIGITS = "0123456789"


def parse_go_duration(text: str) -> timedelta:
    """Go's ``time.ParseDuration``: ``1.5h``, ``10m``, ``1h30m``, ``500ms``, ``-2m3.5s``, ``0``.

    ``ValueError`` (with Go's message) otherwise. ``timedelta`` holds microseconds, so a
    remainder of nanoseconds rounds away from zero."""
    ns = _parse_go_duration_ns(text)
    micros = -(-abs(ns) // _MICROSECOND)
    return timedelta(microseconds=micros if ns >= 0 else -micros)


def _parse_go_duration_ns(text: str) -> int:
    """``time.ParseDuration`` step by step, in nanoseconds, including its int64 overflow."""
    invalid = ValueError(f"time: invalid duration {_quote(text)}")
    s, negative = text, False
    if s[:1] in ("-", "+"):
        negative, s = s[0] == "-", s[1:]
    if s == "0":
        return 0
    if not s:
        raise invalid
    total = 0
    while s:
        if s[0] != "." and s[0] not in _DIGITS:
            raise invalid
        digits = _leading(s, _DIGITS)
        # More significant digits than an int64 has overflow, as in Go; checked before
        # ``int()``, which refuses a text past Python's digit limit with a message of its own.
        if len(digits.lstrip("0")) > _INT64_DIGITS:
            raise invalid
        whole, s = int(digits.lstrip("0") or "0"), s[len(digits) :]
        if whole > _INT64_LIMIT:
            raise invalid
        fraction, scale, post = 0, 1.0, False
        if s.startswith("."):
            decimals = _leading(s[1:], _DIGITS)
            s, post = s[1 + len(decimals) :], bool(decimals)
            for d in decimals:  # Go stops taking digits once they would overflow
                if fraction > (_INT64_LIMIT - 1) // 10 or fraction * 10 + int(d) > _INT64_LIMIT:
                    break
                fraction, scale = fraction * 10 + int(d), scale * 10
        if not digits and not post:
            raise invalid
        unit_text = _leading(s, None)
        if not unit_text:
            raise ValueError(f"time: missing unit in duration {_quote(text)}")
        s = s[len(unit_text) :]
        unit = _UNITS.get(unit_text)
        if unit is None:
            raise ValueError(f"time: unknown unit {_quote(unit_text)} in duration {_quote(text)}")
        if whole > _INT64_LIMIT // unit:
            raise invalid
        value = whole * unit
        if fraction > 0:
            # float64, as Go computes it, so that fractions round exactly as Go's do
            value += int(float(fraction) * (float(unit) / scale))
            if value > _INT64_LIMIT:
                raise invalid
        total += value
        if total > _INT64_LIMIT:
            raise invalid
    if negative:
        return -total
    if total > _INT64_LIMIT - 1:
        raise invalid
    return total


def _leading(s: str, chars: str | None) -> str:
    """The prefix of ``s`` made of ``chars``, or (``None``) of anything but digits and ``.``."""
    end = 0
    while end < len(s) and (
        s[end] in chars if chars is not None else s[end] not in _DIGITS and s[end] != "."
    ):
        end += 1
    return s[:end]


def format_go_duration(d: timedelta) -> str:
    """Go's ``Duration.String()``: ``10m0s``, ``11m3s``, ``1h0m0s``, ``1.5s``, ``500ms``,
    ``0s``. Unlike Go, a ``timedelta`` beyond int64 nanoseconds prints without wrapping."""
    ns = ((d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds) * _MICROSECOND
    sign, u = ("-" if ns < 0 else ""), abs(ns)
    if u == 0:
        return "0s"
    if u < _SECOND:
        if u < _MICROSECOND:
            return f"{sign}{u}ns"
        if u < _MILLISECOND:
            return f"{sign}{_with_fraction(u, 3)}\u00b5s"
        return f"{sign}{_with_fraction(u, 6)}ms"
    seconds = _with_fraction(u % _MINUTE, 9)
    minutes, hours = (u // _MINUTE) % 60, u // _HOUR
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{sign}{minutes}m{seconds}s"
    return f"{sign}{seconds}s"


def _with_fraction(value: int, precision: int) -> str:
    """``value / 10**precision`` with trailing zeros (and a bare point) dropped."""
    whole, fraction = divmod(value, 10**precision)
    digits = f"{fraction:0{precision}d}".rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)
