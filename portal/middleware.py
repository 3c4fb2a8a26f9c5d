"""Request-wide rules: every page needs a login, the API answers for itself."""

from __future__ import annotations

from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequired


class LoginRequiredMiddleware(DjangoLoginRequired):
    """Django's login-required rule for pages; API views are left to DRF.

    DRF marks its views login-not-required: they authenticate with sessions or bearer tokens
    and answer 401/403 in JSON, which is what an API client needs. API views meant for people
    in a browser (the API docs) set ``is_page = True`` and get the redirect to the login page.
    """

    def process_view(self, request, view_func, view_args, view_kwargs):
        view_class = getattr(view_func, "cls", None)  # set by APIView.as_view()
        if getattr(view_class, "is_page", False) and not request.user.is_authenticated:
            return self.handle_no_permission(request, view_func)
        return super().process_view(request, view_func, view_args, view_kwargs)
