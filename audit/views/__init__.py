"""audit/views/: the audit pages (events: the log for admins with its exports, one row, and
My activity for all); audit/urls.py routes them."""
