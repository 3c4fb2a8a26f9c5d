"""instances/selectors/: the reads several callers share (services write; selectors read), one
module per topic: orders (held orders, who decides them), hosts, pools (the pool pages' counts,
last events and chart), telemetry (GPU readings), costs (running time and cost so far), quotas
(what each project holds), jobs (a job's log) and headroom (what an order may still ask for).
Import from the topic module; this package re-exports nothing."""
