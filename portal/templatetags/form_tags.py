"""How a page's inputs say they are wrong: ``aria-invalid`` and the id of the error under them
(``portal/_field_errors.html`` renders it), for inputs a template writes by hand."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

register = template.Library()


@register.filter
def aria_invalid(field) -> str:
    """` aria-invalid="true" aria-describedby="id_count-error"` on a field with errors."""
    if field is None or not field.errors:
        return ""
    return format_html(' aria-invalid="true" aria-describedby="{}-error"', field.auto_id)
