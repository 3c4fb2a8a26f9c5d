"""Request limits: every request is measured against them before anything reads it (the audit
middleware, first in line): a longer path or query answers 414, a longer header 431, a bigger
body 413, each with {"code", "detail"} and an audit row. gunicorn (gunicorn.conf.py) refuses
longer request lines and header fields itself, before Django, without a row."""

from __future__ import annotations

from portal.lib.env import env_int

# The largest JSON or form body; Django also applies it to the fields of a multipart form.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int(
    "DJANGO_DATA_UPLOAD_MAX_MEMORY_SIZE",
    1024 * 1024,
    help="The largest JSON or form body, in bytes; a larger one answers 413.",
)
# The most fields a form or query string may have (Django answers 400 beyond it).
DATA_UPLOAD_MAX_NUMBER_FIELDS = env_int(
    "DJANGO_DATA_UPLOAD_MAX_NUMBER_FIELDS",
    1000,
    help="The most fields in a form or query string; more answers 400.",
)
# An uploaded file larger than this is spooled to a temporary file instead of memory.
FILE_UPLOAD_MAX_MEMORY_SIZE = env_int(
    "DJANGO_FILE_UPLOAD_MAX_MEMORY_SIZE",
    2_621_440,
    help="Uploaded files larger than this many bytes are spooled to a temporary file.",
)
# The largest multipart body, files included (a Cost and Usage Report upload).
PORTAL_MAX_UPLOAD_BYTES = env_int(
    "PORTAL_MAX_UPLOAD_BYTES",
    100 * 1024 * 1024,
    help="The largest multipart body, files included (a Cost and Usage Report upload), in "
    "bytes; a larger one answers 413.",
)
# Characters of the path, of the query string, and of any one header value.
PORTAL_MAX_PATH_LENGTH = env_int(
    "PORTAL_MAX_PATH_LENGTH", 2048, help="Characters of the path; a longer one answers 414."
)
PORTAL_MAX_QUERY_LENGTH = env_int(
    "PORTAL_MAX_QUERY_LENGTH",
    4096,
    help="Characters of the query string; a longer one answers 414.",
)
PORTAL_MAX_HEADER_LENGTH = env_int(
    "PORTAL_MAX_HEADER_LENGTH",
    8192,
    help="Characters of any one header value; a longer one answers 431.",
)
