"""instances/services/jobs/: managed jobs, one module per part: lifecycle (the state machine,
what a move does to the hosts, what the owner hears), submit (submit, cancel, re-run; the
checks of a job's fields), runs (what a host's agent is handed and reports: start, output,
exit) and recovery (recovering after an interruption or a lost host, and the job pass that
repairs what no agent reported)."""

from instances.services.jobs.lifecycle import job_note, job_transition
from instances.services.jobs.recovery import job_recover, jobs_pass
from instances.services.jobs.runs import (
    Assignment,
    job_assignment,
    job_log_append,
    job_run_exited,
    job_run_started,
    job_scalars_record,
    run_environment,
)
from instances.services.jobs.submit import (
    JOB_BOUNDS,
    job_bounds,
    job_cancel,
    job_problems,
    job_rerun,
    job_submit,
)

__all__ = [
    "JOB_BOUNDS",
    "Assignment",
    "job_assignment",
    "job_bounds",
    "job_cancel",
    "job_log_append",
    "job_note",
    "job_problems",
    "job_recover",
    "job_rerun",
    "job_run_exited",
    "job_run_started",
    "job_scalars_record",
    "job_submit",
    "job_transition",
    "jobs_pass",
    "run_environment",
]
