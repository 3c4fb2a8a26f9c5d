"""portal's models, one module per topic: people (users, projects, memberships), notices and
tokens. Callers import them from here."""

from portal.models.notices import Notice
from portal.models.people import Membership, Project, ProjectQuerySet, User
from portal.models.tokens import ApiToken

__all__ = ["ApiToken", "Membership", "Notice", "Project", "ProjectQuerySet", "User"]
