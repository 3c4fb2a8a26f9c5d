"""Cluster jobs, portal side: a job with ``nodes`` runs as a gang on a cluster order. Each run is
handed to every node at once (one run per rank, the same number) only while the cluster is
whole, with TF_CONFIG naming the nodes; it runs once every rank started and succeeds once every
rank exited 0. One rank's failure or interruption ends the run on every node, only the lost
node is replaced (with its rank), and the next run starts on all nodes. The agents here speak
the protocol by hand (test_jobs.Agent); test_cluster_job_keras.py runs real ones."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest

from instances import services
from instances.models import Instance, Job, JobRun
from instances.providers.simulated import SimulatedProvider
from instances.services.jobs import jobs_pass
from portal.models import Notice
from tests.instances.test_jobs import Agent, _checkpoints, job_body, submit

__all__ = ["_checkpoints", "job_body", "submit"]  # the fixtures, shared with test_jobs

J = Job.Status
H = Instance.Status


def launch(job: Job) -> list[Instance]:
    """Launch the job's cluster on the simulated cloud (one node's task launches them all,
    each node's then finds its host) and return its nodes in rank order, running."""
    for node in job.order.instances.filter(status=H.REQUESTED):
        services.instance_provision(instance_id=node.pk)
    nodes = list(job.order.instances.filter(status=H.RUNNING).order_by("rank"))
    assert [node.rank for node in nodes] == list(range(job.order.count))
    return nodes


def hand_out(nodes: list[Instance]) -> tuple[list[Agent], list[dict]]:
    agents = [Agent(node) for node in nodes]
    return agents, [agent.ask().json() for agent in agents]


def start(agents: list[Agent], runs: list[dict]) -> None:
    for agent, run in zip(agents, runs, strict=True):
        assert agent.post("started", job=run["job"], run=run["run"], pid=4242).status_code == 200


def log(agent: Agent, run: dict, offset: int, data: bytes) -> dict:
    body = {"job": run["job"], "run": run["run"], "offset": offset}
    return agent.post("log", **body, data=base64.b64encode(data).decode()).json()


def exit_(agent: Agent, run: dict, **fields) -> dict:
    return agent.post("exit", job=run["job"], run=run["run"], **fields).json()


