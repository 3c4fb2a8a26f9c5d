"""Act as the simulated cloud behind the portal's back: interrupt spot hosts, kill hosts, list
them, and show which faults the cloud's API is set to have."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from audit.services import audit_record_system
from instances.models import Instance, SimulatedHost
from instances.providers.base import ProviderError
from instances.providers.faults import Faults
from instances.providers.gpu_profile import profile_of
from instances.providers.simulated import SimulatedProvider


class Command(BaseCommand):
    help = (
        "The simulated cloud's console. `warn HOST` announces that the market takes a spot host "
        "back in PORTAL_SPOT_WARNING_LEAD_SECONDS (rebalance recommendation and interruption "
        "warning, then the interruption); `interrupt HOST` takes a spot host back now, unwarned; "
        "`terminate HOST` ends any host without telling the portal; `list` shows every host; "
        "`faults` shows how the cloud's API is set to misbehave (PORTAL_SIMULATED_* settings); "
        "`profile HOST busy|idle|B:I` sets how busy a host's GPUs are from now (B minutes busy, "
        "then I idle, repeating). "
        "HOST is a cloud id (i-...) or a portal instance id. The portal notices on its next "
        "reconcile pass."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "action", choices=["warn", "interrupt", "terminate", "list", "faults", "profile"]
        )
        parser.add_argument("hosts", nargs="*", help="cloud ids or portal instance ids")

    def handle(self, *args, action: str, hosts: list[str], **options):
        provider = SimulatedProvider()
        if action == "faults":
            self._faults(provider.faults)
            return
        if action == "list":
            # The console, not the API: a throttled or slow API must not hide the hosts.
            for host in provider.console_hosts():
                self.stdout.write(
                    f"{host.cloud_id}  {host.state:<13} {host.instance_type:<18} "
                    f"{host.market:<9} {host.instance_uuid}"
                )
            return
        if not hosts:
            raise CommandError(f"Name at least one host to {action}.")
        if action == "profile":
            self._profile(provider, hosts)
            return
        for name in hosts:
            cloud_id = self._cloud_id(name)
            try:
                host = {
                    "warn": provider.warn,
                    "interrupt": provider.interrupt,
                    "terminate": provider.kill,
                }[action](cloud_id)
            except ProviderError as error:
                raise CommandError(str(error)) from error
            audit_record_system(
                name="simulated_cloud",
                kind="command",
                action=action,
                object_ref=f"cloud:{host.cloud_id}",
                summary={"state": host.state, "reason": host.state_reason},
            )
            if action == "warn":
                at = SimulatedHost.objects.get(cloud_id=host.cloud_id).interrupt_at
                self.stdout.write(f"{host.cloud_id}: warned; interrupted at {at:%H:%M:%S} UTC")
            else:
                self.stdout.write(f"{host.cloud_id}: {host.state} ({host.state_reason})")

    def _profile(self, provider: SimulatedProvider, hosts: list[str]) -> None:
        if len(hosts) != 2:
            raise CommandError("Say one host and a profile: profile HOST busy|idle|B:I.")
        cloud_id = self._cloud_id(hosts[0])
        try:
            profile = profile_of(hosts[1], now=timezone.now())
            provider.set_gpu_profile(cloud_id, profile)
        except (ValueError, ProviderError) as error:
            raise CommandError(str(error)) from error
        audit_record_system(
            name="simulated_cloud",
            kind="command",
            action="profile",
            object_ref=f"cloud:{cloud_id}",
            summary=profile,
        )
        self.stdout.write(
            f"{cloud_id}: GPUs busy {profile['busy_minutes']} min, idle "
            f"{profile['idle_minutes']} min, from {profile['start']}"
        )

    def _faults(self, faults: Faults) -> None:
        lines = [
            ("reply latency after the cloud acted", f"{faults.reply_latency:g} s"),
            ("replies lost after the call took effect", f"{faults.lost_reply_rate:.0%}"),
            ("client tokens", "ignored" if faults.ignore_client_tokens else "honoured"),
            (
                "throttling bursts",
                f"{faults.throttle_rate:.0%} of calls start one of "
                f"{faults.throttle_burst_calls} calls",
            ),
        ]
        for name, value in lines:
            self.stdout.write(f"{name:<42} {value}")

    @staticmethod
    def _cloud_id(name: str) -> str:
        if name.startswith("i-"):
            return name
        instance = Instance.objects.filter(pk=name).first() if len(name) >= 32 else None
        if instance is None or not instance.cloud_id:
            raise CommandError(f"{name} is neither a cloud id nor a launched portal instance.")
        return instance.cloud_id
