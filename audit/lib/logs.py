"""Log lines an operator can search: every record carries the request id, JSON on request.

``PORTAL_LOG_FORMAT=json`` gives one JSON object per line (twelve-factor: the platform collects
stdout); the default is readable text for ``make run``. Either way the request id of the web
request or Celery task in progress is on the line (``-`` outside both), and the text has been
through the secret scrubbing of audit/lib/logredact.py, which runs where a record is made.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from audit.lib.context import current_request_id
from audit.lib.redaction import redact_text

# LogRecord attributes that are not extra fields of the call.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class RequestIdFilter(logging.Filter):
    """Puts ``request_id`` on every record a handler emits (set it on the handler)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = current_request_id.get() or "-"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, request_id,
    the exception text when there is one, and any ``extra=`` fields the call passed."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or current_request_id.get() or "-",
            "process": record.process,
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                # The message was scrubbed where the record was made; extra fields are not.
                if isinstance(value, int | float | bool):
                    line[key] = value
                else:
                    line[key] = redact_text(value if isinstance(value, str) else repr(value))
        return json.dumps(line, ensure_ascii=False)
