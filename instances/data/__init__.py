"""instances/data/: the catalog's data files (GPU reference, the simulated cloud's offer, list
prices, images) and the functions that read them.

Each file carries its source and date beside the data. Nothing here reads settings at import.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


def _load(path: Path) -> dict:
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


@dataclass(frozen=True)
class GpuReference:
    model: str
    memory_gib: int
    compute_capability: str
    architecture: str
    mig_profiles: tuple[str, ...]
    # How many slices of each profile one GPU holds, NVIDIA's "Number of Instances Available".
    mig_per_gpu: tuple[tuple[str, int], ...] = ()


@functools.cache
def gpu_references() -> tuple[GpuReference, ...]:
    """The GPU reference, read once (a file of the code, not of the deployment)."""
    data = _load(DATA_DIR / "gpus.json")
    return tuple(
        GpuReference(
            model=row["model"],
            memory_gib=row["memory_gib"],
            compute_capability=row["compute_capability"],
            architecture=row["architecture"],
            mig_profiles=tuple(row["mig_profiles"]),
            mig_per_gpu=tuple(row["mig_profiles"].items()),
        )
        for row in data["gpus"]
    )


def gpu_reference(model: str, memory_gib: int) -> GpuReference | None:
    """The reference entry for a GPU model, preferring the memory size that matches."""
    candidates = [ref for ref in gpu_references() if ref.model.lower() == model.lower()]
    if not candidates:
        return None
    return min(candidates, key=lambda ref: abs(ref.memory_gib - memory_gib))


@dataclass(frozen=True)
class ListPrice:
    on_demand: Decimal
    source: str
    as_of: date


def list_prices(path: Path) -> dict[str, ListPrice]:
    """Prices by type name from a price file; a row may carry its own source."""
    data = _load(path)
    as_of = date.fromisoformat(data["as_of"])
    prices = {}
    for name, row in data["prices"].items():
        price = Decimal(str(row["on_demand"]))
        if price < 0:
            raise ValueError(f"{path}: the price of {name} is negative ({price}).")
        prices[name] = ListPrice(
            on_demand=price,
            source=row.get("source", data["source"]),
            as_of=date.fromisoformat(row["as_of"]) if "as_of" in row else as_of,
        )
    return prices


def image_rows(path: Path | None = None) -> list[dict]:
    """The images of an images file (PORTAL_IMAGE_FILE unless a path is given)."""
    if path is None:
        from django.conf import settings

        path = settings.PORTAL_IMAGE_FILE
    return _load(Path(path))["images"]


def simulated_cloud_rows() -> list[dict]:
    return _load(DATA_DIR / "simulated_cloud.json")["instance_types"]
