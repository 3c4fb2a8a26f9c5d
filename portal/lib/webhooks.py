"""The small pieces of webhooks: keeping a signing secret encrypted, signing a message the
Standard Webhooks way, and deciding whether a URL is one the portal may call."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import secrets
import socket
from datetime import datetime
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from standardwebhooks.webhooks import Webhook as Signer

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's public marker, not a secret
URL_MAX_LENGTH = 2000


def new_secret() -> str:
    """A signing secret in the form the standardwebhooks library reads: whsec_ and 32 random
    bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _fernet() -> Fernet:
    key = settings.PORTAL_WEBHOOK_KEY
    if not key:
        # A Fernet key is 32 bytes in url-safe base64; derive one that is only for this use.
        digest = hashlib.sha256(b"portal-webhook-secrets:" + settings.SECRET_KEY.encode()).digest()
        key = base64.urlsafe_b64encode(digest).decode()
    return Fernet(key)


def secret_encrypt(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode()


def secret_decrypt(token: str) -> str:
    """The secret, or an empty string when the key that encrypted it is gone (the delivery
    then fails saying so, and a rotation gives the webhook a new one)."""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except (InvalidToken, ValueError):
        return ""


def signature(secrets_in_use: list[str], *, message_id: str, at: datetime, body: str) -> str:
    """The webhook-signature header: one ``v1,<base64>`` per secret in use (the new one and,
    for a day after a rotation, the old one), space-separated as the specification allows."""
    return " ".join(
        Signer(secret).sign(msg_id=message_id, timestamp=at, data=body) for secret in secrets_in_use
    )


class UrlRefused(ValueError):
    """Why the portal will not call a URL, as a sentence for the person who gave it."""


def url_check(url: str, *, resolve: bool = True) -> None:
    """Raise UrlRefused unless the portal may POST to ``url``: https (plain http only where
    PORTAL_WEBHOOK_ALLOW_PRIVATE is on), no credentials in it, a host name that is not the
    portal's own, and (with ``resolve``) every address the name resolves to public. Checked
    when a webhook is saved and again before every attempt, since a name can come to point
    elsewhere after it was saved."""
    allow_private = settings.PORTAL_WEBHOOK_ALLOW_PRIVATE
    if len(url) > URL_MAX_LENGTH:
        raise UrlRefused(f"Give a URL of at most {URL_MAX_LENGTH} characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise UrlRefused("Give a full URL, e.g. https://hooks.example.org/gpu.") from None
    host = (parts.hostname or "").rstrip(".").lower()
    if parts.scheme not in ("https", "http") or not host:
        raise UrlRefused("Give a full URL, e.g. https://hooks.example.org/gpu.")
    if parts.scheme == "http" and not allow_private:
        raise UrlRefused("Webhooks are sent over https only: give an https:// URL.")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused("Leave credentials out of the URL: the signature proves the sender.")
    if any(char.isspace() or ord(char) < 32 for char in url):
        raise UrlRefused("The URL has spaces or control characters in it.")
    if allow_private:
        return
    own = {name.lstrip(".").lower() for name in settings.ALLOWED_HOSTS if name != "*"}
    if host in own or any(host.endswith("." + name) for name in own):
        raise UrlRefused("A webhook cannot call the portal itself.")
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        if not resolve:
            return
        try:
            infos = socket.getaddrinfo(host, port or 443, proto=socket.IPPROTO_TCP)
        except (socket.gaierror, UnicodeError):
            raise UrlRefused(f"{host} does not resolve to an address.") from None
        addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    for address in addresses:
        if not address.is_global:
            raise UrlRefused(
                f"{host} is a private, loopback or reserved address ({address}): webhooks "
                "call public endpoints only."
            )
