"""audit/selectors/: the reads of the audit log that pages, exports and the API share:

- filters: the log's filters, with what each accepts
- status: where each row stands against the chain (sealed, pending, outside)
"""
