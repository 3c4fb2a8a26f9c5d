"""Django admin for people and projects; saves go through the services."""

from django.contrib import admin
from django.contrib.admin.widgets import AutocompleteSelect
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.exceptions import ValidationError

from portal import services
from portal.models import Membership, Project, User

# The admin names itself and links back to the portal ("View site").
admin.site.site_header = "GPU Portal administration"
admin.site.site_title = "GPU Portal administration"
admin.site.index_title = "Catalog, people, costs and the audit log"
admin.site.site_url = "/"


class LenientAutocompleteSelect(AutocompleteSelect):
    """Django's autocomplete widget looks up the submitted value to redraw a form sent back with
    errors; a value that is not an id (``abc`` for a number) made that lookup raise, a 500.
    Such a value selects nothing: the form's own error says what is wrong with it."""

    def optgroups(self, name, value, attr=None):
        target = self.field.remote_field.model._meta.get_field(self.field.remote_field.field_name)
        usable = []
        for item in value:
            try:
                target.to_python(item)
            except ValidationError:
                continue
            usable.append(item)
        return super().optgroups(name, usable, attr)


class AutocompleteAdminMixin:
    """Autocomplete fields drawn with the lenient widget."""

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name in self.get_autocomplete_fields(request):
            kwargs["widget"] = LenientAutocompleteSelect(
                db_field, self.admin_site, using=kwargs.get("using")
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    list_display = ["username", "email", "first_name", "last_name", "role", "is_active"]
    list_filter = ["role", "is_active"]
    fieldsets = (*DjangoUserAdmin.fieldsets, ("Portal", {"fields": ("role",)}))
    add_fieldsets = (*DjangoUserAdmin.add_fieldsets, ("Portal", {"fields": ("role",)}))

    def save_model(self, request, obj, form, change):
        # Staff rights follow the portal role; the service keeps them in step.
        obj.is_staff = obj.is_superuser = obj.role == User.Role.ADMIN
        super().save_model(request, obj, form, change)


class MembershipInline(AutocompleteAdminMixin, admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "is_active", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["slug", "name", "memberships__user__username"]
    inlines = [MembershipInline]
    # Changed on the project's page or with PATCH /api/v1/projects/{slug}/, which keep the
    # project's history (services.project_isolation_set).
    readonly_fields = Project.ISOLATION_FIELDS

    def save_model(self, request, obj, form, change):
        services.project_save(project=obj)


@admin.register(Membership)
class MembershipAdmin(AutocompleteAdminMixin, admin.ModelAdmin):
    list_display = ["project", "user", "role", "created_at"]
    list_filter = ["role", "project"]
    search_fields = ["project__slug", "user__username"]
    autocomplete_fields = ["user", "project"]

    def save_model(self, request, obj, form, change):
        services.membership_set(project=obj.project, user=obj.user, role=obj.role)

    def delete_model(self, request, obj):
        services.membership_remove(project=obj.project, user=obj.user)
