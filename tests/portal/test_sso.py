"""Single sign-on against a real OpenID Connect provider running in the test process
(oidc-provider-mock on 127.0.0.1): discovery, the code flow with PKCE, RS256 tokens checked
against the provider's keys, groups mapped to roles and projects, a refused person, a removed
group, RP-initiated logout, and the audit rows of each."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from bs4 import BeautifulSoup
from oidc_provider_mock import run_server_in_thread

from audit.models import AuditEvent
from portal.lib import sso as sso_lib
from portal.models import ExternalIdentity, GroupRule, Membership, User
from portal.services.sso import group_rule_add

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def provider_server():
    with run_server_in_thread() as server:
        yield f"http://localhost:{server.server_port}"


def use_provider(settings, issuer: str) -> None:
    """Point the portal at the test provider (a discovery read before is forgotten)."""
    settings.PORTAL_OIDC_ISSUER = issuer
    settings.PORTAL_OIDC_CLIENT_ID = settings.OIDC_RP_CLIENT_ID = "gpu-portal"
    settings.PORTAL_OIDC_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET = "portal-secret"
    settings.PORTAL_OIDC_PROVIDER_NAME = "Keycloak"
    sso_lib._discovered.clear()


@pytest.fixture
def provider(provider_server, settings):
    use_provider(settings, provider_server)
    yield provider_server
    sso_lib._discovered.clear()


@pytest.fixture
def rules(ada, projects):
    group_rule_add(actor=ada, group="gpu-admins", gives="admin")
    group_rule_add(actor=ada, group="finance", gives="finance")
    group_rule_add(actor=ada, group="vision-lab", gives="member", project=projects["vision-lab"])
    group_rule_add(
        actor=ada, group="vision-lab-leads", gives="manager", project=projects["vision-lab"]
    )
    group_rule_add(actor=ada, group="nlp-lab", gives="member", project=projects["nlp-lab"])


def person(provider: str, sub: str, groups: list[str], **claims) -> None:
    """What the provider says of ``sub`` from now on."""
    body = {"email": f"{sub}@example.org", "groups": groups, **claims}
    httpx.put(f"{provider}/users/{sub}", json=body).raise_for_status()


def sign_in(client, provider: str, sub: str):
    """The browser's round trip: the portal sends it to the provider, the person is chosen
    there, the provider sends it back with a code. Returns the portal's last answer."""
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302
    to_provider = start["Location"]
    asked = parse_qs(urlsplit(to_provider).query)
    assert to_provider.startswith(f"{provider}/oauth2/authorize")
    assert asked["code_challenge_method"] == ["S256"] and asked["code_challenge"]
    chosen = httpx.post(to_provider, data={"sub": sub}, follow_redirects=False)
    assert chosen.status_code == 302, chosen.text
    back = urlsplit(chosen.headers["location"])
    assert back.path == "/oidc/callback/"
    return client.get(f"{back.path}?{back.query}")


def test_the_sign_in_page_offers_the_provider_only_when_configured(client, settings, provider):
    assert "Sign in with Keycloak" in client.get("/login/").content.decode()
    settings.PORTAL_OIDC_ISSUER = ""
    assert "Sign in with" not in client.get("/login/").content.decode()
    assert client.get("/oidc/authenticate/").status_code == 404


def test_a_lead_signs_in_as_manager_of_vision_lab_keyed_on_sub(client, provider, rules):
    person(provider, "u-7f3a", ["vision-lab-leads", "staff"], preferred_username="dana")
    answer = sign_in(client, provider, "u-7f3a")
    assert answer.status_code == 302 and answer["Location"] == "/dashboard/"
    user = User.objects.get(external_identity__subject="u-7f3a")
    assert (user.username, user.role, user.email) == ("dana", "researcher", "u-7f3a@example.org")
    assert not user.has_usable_password()
    membership = Membership.objects.get(user=user)
    assert (membership.project.slug, membership.role, membership.from_sso) == (
        "vision-lab",
        "manager",
        True,
    )
    assert client.get("/dashboard/").status_code == 200
    row = AuditEvent.objects.filter(path="/oidc/callback/").latest("seq")
    assert row.actor_username == "dana" and row.status == 302


def test_the_same_email_at_another_sub_is_another_person(client, provider, rules, alice):
    person(provider, "u-other", ["vision-lab"], email=alice.email, preferred_username="alice")
    sign_in(client, provider, "u-other")
    user = User.objects.get(external_identity__subject="u-other")
    assert user.pk != alice.pk and user.username == "alice-2"


def test_groups_give_the_admin_and_finance_roles(client, provider, rules):
    person(provider, "u-admin", ["gpu-admins"])
    sign_in(client, provider, "u-admin")
    admin = User.objects.get(external_identity__subject="u-admin")
    assert admin.is_portal_admin and admin.is_staff
    client.logout()
    person(provider, "u-fin", ["finance"])
    sign_in(client, provider, "u-fin")
    assert User.objects.get(external_identity__subject="u-fin").role == "finance"


