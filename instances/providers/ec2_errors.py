"""EC2's errors as the provider's: transient (worth retrying) or permanent."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from instances.providers.base import NO_CAPACITY, ProviderPermanentError, ProviderTransientError

# Error codes worth retrying; everything else is the caller's or the account's problem.
TRANSIENT_CODES = {
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    NO_CAPACITY,
    "InternalError",
    "ServiceUnavailable",
    "Unavailable",
}


def translate(error: Exception) -> Exception:
    """Map a botocore error to the provider's transient/permanent errors."""
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        message = error.response.get("Error", {}).get("Message", str(error))
        kind = ProviderTransientError if code in TRANSIENT_CODES else ProviderPermanentError
        return kind(f"{code}: {message}", code=code)
    if isinstance(error, BotoCoreError):
        return ProviderTransientError(str(error), code=type(error).__name__)
    return error
