"""An image runs only on GPUs whose compute capability it was built for."""

from __future__ import annotations

import pytest

from instances.models import Image, InstanceType


@pytest.mark.parametrize(
    ("image", "instance_type", "fits"),
    [
        ("tf-2.11-cuda11.2", "p4d.24xlarge", True),  # A100, 8.0
        ("tf-2.11-cuda11.2", "g5.xlarge", True),  # A10G, 8.6
        ("tf-2.11-cuda11.2", "g6.xlarge", False),  # L4, 8.9: needs CUDA 11.8+
        ("tf-2.11-cuda11.2", "p5.48xlarge", False),  # H100, 9.0
        ("tf-2.11-cuda11.2", "gn-h800.48xlarge", False),
        ("tf-2.13-cuda11.8", "p5.48xlarge", True),
        ("tf-2.20-cuda12.5", "p5e.48xlarge", True),
    ],
)
def test_image_fits_gpu_architecture(catalog, image, instance_type, fits):
    assert Image.objects.get(name=image).supports(catalog[instance_type]) is fits


def test_every_type_in_the_catalog_runs_some_image(catalog):
    images = list(Image.objects.all())
    for row in InstanceType.objects.offered():
        assert row.compatible_images(images), f"{row.name} has no image"