def test_someone_whose_groups_map_to_nothing_is_refused_with_a_sentence(client, provider, rules):
    person(provider, "u-stranger", ["marketing"])
    answer = sign_in(client, provider, "u-stranger")
    assert answer.status_code == 302 and answer["Location"] == "/login/"
    page = client.get("/login/").content.decode()
    assert "Your groups at Keycloak (marketing) give you no place in this portal yet" in page
    assert not User.objects.filter(external_identity__subject="u-stranger").exists()
    assert not User.objects.filter(email="u-stranger@example.org").exists()
    row = AuditEvent.objects.filter(path="/oidc/callback/").latest("seq")
    assert row.outcome == "denied"


def test_leaving_a_group_ends_the_membership_it_gave_at_the_next_sign_in(
    client, provider, rules, api_as
):
    person(provider, "u-kim", ["vision-lab", "nlp-lab"])
    sign_in(client, provider, "u-kim")
    kim = User.objects.get(external_identity__subject="u-kim")
    assert set(kim.memberships.values_list("project__slug", flat=True)) == {"vision-lab", "nlp-lab"}
    client.logout()
    person(provider, "u-kim", ["nlp-lab"])
    sign_in(client, provider, "u-kim")
    assert list(kim.memberships.values_list("project__slug", flat=True)) == ["nlp-lab"]
    # Their API tokens act as them: vision-lab is gone for those too.
    projects = api_as(kim).get("/api/v1/projects/").json()["results"]
    assert [p["slug"] for p in projects] == ["nlp-lab"]


def test_a_membership_an_admin_gave_by_hand_is_not_taken_by_the_groups(
    client, provider, rules, projects
):
    from portal.services import membership_set

    person(provider, "u-lee", ["nlp-lab"])
    sign_in(client, provider, "u-lee")
    lee = User.objects.get(external_identity__subject="u-lee")
    membership_set(project=projects["vision-lab"], user=lee, role="member")
    client.logout()
    sign_in(client, provider, "u-lee")
    assert set(lee.memberships.values_list("project__slug", flat=True)) == {"vision-lab", "nlp-lab"}


def test_sign_out_ends_the_providers_session_too(client, provider, rules):
    person(provider, "u-out", ["vision-lab"])
    sign_in(client, provider, "u-out")
    answer = client.post("/logout/")
    assert answer.status_code == 200
    # The signed-out page sends the browser on (a form may not redirect off the origin).
    link = BeautifulSoup(answer.content, "html.parser").select_one("meta[http-equiv=refresh]")
    where = urlsplit(link["content"].split("url=", 1)[1])
    assert f"{where.scheme}://{where.netloc}{where.path}" == f"{provider}/oauth2/end_session"
    query = parse_qs(where.query)
    assert query["post_logout_redirect_uri"] == ["http://testserver/login/"]
    assert query["id_token_hint"][0].count(".") == 2  # the ID token the sign-in got
    assert client.get("/dashboard/").status_code == 302  # signed out of the portal


def test_only_sso_turns_passwords_off_but_for_break_glass(client, provider, settings, ada, alice):
    from tests.conftest import PASSWORD

    settings.PORTAL_OIDC_ONLY = True
    settings.PORTAL_OIDC_BREAK_GLASS = ["ada"]
    page = client.get("/login/").content.decode()
    assert "Sign in with Keycloak" in page and "Administrator sign-in with a password" in page
    refused = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert refused.status_code == 200 and "_auth_user_id" not in client.session
    token = client.post(
        "/api/v1/auth/tokens/",
        {"username": "alice", "password": PASSWORD, "name": "ci"},
        content_type="application/json",
    )
    assert token.status_code == 401
    assert client.post("/login/", {"username": "ada", "password": PASSWORD}).status_code == 302


def test_only_admins_edit_the_rules_and_bad_rules_say_why(client, ada, alice, projects):
    client.force_login(alice)
    assert client.get("/sso/").status_code == 403
    client.force_login(ada)
    # The page said memberships end "when the person leaves the group": they end at the next
    # sign-in (test_leaving_a_group_ends_the_membership_it_gave_at_the_next_sign_in).
    page = " ".join(client.get("/sso/").content.decode().split())
    assert "end at the person's next sign-in after they leave the group" in page.replace(
        "&#x27;", "'"
    )
    missing = client.post("/sso/", {"group": "vision-lab", "gives": "member", "project": ""})
    assert missing.status_code == 400
    assert "Choose the project" in missing.content.decode()
    blank = client.post("/sso/", {"group": "  ", "gives": "admin"})
    assert blank.status_code == 400
    assert not GroupRule.objects.exists()
    added = client.post("/sso/", {"group": "gpu-admins", "gives": "admin"})
    assert added.status_code == 302
    rule = GroupRule.objects.get()
    assert (rule.group, rule.gives, rule.project) == ("gpu-admins", "admin", None)
    again = client.post("/sso/", {"group": "gpu-admins", "gives": "admin"})
    assert again.status_code == 400 and "gpu-admins already gives that." in again.content.decode()
    assert GroupRule.objects.count() == 1
    assert client.post("/sso/", {"delete": rule.pk}).status_code == 302
    assert not GroupRule.objects.exists()
    assert ExternalIdentity.objects.count() == 0
