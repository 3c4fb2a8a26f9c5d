"""Single sign-on through an OpenID Connect provider (Keycloak, Entra ID, Okta, Google):
mozilla-django-oidc's code flow with PKCE, its endpoints found from the issuer's discovery
document (portal/lib/sso.py), its RS256 tokens checked against the provider's keys."""

from __future__ import annotations

from portal.lib.env import env_bool, env_list, env_str

PORTAL_OIDC_ISSUER = env_str(
    "PORTAL_OIDC_ISSUER",
    help="The OpenID Connect provider's issuer URL (its discovery document is at "
    "<issuer>/.well-known/openid-configuration), e.g. "
    "https://keycloak.example.org/realms/research. Empty: no single sign-on, local passwords "
    "only.",
)
PORTAL_OIDC_CLIENT_ID = env_str(
    "PORTAL_OIDC_CLIENT_ID", help="The portal's client id at the provider."
)
PORTAL_OIDC_CLIENT_SECRET = env_str(
    "PORTAL_OIDC_CLIENT_SECRET", help="The portal's client secret at the provider."
)
PORTAL_OIDC_GROUPS_CLAIM = env_str(
    "PORTAL_OIDC_GROUPS_CLAIM",
    "groups",
    help="The claim (in the ID token or userinfo) that lists a person's groups; the Single "
    "sign-on page maps groups to roles and projects.",
)
PORTAL_OIDC_PROVIDER_NAME = env_str(
    "PORTAL_OIDC_PROVIDER_NAME",
    "your organisation's sign-in",
    help="What the sign-in button says: Sign in with <name> (e.g. Keycloak, Microsoft).",
)
PORTAL_OIDC_ONLY = env_bool(
    "PORTAL_OIDC_ONLY",
    False,
    help="1 turns local passwords off (the sign-in form and password-issued API tokens) for "
    "everyone but the break-glass accounts; API tokens keep working.",
)
PORTAL_OIDC_BREAK_GLASS = env_list(
    "PORTAL_OIDC_BREAK_GLASS",
    help="Usernames that keep their local password when PORTAL_OIDC_ONLY=1 (an admin who can "
    "still get in when the provider is down).",
)

# mozilla-django-oidc's own settings, from the ones above (the endpoints come from discovery).
OIDC_RP_CLIENT_ID = PORTAL_OIDC_CLIENT_ID
OIDC_RP_CLIENT_SECRET = PORTAL_OIDC_CLIENT_SECRET
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_RP_SCOPES = "openid email profile"
OIDC_USE_PKCE = True
OIDC_STORE_ID_TOKEN = True  # the hint RP-initiated logout sends back to the provider
OIDC_TIMEOUT = 10
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc-callback"
LOGIN_REDIRECT_URL_FAILURE = "/login/"
ALLOW_LOGOUT_GET_METHOD = False
