"""Act as the simulated cloud behind the portal's back: interrupt spot hosts, kill hosts, list."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.services import audit_record_system
from instances.models import Instance, SimulatedHost
from instances.providers.base import ProviderError
from instances.providers.simulated import SimulatedProvider


class Command(BaseCommand):
    help = (
        "The simulated cloud's console. `interrupt HOST` takes a spot host back as EC2 does; "
        "`terminate HOST` ends any host without telling the portal; `list` shows every host. "
        "HOST is a cloud id (i-...) or a portal instance id. The portal notices on its next "
        "reconcile pass."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["interrupt", "terminate", "list"])
        parser.add_argument("hosts", nargs="*", help="cloud ids or portal instance ids")

    def handle(self, *args, action: str, hosts: list[str], **options):
        provider = SimulatedProvider()
        if action == "list":
            for row in SimulatedHost.objects.all():
                host = provider.describe([row.cloud_id])[row.cloud_id]
                self.stdout.write(
                    f"{host.cloud_id}  {host.state:<13} {host.instance_type:<18} "
                    f"{host.market:<9} {host.instance_uuid}"
                )
            return
        if not hosts:
            raise CommandError(f"Name at least one host to {action}.")
        for name in hosts:
            cloud_id = self._cloud_id(name)
            try:
                host = (
                    provider.interrupt(cloud_id)
                    if action == "interrupt"
                    else provider.kill(cloud_id)
                )
            except ProviderError as error:
                raise CommandError(str(error)) from error
            audit_record_system(
                name="simulated_cloud",
                kind="command",
                action=action,
                object_ref=f"cloud:{host.cloud_id}",
                summary={"state": host.state, "reason": host.state_reason},
            )
            self.stdout.write(f"{host.cloud_id}: {host.state} ({host.state_reason})")

    @staticmethod
    def _cloud_id(name: str) -> str:
        if name.startswith("i-"):
            return name
        instance = Instance.objects.filter(pk=name).first() if len(name) >= 32 else None
        if instance is None or not instance.cloud_id:
            raise CommandError(f"{name} is neither a cloud id nor a launched portal instance.")
        return instance.cloud_id
