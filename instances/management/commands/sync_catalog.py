"""Create or update the catalog from the provider, prices from the price file, images too."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit.services import audit_record_system
from instances.data import image_rows, list_prices
from instances.providers import get_provider
from instances.providers.base import ProviderError
from instances.services import image_upsert, instance_type_sync


class Command(BaseCommand):
    help = (
        "Sync instance types from the cloud (PORTAL_PROVIDER) with prices from the price file "
        "(PORTAL_PRICE_FILE), and TensorFlow images from the images file (PORTAL_IMAGE_FILE). "
        "An image id the cloud does not have in PORTAL_REGION is left out and named; ids an "
        "admin set on an image are never overwritten."
    )

    def add_arguments(self, parser):
        parser.add_argument("--provider", help="simulated or ec2 (default: PORTAL_PROVIDER)")
        parser.add_argument("--prices", help="price file (default: PORTAL_PRICE_FILE)")
        parser.add_argument("--images", help="images file (default: PORTAL_IMAGE_FILE)")
        parser.add_argument(
            "--keep-missing",
            action="store_true",
            help="do not deactivate types the cloud no longer lists",
        )

    def handle(self, *args, **options):
        name = options["provider"] or settings.PORTAL_PROVIDER
        price_file = Path(options["prices"] or settings.PORTAL_PRICE_FILE)
        try:
            provider = get_provider(name)
            prices = list_prices(price_file)
            rows = image_rows(Path(options["images"] or settings.PORTAL_IMAGE_FILE))
            specs = provider.instance_types()
            region = settings.PORTAL_REGION
            found = provider.images_found(
                ids for row in rows if (ids := row["provider_image_ids"].get(region))
            )
        except (ValueError, OSError, KeyError) as error:
            raise CommandError(str(error)) from error
        except ProviderError as error:
            raise CommandError(f"The {name} provider failed: {error}") from error
        report = instance_type_sync(
            provider=name,
            specs=specs,
            prices=prices,
            deactivate_missing=not options["keep_missing"],
        )
        for type_name, reason in sorted(report.skipped.items()):
            self.stderr.write(f"skipped {type_name}: {reason}")
        usable = []
        for row in rows:
            image_id = row["provider_image_ids"].get(region)
            if image_id and image_id not in found:
                self.stderr.write(
                    f"image {row['name']}: {image_id} does not exist in {region}; left out, so "
                    f"orders of it there are refused. Set its id in the admin (Images, image id "
                    f"overrides) or in PORTAL_IMAGE_FILE."
                )
                ids = {k: v for k, v in row["provider_image_ids"].items() if k != region}
                row = {**row, "provider_image_ids": ids}
            usable.append(row)
        images = Counter(state for _, state in (image_upsert(row=row) for row in usable))
        created = images["created"]
        audit_record_system(
            name="sync_catalog",
            kind="command",
            action="sync",
            object_ref=f"provider:{name}",
            summary={
                "created": report.created,
                "updated": report.updated,
                "deactivated": report.deactivated,
                "skipped": sorted(report.skipped),
                "images_created": created,
            },
        )
        self.stdout.write(
            f"Instance types ({name}): {report.summary()}. "
            f"Images: {created} created, {images['updated']} updated, "
            f"{images['unchanged']} unchanged."
        )
