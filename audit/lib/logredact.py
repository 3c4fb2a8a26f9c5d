"""Keep secrets out of the log files too, Django's request logging included.

Redaction happens where a log record is made (a record factory), not in one handler, so that
every handler sees the redacted text: the console, a file, Sentry, pytest's caplog. Django
logs request paths, runserver logs whole request lines with their query strings, and an
exception message can quote the input; all go through :func:`audit.lib.redaction.redact_text`.
"""

from __future__ import annotations

import logging

from audit.lib.redaction import redact_text

_formatter = logging.Formatter()


def redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a malformed record is logging's own problem to report
        return
    clean = redact_text(message)
    if clean != message:
        record.msg, record.args = clean, ()
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        text = _formatter.formatException(record.exc_info)
        clean = redact_text(text)
        if clean != text:
            # Formatters print exc_text when it is set, instead of formatting exc_info again.
            record.exc_text = clean
    if record.stack_info:
        record.stack_info = redact_text(record.stack_info)


def install() -> None:
    """Wrap the current log record factory once; safe to call again."""
    current = logging.getLogRecordFactory()
    if getattr(current, "portal_redacts", False):
        return

    def factory(*args, **kwargs):
        record = current(*args, **kwargs)
        redact_record(record)
        return record

    factory.portal_redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