def test_a_cluster_job_starts_on_every_node_at_once_and_succeeds_when_all_exit_0(
    submit, api_as, alice
):
    job = submit(nodes=2, market="on_demand")
    order = job.order
    assert order.placement == "cluster" and order.count == 2 and job.nodes == 2
    first = order.instances.get(rank=0)
    services.instance_provision(instance_id=first.pk)
    # The cluster is not whole until both nodes run: no node is handed the run before.
    Instance.objects.filter(order=order, rank=1).update(status=H.PROVISIONING)
    assert Agent(Instance.objects.get(pk=first.pk)).ask().status_code == 204
    Instance.objects.filter(order=order, rank=1).update(status=H.RUNNING)
    nodes = launch(job)
    agents, runs = hand_out(list(reversed(nodes)))  # rank 1 asks first: it hands out both
    agents.reverse(), runs.reverse()
    assert [run["run"] for run in runs] == [1, 1] and [run["rank"] for run in runs] == [0, 1]
    configs = [json.loads(run["env"]["TF_CONFIG"]) for run in runs]
    workers = configs[0]["cluster"]["worker"]
    assert len(workers) == 2 and len(set(workers)) == 2
    assert configs[1] == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 1}}
    assert [run["env"]["PORTAL_CLUSTER_RANK"] for run in runs] == ["0", "1"]
    assert {run["env"]["PORTAL_CLUSTER_SIZE"] for run in runs} == {"2"}
    assert runs[0]["env"]["CHECKPOINT_DIR"] == runs[1]["env"]["CHECKPOINT_DIR"]
    job.refresh_from_db()
    assert job.status == J.STARTING and job.host == nodes[0]
    assert job.status_reason == "run 1 handed to all 2 nodes"
    # An agent asking again gets its own rank's run back, not a second one.
    assert agents[1].ask().json()["rank"] == 1 and job.runs.count() == 2
    start(agents[:1], runs[:1])
    job.refresh_from_db()
    assert job.status == J.STARTING  # one rank of two started
    start(agents[1:], runs[1:])
    job.refresh_from_db()
    assert job.status == J.RUNNING and job.status_reason == "run 1 started on all 2 nodes"
    # Each rank's lines go into the log behind its rank, a line cut across two chunks once.
    log(agents[1], runs[1], 0, b"worker up\nepoch 1 lo")
    log(agents[0], runs[0], 0, b"chief up\n")
    log(agents[1], runs[1], 20, b"ss 0.5\n")
    text = api_as(alice).get(f"/api/v1/jobs/{job.pk}/logs/").json()["text"]
    assert text.splitlines()[1:] == [
        "[rank 1] worker up",
        "[rank 1] epoch 1 lo",
        "[rank 0] chief up",
        "[rank 1] ss 0.5",
    ]
    assert text.startswith("=== run 1 on 2 nodes: ")
    # Scalars are the chief's: a worker's copies are not kept.
    point = {"tag": "train/epoch_loss", "step": 0, "value": 0.5, "wall_time": 1.0}
    ref = {"job": runs[1]["job"], "run": 1}
    assert agents[1].post("scalars", **ref, points=[point]).json()["stored"] == 0
    ref = {"job": runs[0]["job"], "run": 1}
    assert agents[0].post("scalars", **ref, points=[point]).json()["stored"] == 1
    # Rank 0 exits 0 first: the run waits for rank 1.
    assert exit_(agents[0], runs[0], exit_code=0)["status"] == "running"
    assert exit_(agents[1], runs[1], exit_code=0)["status"] == "succeeded"
    job.refresh_from_db()
    assert job.status_reason == "run 1 exited 0 on all 2 nodes" and job.exit_code == 0
    assert {node.status for node in order.instances.all()} == {H.TERMINATING}
    body = api_as(alice).get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["nodes"] == 2
    assert [(run["number"], run["rank"]) for run in body["runs"]] == [(1, 0), (1, 1)]
    assert sorted(host["rank"] for host in body["hosts"]) == [0, 1]


def test_the_chunk_boundaries_do_not_split_a_ranks_line_prefix(submit, api_as, alice):
    """The log case above, exactly: a rank's line cut across chunks gets its prefix once."""
    job = submit(nodes=2, market="on_demand")
    agents, runs = hand_out(launch(job))
    start(agents, runs)
    log(agents[1], runs[1], 0, b"epoch 1 lo")
    log(agents[1], runs[1], 10, b"ss 0.5\nepoch 2")
    log(agents[1], runs[1], 24, b" done\n")
    text = api_as(alice).get(f"/api/v1/jobs/{job.pk}/logs/").json()["text"]
    assert text.splitlines()[1:] == ["[rank 1] epoch 1 loss 0.5", "[rank 1] epoch 2 done"]


