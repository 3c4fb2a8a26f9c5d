"""portal's models, one module per topic: people (users, projects, memberships), notices,
tokens, single sign-on (sso) and webhooks. Callers import them from here."""

from portal.models.notices import Notice
from portal.models.people import Membership, Project, ProjectChange, ProjectQuerySet, User
from portal.models.sso import ExternalIdentity, GroupRule
from portal.models.tokens import ApiToken
from portal.models.webhooks import Webhook, WebhookAttempt, WebhookDelivery, WebhookEvent

__all__ = [
    "ApiToken",
    "ExternalIdentity",
    "GroupRule",
    "Membership",
    "Notice",
    "Project",
    "ProjectChange",
    "ProjectQuerySet",
    "User",
    "Webhook",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEvent",
]
