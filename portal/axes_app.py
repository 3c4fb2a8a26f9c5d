"""django-axes under a name admins recognise in the admin's index (its own is "Axes")."""

from axes.apps import AppConfig as AxesAppConfig


class SignInAttemptsConfig(AxesAppConfig):
    verbose_name = "Sign-in attempts"