def test_an_interrupted_node_alone_is_replaced_and_the_next_run_starts_on_every_node(submit, alice):
    job = submit(nodes=2, market="spot")
    nodes = launch(job)
    agents, runs = hand_out(nodes)
    start(agents, runs)
    SimulatedProvider().warn(nodes[1].cloud_id)
    services.spot_events_drain()
    # Both ranks hear "stop": a worker whose peer is going cannot go on alone.
    assert log(agents[1], runs[1], 0, b"epoch 3 saved\n")["stop"] is True
    assert log(agents[0], runs[0], 0, b"epoch 3 saved\n")["stop"] is True
    exit_(agents[1], runs[1], exit_code=None, signal="SIGTERM", stopped=True, interrupted=True)
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.recoveries == 1
    assert "rank 1" in job.status_reason and "stopped on every node" in job.status_reason
    # Only the lost node is replaced, with its rank; rank 0's host stays.
    replacement = nodes[1].replacements.get()
    assert replacement.rank == 1 and job.order.instances.count() == 3
    assert job.events.filter(reason__contains=f"{replacement.name} replaces rank 1").exists()
    warned = Notice.objects.get(user=alice, subject__contains="will be interrupted")
    assert "rank 1 of job resnet's cluster of 2" in warned.body
    assert "the job restarts from its checkpoint on every node" in warned.body
    notice = Notice.objects.get(user=alice, subject="Job resnet is recovering")
    assert "on all 2 nodes once the cluster is whole again" in notice.body
    # Rank 0 is told to stop; asking again it gets its open run back, still to stop.
    assert log(agents[0], runs[0], 14, b"")["stop"] is True
    again = agents[0].ask().json()
    assert again["run"] == 1 and again["stop"] is True
    exit_(agents[0], runs[0], exit_code=None, signal="SIGKILL", stopped=True)
    job.refresh_from_db()
    assert job.status == J.RECOVERING
    # Nothing is handed out while the cluster is short of rank 1.
    assert agents[0].ask().status_code == 204
    services.instance_provision(instance_id=replacement.pk)
    # The owner is not told to restart workers by hand (that would train beside the portal's run).
    whole = Notice.objects.get(user=alice, subject__startswith="Cluster whole again")
    assert "Job resnet's next run starts on every node" in whole.body
    assert "restart your workers" not in whole.body and whole.link == f"/jobs/{job.pk}/"
    agents[1] = Agent(Instance.objects.get(pk=replacement.pk))
    second = [agent.ask().json() for agent in agents]
    assert [(run["run"], run["rank"]) for run in second] == [(2, 0), (2, 1)]
    assert {run["env"]["JOB_RECOVERY"] for run in second} == {"1"}
    workers = json.loads(second[0]["env"]["TF_CONFIG"])["cluster"]["worker"]
    old = json.loads(runs[0]["env"]["TF_CONFIG"])["cluster"]["worker"]
    assert workers[0] == old[0] and workers[1] != old[1]  # the new node's address
    start(agents, second)
    exit_(agents[1], second[1], exit_code=0)
    exit_(agents[0], second[0], exit_code=0)
    job.refresh_from_db()
    assert job.status == J.SUCCEEDED and job.recoveries == 1
    outcomes = [(run.number, run.rank, run.outcome) for run in job.runs.all()]
    assert outcomes == [
        (1, 0, "stopped"),
        (1, 1, "interrupted"),
        (2, 0, "succeeded"),
        (2, 1, "succeeded"),
    ]


def test_one_rank_failing_stops_the_others_restarts_all_then_fails_keeping_all_nodes(submit, clock):
    job = submit(nodes=2, market="on_demand", max_restarts=1, keep_host_minutes=30)
    nodes = launch(job)
    agents, runs = hand_out(nodes)
    start(agents, runs)
    exit_(agents[0], runs[0], exit_code=3)
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.restarts == 1
    assert "exit code 3 on rank 0" in job.status_reason
    # Rank 1 hears "stop"; its own non-zero exit after that only records it.
    assert log(agents[1], runs[1], 0, b"peer lost\n")["stop"] is True
    assert agents[0].ask().status_code == 204  # rank 1's run has not ended yet
    exit_(agents[1], runs[1], exit_code=1)
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.restarts == 1
    _, second = hand_out(nodes)
    assert [run["run"] for run in second] == [2, 2]
    start(agents, second)
    exit_(agents[1], second[1], exit_code=7)
    job.refresh_from_db()
    assert job.status == J.FAILED and job.exit_code == 7
    # Both nodes of the last run are kept for the owner to look, then let go.
    assert {node.status for node in job.order.instances.all()} == {H.RUNNING}
    assert job.keep_host_until == clock.now + timedelta(minutes=30)
    kept = job.events.get(reason__contains="are kept until")
    assert nodes[0].name in kept.reason and nodes[1].name in kept.reason
    assert exit_(agents[0], second[0], exit_code=None, stopped=True)["status"] == "failed"
    clock.shift(timedelta(minutes=31))
    assert jobs_pass()["released"] == 1
    assert {node.status for node in job.order.instances.all()} == {H.TERMINATING}


