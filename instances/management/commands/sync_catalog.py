"""Create or update the catalog from the provider, prices from the price file, images too."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from audit.services import audit_record_system
from instances.providers.base import ProviderError
from instances.services import catalog_sync


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
        try:
            synced = catalog_sync(
                provider=name,
                price_file=Path(options["prices"] or settings.PORTAL_PRICE_FILE),
                image_file=Path(options["images"] or settings.PORTAL_IMAGE_FILE),
                keep_missing=options["keep_missing"],
            )
        except (ValueError, OSError, KeyError) as error:
            raise CommandError(str(error)) from error
        except ProviderError as error:
            raise CommandError(f"The {name} provider failed: {error}") from error
        report, images = synced.report, synced.images
        for type_name, reason in sorted(report.skipped.items()):
            self.stderr.write(f"skipped {type_name}: {reason}")
        for sentence in synced.left_out:
            self.stderr.write(sentence)
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
