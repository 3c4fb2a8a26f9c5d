"""audit/lib/: small helpers of the audit app that are not a layer."""