def test_the_job_pass_recovers_a_cluster_job_whose_node_was_lost(submit):
    job = submit(nodes=2, market="on_demand")
    nodes = launch(job)
    agents, runs = hand_out(nodes)
    start(agents, runs)
    SimulatedProvider().kill(nodes[1].cloud_id)
    services.instance_sync(instance_id=nodes[1].pk)
    assert job.runs.get(rank=1).outcome == JobRun.Outcome.LOST
    assert jobs_pass()["host_lost"] == 1
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.recoveries == 1
    assert f"host {nodes[1].name} (rank 1) was lost under run 1" in job.status_reason
    replacement = nodes[1].replacements.get()
    assert replacement.rank == 1 and replacement.market == "on_demand"
    assert log(agents[0], runs[0], 0, b"")["stop"] is True
    # A second pass changes nothing: one recovery, one replacement.
    assert not any(jobs_pass().values())
    assert nodes[1].replacements.count() == 1 and not nodes[0].replacements.exists()


def test_a_recovering_cluster_job_whose_rank_has_no_host_gets_one_from_the_pass(submit):
    """A rank whose node ended unreplaced while the job waits (a worker died between the two)
    gets its replacement from the pass; the other rank keeps its host."""
    job = submit(nodes=2, market="on_demand", max_restarts=1)
    nodes = launch(job)
    agents, runs = hand_out(nodes)
    start(agents, runs)
    exit_(agents[0], runs[0], exit_code=3)
    exit_(agents[1], runs[1], exit_code=None, stopped=True)
    SimulatedProvider().kill(nodes[1].cloud_id)
    services.instance_sync(instance_id=nodes[1].pk)
    assert jobs_pass()["host_lost"] == 1
    replacement = nodes[1].replacements.get()
    assert replacement.rank == 1
    job.refresh_from_db()
    assert job.status == J.RECOVERING


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"nodes": 0}, "nodes"),
        ({"nodes": 10_000}, "nodes"),
        ({"nodes": "two"}, "nodes"),
        ({"nodes": 2, "env": {"TF_CONFIG": "{}"}}, "env"),
    ],
)
def test_bad_cluster_jobs_are_a_400_naming_the_field_and_create_nothing(
    api_as, alice, job_body, fields, field
):
    answer = api_as(alice).post("/api/v1/jobs/", job_body(**fields), format="json")
    assert answer.status_code == 400, answer.json()
    assert field in answer.json()["fields"], answer.json()
    message = answer.json()["fields"][field][0]
    assert message.endswith(".") and len(message) > 20
    assert not Job.objects.exists() and not Instance.objects.exists()


def test_a_cluster_job_is_admitted_for_all_its_nodes_and_a_rerun_keeps_them(submit, api_as, alice):
    job = submit(nodes=3, market="on_demand")
    assert job.order.gpu_count == 3 * job.order.instance_type.gpu_count
    nodes = launch(job)
    agents, runs = hand_out(nodes)
    for agent, run in zip(agents, runs, strict=True):
        start([agent], [run])
    answer = api_as(alice).post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert answer.json()["status"] == "cancelled"
    assert all(log(agent, run, 0, b"")["stop"] for agent, run in zip(agents, runs, strict=True))
    rerun = api_as(alice).post(f"/api/v1/jobs/{job.pk}/rerun/").json()
    assert rerun["nodes"] == 3


def test_a_worker_failing_because_its_peer_is_taken_back_is_a_recovery_not_a_failure(submit):
    """Rank 1's host is warned; rank 0's worker dies first (its peer went away) and its agent
    reports exit 1 before rank 1's reports the interruption: the job recovers, as from the
    interruption, without spending a restart."""
    job = submit(nodes=2, market="spot", max_restarts=0)
    nodes = launch(job)
    agents, runs = hand_out(nodes)
    start(agents, runs)
    SimulatedProvider().warn(nodes[1].cloud_id)
    services.spot_events_drain()
    exit_(agents[0], runs[0], exit_code=1)
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.recoveries == 1 and job.restarts == 0
    assert f"host {nodes[1].name} (rank 1) is being taken back" in job.status_reason
    assert "rank 0 ended with exit code 1" in job.status_reason
    exit_(agents[1], runs[1], exit_code=None, signal="SIGTERM", stopped=True, interrupted=True)
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.recoveries == 1
    assert nodes[1].replacements.count() == 1 and not nodes[0].replacements.exists()


