"""The API call log arrives with the audit issue."""
