"""The shapes of the AWS identifiers a project's isolation names (its subnets, security groups,
KMS key, dedicated host and instance profile): a malformed one is refused when the project is
saved, with a sentence, not when a launch reaches the cloud.

The shapes are EC2's, IAM's and KMS's own: resource ids are a prefix and 8 or 17 hex digits;
a KMS key is named by its id, its ARN, an alias or an alias ARN (what RunInstances' KmsKeyId
accepts); an instance profile by its name or its ARN.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

# EC2 resource ids: the old 8-digit form and the 17-digit one. Each shape is anchored, as the
# API's schema states it (a JSON Schema pattern, so ASCII classes rather than \\w).
_RESOURCE = r"-(?:[0-9a-f]{8}|[0-9a-f]{17})"
SUBNET_SHAPE = rf"^subnet{_RESOURCE}$"
SECURITY_GROUP_SHAPE = rf"^sg{_RESOURCE}$"
HOST_SHAPE = rf"^h{_RESOURCE}$"

_PARTITION = r"arn:aws(?:-cn|-us-gov|-iso|-iso-b)?"
_KEY = r"(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32})"
# An alias is alias/ and 1-250 of letters, digits, / _ -; alias/aws/ names AWS's own keys,
# which cannot encrypt a volume for a customer-managed purpose, so they are refused.
_ALIAS = r"alias/(?!aws/)[A-Za-z0-9/_-]{1,250}"
KMS_KEY_SHAPE = (
    rf"^(?:{_KEY}|{_ALIAS}|{_PARTITION}:kms:[a-z0-9-]+:[0-9]{{12}}:(?:key/{_KEY}|{_ALIAS}))$"
)
_PROFILE_NAME = r"[A-Za-z0-9_+=,.@-]{1,128}"
INSTANCE_PROFILE_SHAPE = (
    rf"^(?:{_PROFILE_NAME}|{_PARTITION}:iam::[0-9]{{12}}:instance-profile/"
    rf"(?:[A-Za-z0-9_+=,.@-]+/)*{_PROFILE_NAME})$"
)
SUBNET_ID, SECURITY_GROUP_ID, HOST_ID, KMS_KEY, INSTANCE_PROFILE = (
    re.compile(shape)
    for shape in (
        SUBNET_SHAPE,
        SECURITY_GROUP_SHAPE,
        HOST_SHAPE,
        KMS_KEY_SHAPE,
        INSTANCE_PROFILE_SHAPE,
    )
)


def optional(shape: str) -> str:
    """The shape, or nothing (an empty value: the portal's default)."""
    return f"^(?:{shape[1:-1]})?$"


# RunInstances takes up to 16 security groups on an interface; a project names at most as
# many subnets (one per zone is the use).
MAX_IDS = 16


def _ids(value, *, pattern: re.Pattern, what: str, example: str) -> None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValidationError(f'Give a list of {what} ids, such as ["{example}"].', code="invalid")
    if len(value) > MAX_IDS:
        raise ValidationError(f"At most {MAX_IDS} {what} ids.", code="too_many")
    for item in value:
        if not pattern.fullmatch(item):
            raise ValidationError(
                f"'{item[:80]}' is not a {what} id: one looks like {example}.", code="malformed"
            )
    if len(set(value)) != len(value):
        raise ValidationError(f"Each {what} id once.", code="duplicate")


def validate_subnet_ids(value) -> None:
    _ids(value, pattern=SUBNET_ID, what="subnet", example="subnet-0a1b2c3d4e5f67890")


def validate_security_group_ids(value) -> None:
    _ids(value, pattern=SECURITY_GROUP_ID, what="security group", example="sg-0a1b2c3d4e5f67890")


def _shaped(value: str, pattern: re.Pattern, looks_like: str) -> None:
    if value and not pattern.fullmatch(value):
        raise ValidationError(f"'{value[:80]}' is not {looks_like}.", code="malformed")


def validate_kms_key(value: str) -> None:
    _shaped(
        value,
        KMS_KEY,
        "a KMS key: give its id (1234abcd-12ab-34cd-56ef-1234567890ab), its ARN, or an alias "
        "(alias/vision-lab)",
    )


def validate_host_id(value: str) -> None:
    _shaped(value, HOST_ID, "a dedicated host id: one looks like h-0a1b2c3d4e5f67890")


def validate_instance_profile(value: str) -> None:
    _shaped(
        value,
        INSTANCE_PROFILE,
        "an instance profile: give its name (gpu-hosts) or its ARN "
        "(arn:aws:iam::123456789012:instance-profile/gpu-hosts)",
    )


def short_key(key: str) -> str:
    """A KMS key as a host page names it: the end of its id or alias (…/abcd)."""
    if "alias/" in key:
        return "alias/" + key.split("alias/", 1)[1]
    return f"…/{key[-4:]}" if key else ""


TENANCY_WORDS = {"default": "shared tenancy", "dedicated": "dedicated tenancy", "host": "on host"}


def in_words(isolation: dict) -> str:
    """Where a host runs, as its page says it: "encrypted with key …/abcd · dedicated tenancy
    · subnet subnet-0a1b… · groups sg-… · profile gpu-hosts" (empty before it launched)."""
    if not isolation:
        return ""
    key = short_key(isolation.get("kms_key_id", ""))
    parts = [f"encrypted with key {key}" if key else "encrypted with the account's default key"]
    tenancy = isolation.get("tenancy") or "default"
    if tenancy == "host":
        parts.append(f"dedicated host {isolation.get('host_id', '')}")
    else:
        parts.append(TENANCY_WORDS.get(tenancy, f"{tenancy} tenancy"))
    parts.append(
        f"subnet {isolation['subnet_id']}" if isolation.get("subnet_id") else "default VPC"
    )
    if isolation.get("security_group_ids"):
        parts.append("groups " + ", ".join(isolation["security_group_ids"]))
    if isolation.get("instance_profile"):
        parts.append(f"profile {isolation['instance_profile'].rsplit('/', 1)[-1]}")
    if isolation.get("placement_group"):
        parts.append(f"placement group {isolation['placement_group']}")
    return " · ".join(parts)