def test_a_node_its_owner_terminates_under_a_run_is_replaced_and_the_run_restarted(
    submit, api_as, alice
):
    job = submit(nodes=2, market="on_demand")
    nodes = launch(job)
    agents, runs = hand_out(nodes)
    start(agents, runs)
    assert api_as(alice).post(f"/api/v1/instances/{nodes[1].pk}/terminate/").status_code == 202
    # Rank 1's agent is told to stop, and so is rank 0's: the run cannot go on without it.
    assert log(agents[1], runs[1], 0, b"")["stop"] is True
    assert log(agents[0], runs[0], 0, b"")["stop"] is True
    exit_(agents[1], runs[1], exit_code=None, signal="SIGTERM", stopped=True)
    exit_(agents[0], runs[0], exit_code=None, signal="SIGTERM", stopped=True)
    services.instance_sync(instance_id=nodes[1].pk)
    job.refresh_from_db()
    assert job.status == J.RUNNING  # no agent said what became of the run: the pass does
    assert jobs_pass()["host_lost"] == 1
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.recoveries == 1
    assert nodes[1].replacements.get().rank == 1


def test_two_nodes_lost_at_once_are_one_recovery_and_both_replaced(submit, api_as, alice):
    job = submit(nodes=3, market="on_demand", max_recoveries=1)
    nodes = launch(job)
    agents, runs = hand_out(nodes)
    start(agents, runs)
    SimulatedProvider().kill(nodes[1].cloud_id)
    services.instance_sync(instance_id=nodes[1].pk)
    # Its owner stops another node from its page.
    assert api_as(alice).post(f"/api/v1/instances/{nodes[2].pk}/stop/").status_code == 202
    services.instance_sync(instance_id=nodes[2].pk)
    assert Instance.objects.get(pk=nodes[2].pk).status in (H.STOPPING, H.STOPPED)
    assert jobs_pass()["host_lost"] == 1
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.recoveries == 1
    assert nodes[1].replacements.get().rank == 1
    assert nodes[2].replacements.get().rank == 2
    # The stopped node ends: the job runs on its replacement.
    assert Instance.objects.get(pk=nodes[2].pk).status == H.TERMINATING
    assert set(job.runs.filter(number=1, rank__in=[1, 2]).values_list("outcome", flat=True)) == {
        "lost"
    }
    assert not any(jobs_pass().values())
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.recoveries == 1


def test_a_run_whose_agent_never_reports_the_stop_stops_holding_back_the_next(submit, clock):
    job = submit(nodes=2, market="on_demand", max_restarts=1, grace_seconds=30)
    nodes = launch(job)
    agents, runs = hand_out(nodes)
    start(agents, runs)
    exit_(agents[0], runs[0], exit_code=3)  # a restart; rank 1's agent is gone
    assert agents[0].ask().status_code == 204
    clock.shift(timedelta(minutes=5, seconds=20))
    assert jobs_pass()["stale_runs"] == 0
    clock.shift(timedelta(seconds=20))
    assert jobs_pass()["stale_runs"] == 1
    assert job.runs.get(number=1, rank=1).outcome == "stopped"
    assert agents[0].ask().json()["run"] == 2


def test_progress_bars_keep_their_rank(submit, api_as, alice):
    job = submit(nodes=2, market="on_demand")
    agents, runs = hand_out(launch(job))
    start(agents, runs)
    log(agents[0], runs[0], 0, b"1/10 ===\r")
    log(agents[1], runs[1], 0, b"up\r\n")
    log(agents[0], runs[0], 9, b"2/10 ===\r\n")
    text = api_as(alice).get(f"/api/v1/jobs/{job.pk}/logs/").json()["text"]
    body = text.split("===\n", 1)[1]
    assert body == "[rank 0] 1/10 ===\r[rank 1] up\r\n[rank 0] 2/10 ===\r\n"
