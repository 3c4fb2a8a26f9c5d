"""instances/api/jobs/: managed jobs in the API: the researcher's side (submit.py, /api/v1/jobs/)
and the host agent's (runs.py, /api/v1/instances/{id}/job/)."""

from instances.api.jobs.runs import host_job_urls
from instances.api.jobs.submit import JobViewSet

__all__ = ["JobViewSet", "host_job_urls"]
