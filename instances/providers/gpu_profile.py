"""How busy a simulated host's GPUs are, minute by minute: a cycle of busy and idle phases.

A profile is a small dict kept on the simulated host (``SimulatedHost.gpu_profile``)::

    {"busy_minutes": 90, "idle_minutes": 30, "start": "2026-11-30T14:00:00+00:00",
     "busy_percent": 85, "idle_percent": 1}

busy first, from ``start``; ``idle_minutes`` 0 is always busy, ``busy_minutes`` 0 always idle.
An empty profile is drawn from the seed and the cloud id, so every host differs and the same
seed gives the same readings. ``simulated_cloud profile HOST busy|idle|B:I`` sets one.
SimulatedGpus gives the simulated cloud its readings from them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from instances.models import SimulatedHost
from instances.providers.base import GpuSample, GpuValue
from instances.providers.faults import unit_hash

__all__ = ["GpuSample", "SimulatedGpus", "gpu_sample", "is_busy", "profile_of"]


def profile_of(spec: str, *, now: datetime) -> dict:
    """The profile ``simulated_cloud profile`` sets: 'busy', 'idle', or 'B:I' (minutes of busy
    then idle, repeating), starting now."""
    spec = spec.strip().lower()
    if spec == "busy":
        busy, idle = 60, 0
    elif spec == "idle":
        busy, idle = 0, 60
    else:
        try:
            busy_text, idle_text = spec.split(":")
            busy, idle = int(busy_text), int(idle_text)
        except ValueError:
            raise ValueError(
                f"'{spec}' is not a profile: say busy, idle, or B:I (busy then idle minutes)."
            ) from None
        if busy < 0 or idle < 0 or busy + idle == 0:
            raise ValueError("Busy and idle minutes are whole numbers, not both 0.")
    start = now.replace(second=0, microsecond=0)
    return {"busy_minutes": busy, "idle_minutes": idle, "start": start.isoformat()}


def _drawn(seed: int, cloud_id: str, launched_at: datetime) -> dict:
    return {
        "busy_minutes": 60 + int(180 * unit_hash(seed, cloud_id, "busy")),
        "idle_minutes": 20 + int(100 * unit_hash(seed, cloud_id, "idle")),
        "start": launched_at.isoformat(),
    }


def is_busy(profile: dict, minute: datetime) -> bool:
    busy = int(profile["busy_minutes"])
    period = busy + int(profile["idle_minutes"])
    start = datetime.fromisoformat(profile["start"])
    if minute < start:
        return True
    elapsed = int((minute - start) / timedelta(minutes=1))
    return elapsed % period < busy


def gpu_sample(
    *,
    seed: int,
    cloud_id: str,
    profile: dict,
    launched_at: datetime,
    minute: datetime,
    gpu_count: int,
    gpu_memory_gib: int,
) -> GpuSample:
    """The reading a host reports for one minute, GPU by GPU, the host's mean and sum taken
    from them as an agent takes them: the same inputs give the same reading.

    The phase is the host's (a job keeps all its GPUs busy, or none), but each GPU keeps a
    level of its own (one feeds the others, one waits on them) and moves a little each minute,
    so an 8-GPU host draws eight lines near one another, not one line eight times; memory in
    use stays near each GPU's level."""
    profile = profile or _drawn(seed, cloud_id, launched_at)
    busy = is_busy(profile, minute)
    total_mib = gpu_memory_gib * 1024
    gpus = []
    for index in range(gpu_count):
        level = unit_hash(seed, cloud_id, "gpu-level", index)
        moment = unit_hash(seed, cloud_id, "gpu", minute.isoformat(), index)
        jitter = 0.7 * level + 0.3 * moment
        if busy:
            utilization = min(100, int(profile.get("busy_percent", 85)) + int(15 * jitter))
            # A job allocates its memory once: it barely moves from minute to minute.
            memory = int(total_mib * (0.6 + 0.27 * level + 0.03 * moment))
        else:
            utilization = min(100, int(profile.get("idle_percent", 0)) + int(3 * jitter))
            # An idle notebook still holds the memory its kernel allocated.
            memory = int(total_mib * (0.38 + 0.04 * level))
        gpus.append(GpuValue(index, utilization, memory, total_mib))
    return GpuSample.of(gpus)


class SimulatedGpus:
    """The simulated cloud's GPU readings (mixed into SimulatedProvider): each running host's
    from its profile, and the console's way to change a profile."""

    seed: int

    def gpu_readings(self, minute: datetime) -> dict[str, GpuSample]:
        """Every running host's reading for the minute, each GPU's too, from its profile: one
        query however many hosts (the telemetry pass reads 10,000 at once)."""
        shapes = {row["name"]: row for row in self._rows()}
        readings = {}
        rows = SimulatedHost.objects.filter(state=SimulatedHost.State.RUNNING).values_list(
            "cloud_id", "instance_type", "gpu_profile", "launched_at"
        )
        for cloud_id, instance_type, profile, launched_at in rows:
            shape = shapes.get(instance_type, {"gpu_count": 1, "gpu_memory_gib": 24})
            readings[cloud_id] = gpu_sample(
                seed=self.seed,
                cloud_id=cloud_id,
                profile=profile,
                launched_at=launched_at,
                minute=minute,
                gpu_count=shape["gpu_count"],
                gpu_memory_gib=shape["gpu_memory_gib"],
            )
        return readings

    def set_gpu_profile(self, cloud_id: str, profile: dict) -> None:
        """The console's way to make a host busy or idle (``simulated_cloud profile``)."""
        SimulatedHost.objects.filter(pk=self._get(cloud_id).pk).update(gpu_profile=profile)
