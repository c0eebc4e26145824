"""Structured logs: JSON lines in a container (no terminal), readable text in a terminal.

Only formatting and levels live here; what to log is each module's business.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

#: LogRecord attributes that are not user-supplied extras.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JSONFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, msg, the record's extras and any error."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = (
                    value if isinstance(value, str | int | float | bool | None) else str(value)
                )
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def configure_logging(fmt: str = "auto", level: str = "info", stream: TextIO | None = None) -> None:
    """``fmt``: ``json``, ``text``, or ``auto`` (text on a terminal, JSON otherwise)."""
    out = stream or sys.stderr
    if fmt not in ("auto", "json", "text"):
        raise ValueError(f"log format must be auto, json or text, not {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"log level must be debug, info, warning or error, not {level!r}")
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    handler = logging.StreamHandler(out)
    handler.setFormatter(JSONFormatter() if use_json else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for noisy in ("urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))
