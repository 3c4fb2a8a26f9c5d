import ipaddress

from django.db import migrations, models

NETWORKS = {"public_ip": "198.51.100.0/24", "private_ip": "10.20.0.0/16"}


def readdress_doubles(apps, schema_editor):
    """Live simulated hosts that were given one address between them: each later one gets the
    next free address, so the constraint below can hold."""
    SimulatedHost = apps.get_model("instances", "SimulatedHost")
    live = SimulatedHost.objects.exclude(state="terminated").order_by("launched_at", "cloud_id")
    for field, network in NETWORKS.items():
        net = ipaddress.ip_network(network)
        taken = set()
        for host in live:
            address = getattr(host, field)
            while address in taken:
                nxt = ipaddress.ip_address(address) + 1
                if nxt not in net or nxt == net.broadcast_address:
                    nxt = net.network_address + 1
                address = str(nxt)
            taken.add(address)
            if address != getattr(host, field):
                setattr(host, field, address)
                host.save(update_fields=[field])


class Migration(migrations.Migration):
    dependencies = [
        ("instances", "0009_leasenotice_minutes_before"),
    ]

    operations = [
        migrations.RunPython(readdress_doubles, migrations.RunPython.noop),
        *(
            migrations.AddConstraint(
                model_name="simulatedhost",
                constraint=models.UniqueConstraint(
                    condition=models.Q(("state", "terminated"), _negated=True),
                    fields=(field,),
                    name=f"simulatedhost_live_{field}",
                ),
            )
            for field in ("public_ip", "private_ip")
        ),
    ]
