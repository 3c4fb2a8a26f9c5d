"""How pages answer a service's refusal (portal/lib/pages.py), and the dashboard's panels, which
each app registers in audit/registry.py's dashboard_panels."""

from __future__ import annotations

import json

import pytest
from django import forms
from django.contrib.messages import get_messages
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.core.exceptions import ValidationError
from django.test import RequestFactory

from audit.registry import DASHBOARD_PANELS
from instances.panels import hosts_panel
from instances.services import quota_set
from portal.lib.errors import Conflict, Forbidden
from portal.lib.pages import form_errors, service_errors


def a_request(headers: dict | None = None):
    request = RequestFactory().post("/somewhere/", headers=headers or {})
    SessionMiddleware(lambda r: None).process_request(request)
    MessageMiddleware(lambda r: None).process_request(request)
    return request


def refusing(error):
    def view(request, slug):
        raise error

    return view


def test_a_refusal_becomes_a_message_and_the_browser_goes_back():
    view = service_errors(
        back=lambda request, slug: f"/quotas/#q-{slug}", prefix=lambda slug: slug
    )(refusing(Conflict("The quota is full.")))
    request = a_request()
    response = view(request, slug="vision-lab")
    assert (response.status_code, response["Location"]) == (302, "/quotas/#q-vision-lab")
    assert [str(m) for m in get_messages(request)] == ["vision-lab: The quota is full."]


def test_a_validation_error_reads_as_its_sentences():
    view = service_errors(back="/back/")(refusing(ValidationError(["Too long.", "Too late."])))
    request = a_request()
    assert view(request, slug="x")["Location"] == "/back/"
    assert [str(m) for m in get_messages(request)] == ["Too long. Too late."]


def test_forbidden_answers_the_403_page_with_the_sentence(db):
    view = service_errors(back="/back/")(refusing(Forbidden("Only admins change quotas.")))
    response = view(a_request(), slug="x")
    assert response.status_code == 403
    assert "Only admins change quotas." in response.content.decode()


def test_htmx_gets_the_refusal_as_an_event_and_keeps_its_fragment():
    view = service_errors(back="/back/")(refusing(Forbidden("Not your host.")))
    response = view(a_request({"HX-Target": "host-panel"}), slug="x")
    assert response.status_code == 403
    assert response["HX-Reswap"] == "none"
    assert json.loads(response["HX-Trigger"]) == {"portal:error": "Not your host."}


def test_without_a_way_back_the_view_keeps_its_refusal():
    view = service_errors()(refusing(Conflict("Busy.")))
    with pytest.raises(Conflict):
        view(a_request(), slug="x")


class Form(forms.Form):
    name = forms.CharField()


def test_a_form_gets_each_problem_beside_its_field_and_the_rest_above():
    form = Form(data={"name": "x"})
    assert form.is_valid()
    with form_errors(form):
        raise ValidationError({"name": "Taken.", "other": "Not a field here."})
    assert form.errors == {"name": ["Taken."], "__all__": ["Not a field here."]}
    with form_errors(form):
        raise Conflict("Over budget.")
    assert form.non_field_errors() == ["Not a field here.", "Over budget."]
    with pytest.raises(Forbidden), form_errors(form):
        raise Forbidden("Not yours.")


def test_the_dashboard_shows_the_registered_panels_and_no_other(client, alice, ada, projects):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=8)
    client.force_login(alice)
    page = client.get("/dashboard/").content.decode()
    assert 'data-quota="GPUs"' in page and "live hosts of yours" in page
    with DASHBOARD_PANELS.replaced({"hosts": hosts_panel}):
        page = client.get("/dashboard/").content.decode()
    assert 'data-quota="GPUs"' not in page and "live hosts of yours" not in page
    assert 'data-project="vision-lab"' in page  # the card itself is portal's


def test_the_idle_stop_says_a_bad_value_at_its_field_and_keeps_what_was_typed(
    client, ada, projects
):
    client.force_login(ada)
    response = client.post(
        "/projects/vision-lab/idle-policy/",
        {
            "enabled": "on",
            "threshold_percent": "150",
            "idle_minutes": "30",
            "warning_minutes": "45",
            "snooze_hours": "many",
        },
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert (
        '<div class="field-error" id="id_snooze_hours-error"><p>Give the hours as a whole '
        "number.</p></div>" in html
    )
    assert 'aria-invalid="true" aria-describedby="id_snooze_hours-error"' in html
    assert 'value="150"' in html and 'value="45"' in html
    fixed = client.post(
        "/projects/vision-lab/idle-policy/",
        {
            "enabled": "on",
            "threshold_percent": "150",
            "idle_minutes": "30",
            "warning_minutes": "45",
            "snooze_hours": "4",
        },
    )
    html = fixed.content.decode()
    assert fixed.status_code == 400
    assert "The threshold is a GPU utilization from 1 to 100 %." in html
    assert 'id="id_threshold_percent-error"' in html and 'id="id_warning_minutes-error"' in html
    ok = client.post(
        "/projects/vision-lab/idle-policy/",
        {
            "enabled": "on",
            "threshold_percent": "10",
            "idle_minutes": "30",
            "warning_minutes": "5",
            "snooze_hours": "4",
        },
    )
    assert (ok.status_code, ok["Location"]) == (302, "/projects/vision-lab/idle-policy/")
