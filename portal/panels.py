"""The dashboard's panels: each app registers its own in audit/registry.py's
``dashboard_panels`` (in its AppConfig.ready(); the store fixes their order).

A panel is ``callable(user, projects) -> Panel | None``. It is called once per
page with every project the viewer sees, so a panel costs a fixed number of queries however
many projects there are; it answers None when it has nothing for this viewer (a role's home
panels ask ``portal.permissions`` whose they are). Portal calls the apps above it only through
the registry, never by import.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from audit.registry import DASHBOARD_PANELS


@dataclass(frozen=True)
class Panel:
    """A template and its context. ``place`` says where it goes: ``head`` (under the greeting),
    ``lead`` (full width, above the project cards: a role's overview), ``card`` (inside each
    project's card, with ``by_project[project id]`` as its context; a project without an entry
    shows nothing) or ``aside`` (once, beside the cards)."""

    template: str
    place: str = "aside"
    context: dict = field(default_factory=dict)
    by_project: dict[int, dict] = field(default_factory=dict)


def dashboard_panels(user, projects: list) -> list[Panel]:
    panels = (panel(user, projects) for panel in DASHBOARD_PANELS)
    return [panel for panel in panels if panel is not None]
