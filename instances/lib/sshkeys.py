"""instances/lib/sshkeys.py: validation of the SSH public keys researchers paste into orders."""

from __future__ import annotations

import base64
import hashlib
import re

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.exceptions import ValidationError

PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----|PuTTY-User-Key-File", re.I)
MIN_RSA_BITS = 2048


def validate_public_key(text: str) -> tuple[str, str]:
    """Return the key as one clean line and its SHA256 fingerprint (as ssh-keygen -l shows it).

    A private key is refused with a message that says so: it must never be sent anywhere.
    """
    text = (text or "").strip()
    if PRIVATE_KEY.search(text):
        raise ValidationError(
            "This is a private key. Paste the public key instead (the .pub file, starting with "
            "ssh-ed25519 or ssh-rsa) and keep the private key on your computer.",
            code="private_key",
        )
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise ValidationError(
            "Paste exactly one public key on one line, e.g. 'ssh-ed25519 AAAA... you@laptop'.",
            code="invalid_ssh_key",
        )
    line = " ".join(lines[0].split())
    try:
        key = serialization.load_ssh_public_key(line.encode())
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ValidationError(
            "This is not an OpenSSH public key. Paste the contents of your .pub file, e.g. "
            "'ssh-ed25519 AAAA... you@laptop'.",
            code="invalid_ssh_key",
        ) from None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        raise ValidationError(
            f"This RSA key has {key.key_size} bits; use at least {MIN_RSA_BITS} "
            "(or an ed25519 key: ssh-keygen -t ed25519).",
            code="weak_ssh_key",
        )
    blob = base64.b64decode(line.split()[1])
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return line, f"SHA256:{digest}"
