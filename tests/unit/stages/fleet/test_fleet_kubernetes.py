"""Kubernetes Jobs built with the official client's models, tested as tables
(resources, selectors, tolerations, secrets, deadlines, security), and the
submit / watch / collect / delete cycle against a double of the cluster API.
No API server runs here: see the README for what ran against a real cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from imagesmith.errors import UserError
from imagesmith.model import fleet as config
from imagesmith.model.fleetreport import FleetReport
from imagesmith.stages.fleet import kubernetes, runner
from imagesmith.stages.fleet.jobs import ENDED, FINISHED, GONE, PENDING, RUNNING, CellJob, JobView
from imagesmith.stages.verify import verify

DIGEST = "sha256:" + "ab" * 32
REF = config.parse_ref(f"harbor.example.com/ml/pytorch@{DIGEST}")
L40S = """\
classes:
  l40s:
    gpu: NVIDIA L40S
    gpus: 2
    kubernetes:
      namespace: ml-verify
      node_selector: {nvidia.com/gpu.product: NVIDIA-L40S, topology.kubernetes.io/zone: eu-1a}
      tolerations:
        - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
        - {key: dedicated, operator: Equal, value: ml, effect: NoExecute, seconds: 60}
      image_pull_secret: harbor-robot
      deadline: 45m
      ttl: 2h
      cpu: "8"
      memory: 64Gi
      shm_size: 16Gi
"""
CPU = "classes:\n  cpu:\n    gpus: 0\n    kubernetes: {namespace: ci}\n"


def job_for(text: str = L40S, tier: str = "quick") -> CellJob:
    fleet = config.parse(text, Path("fleet.yaml"))
    return CellJob(REF, fleet.classes[0], tier, Path("/tmp/out"), "20261130T101500Z-ABC123")


def as_dict(text: str = L40S) -> dict[str, Any]:
    job = job_for(text)
    return kubernetes.to_dict(kubernetes.job_object(job, kubernetes.job_name(job, "f00d01")))


def dig(d: Any, path: str) -> Any:
    for part in path.split("."):
        d = d[int(part)] if isinstance(d, list) else d.get(part) if d is not None else None
    return d


SPEC = "spec.template.spec"
C0 = SPEC + ".containers.0"
OBJECT_TABLE = [
    ("apiVersion", "batch/v1"), ("kind", "Job"),
    ("metadata.name", "imagesmith-l40s-abababababab-f00d01"), ("metadata.namespace", "ml-verify"),
    ("metadata.labels", {"app.kubernetes.io/managed-by": "imagesmith", "imagesmith.io/fleet-run": "20261130t101500z-abc123",
                         "imagesmith.io/fleet-class": "l40s"}),
    ("metadata.annotations", {"imagesmith.io/image": str(REF)}),
    ("spec.backoffLimit", 0), ("spec.activeDeadlineSeconds", 2700), ("spec.ttlSecondsAfterFinished", 7200),
    (SPEC + ".restartPolicy", "Never"),
    (SPEC + ".nodeSelector", {"nvidia.com/gpu.product": "NVIDIA-L40S", "topology.kubernetes.io/zone": "eu-1a"}),
    (SPEC + ".tolerations", [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
                             {"effect": "NoExecute", "key": "dedicated", "operator": "Equal", "tolerationSeconds": 60, "value": "ml"}]),
    (SPEC + ".imagePullSecrets", [{"name": "harbor-robot"}]),
    (SPEC + ".automountServiceAccountToken", False), (SPEC + ".enableServiceLinks", False),
    (SPEC + ".securityContext", {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}),
    (C0 + ".image", str(REF)), (C0 + ".imagePullPolicy", "IfNotPresent"),
    (C0 + ".command", ["python3", "/opt/imagesmith/verify/run.py", "--config", "/opt/imagesmith/verify/config.json", "--emit-marker"]),
    (C0 + ".resources", {"limits": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "64Gi"},
                         "requests": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "64Gi"}}),
    (C0 + ".securityContext", {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}),
    (C0 + ".volumeMounts", [{"mountPath": "/opt/imagesmith/verify", "name": "payload", "readOnly": True},
                            {"mountPath": "/dev/shm", "name": "shm"}]),
    (SPEC + ".volumes.1", {"emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}, "name": "shm"}),
    (SPEC + ".volumes.0.configMap.name", "imagesmith-l40s-abababababab-f00d01"),
]


@pytest.mark.parametrize("path, value", OBJECT_TABLE)
def test_the_job_object(path: str, value: Any) -> None:
    assert dig(as_dict(), path) == value


@pytest.mark.parametrize("path, value", [
    (C0 + ".resources", {}), (SPEC + ".nodeSelector", None), (SPEC + ".tolerations", None), (SPEC + ".imagePullSecrets", None),
    ("spec.activeDeadlineSeconds", 1800), ("spec.ttlSecondsAfterFinished", 3600),
    (SPEC + ".volumes.1.emptyDir.sizeLimit", "8Gi"),
])
def test_a_cpu_class_asks_for_no_gpu_and_gets_the_defaults(path: str, value: Any) -> None:
    assert dig(as_dict(CPU), path) == value


def test_the_longest_class_name_still_makes_a_valid_job_name() -> None:
    name = "c" + "x" * 30
    job = job_for(f"classes:\n  {name}:\n    gpus: 0\n    kubernetes: {{namespace: ci}}\n")
    assert len(kubernetes.job_name(job, "f00d01")) <= 63 and config.DNS_LABEL.fullmatch(kubernetes.job_name(job, "f00d01"))


def test_the_config_map_carries_the_payload_and_a_gpu_config() -> None:
    job = job_for()
    cm = kubernetes.to_dict(kubernetes.config_map(job, "n"))
    items = dig(as_dict(), SPEC + ".volumes.0.configMap.items")
    assert sorted(i["key"] for i in items) == sorted(cm["data"])
    assert all(re.fullmatch(r"[-._a-zA-Z0-9]+", k) for k in cm["data"])
    assert {i["path"] for i in items} == set(verify.payload_files()) | {"config.json"}
    assert cm["data"]["imagesmith_payload.checks.gemm.py"] == verify.payload_files()["imagesmith_payload/checks/gemm.py"].decode()
    conf = json.loads(cm["data"]["config.json"])
    assert conf["tier"] == "quick" and conf["require_gpu"] is True
    assert sum(len(v) for v in cm["data"].values()) < 1_000_000  # a ConfigMap holds at most 1 MiB


def test_colliding_config_map_keys_are_refused() -> None:
    with pytest.raises(UserError, match="two payload files map to one ConfigMap key"):
        kubernetes.payload_items(["a/b.py", "a.b.py"])


# -- what the cluster says -> a view ----------------------------------------------------------------


def pod(phase: str = "Running", waiting: tuple[str, str] | None = None, terminated: tuple[str, int] | None = None,
        reason: str | None = None, conditions: list[tuple[str, str, str]] | None = None) -> Any:
    state = client.V1ContainerState(
        waiting=client.V1ContainerStateWaiting(reason=waiting[0], message=waiting[1]) if waiting else None,
        terminated=client.V1ContainerStateTerminated(reason=terminated[0], exit_code=terminated[1]) if terminated else None)
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="p-1"), spec=client.V1PodSpec(containers=[], node_name="gpu-node-7"),
        status=client.V1PodStatus(phase=phase, reason=reason, container_statuses=[client.V1ContainerStatus(
            name="verify", image="i", image_id="", ready=False, restart_count=0, state=state)],
            conditions=[client.V1PodCondition(type=t, status=s, reason=r, message="0/12 nodes are available") for t, s, r in conditions or []]))


def kjob(succeeded: int = 0, failed: int = 0, active: int = 0, condition: str | None = None) -> Any:
    conds = [client.V1JobCondition(type="Failed", status="True", reason=condition)] if condition else None
    return client.V1Job(status=client.V1JobStatus(succeeded=succeeded, failed=failed, active=active, conditions=conds))


VIEWS = [
    (None, [], (GONE, "NotFound", "")),
    (kjob(active=1), [], (PENDING, "Pending", "no pod yet")),
    (kjob(active=1), [pod("Pending", conditions=[("PodScheduled", "False", "Unschedulable")])],
     (PENDING, "Pending", "Unschedulable: 0/12 nodes are available")),
    (kjob(active=1), [pod("Pending", waiting=("ImagePullBackOff", "401 Unauthorized"))],
     (PENDING, "Pending", "ImagePullBackOff: 401 Unauthorized")),
    (kjob(active=1), [pod("Running")], (RUNNING, "Running", "")),
    (kjob(succeeded=1), [pod("Succeeded", terminated=("Completed", 0))], (FINISHED, "Complete", "")),
    (kjob(failed=1, condition="BackoffLimitExceeded"), [pod("Failed", terminated=("Error", 1))], (FINISHED, "BackoffLimitExceeded", "")),
    (kjob(failed=1, condition="BackoffLimitExceeded"), [pod("Failed", terminated=("OOMKilled", 137))], (ENDED, "OOMKilled", "")),
    (kjob(failed=1, condition="DeadlineExceeded"), [pod("Failed")], (ENDED, "DeadlineExceeded", "")),
    (kjob(failed=1, condition="BackoffLimitExceeded"), [pod("Failed", reason="Evicted")], (ENDED, "Evicted", "")),
    (kjob(failed=1, condition="BackoffLimitExceeded"), [pod("Failed", conditions=[("DisruptionTarget", "True", "PreemptionByScheduler")])],
     (ENDED, "DisruptionTarget", "")),
]


@pytest.mark.parametrize("job, pods, expected", VIEWS)
def test_views(job: Any, pods: list[Any], expected: tuple[str, str, str]) -> None:
    view = kubernetes.view_of("ml/j", job, pods)
    assert (view.phase, view.state, view.reason) == expected


# -- the cycle against a double ---------------------------------------------------------------------


class FakeCluster:
    """Records what was created and deleted; plays a pod through a script of (job, pod) states."""

    def __init__(self, states: list[tuple[Any, list[Any]]], log: str = "") -> None:
        self.states, self.log = states, log
        self.created: dict[str, Any] = {}
        self.deleted: list[str] = []
        self.owners: dict[str, Any] = {}
        self.contexts: list[str | None] = []
        self.reads = 0

    def __call__(self, context: str | None) -> "FakeCluster":
        self.contexts.append(context)
        return self

    def create_config_map(self, namespace: str, body: Any) -> Any:
        self.created[f"cm/{namespace}/{body.metadata.name}"] = body
        return body

    def create_job(self, namespace: str, body: Any) -> Any:
        self.created[f"job/{namespace}/{body.metadata.name}"] = body
        return client.V1Job(metadata=client.V1ObjectMeta(name=body.metadata.name, uid="uid-1"))

    def own_config_map(self, namespace: str, name: str, owner: Any) -> None:
        self.owners[name] = owner

    def read_job(self, namespace: str, name: str) -> Any:
        self.reads += 1
        return self.states[min(self.reads - 1, len(self.states) - 1)][0]

    def list_pods(self, namespace: str, job: str) -> list[Any]:
        return self.states[min(max(self.reads - 1, 0), len(self.states) - 1)][1]

    def read_log(self, namespace: str, pod: str) -> str:
        return self.log

    def delete_job(self, namespace: str, name: str) -> None:
        self.deleted.append(f"job/{namespace}/{name}")

    def delete_config_map(self, namespace: str, name: str) -> None:
        self.deleted.append(f"cm/{namespace}/{name}")


def marker(ok: bool) -> str:
    report = {"schema": "imagesmith.verify-report/1", "summary": {"ok": ok, "pass": 3, "fail": int(not ok)},
              "checks": [{"id": "versions.torch", "status": "pass" if ok else "fail"}],
              "environment": {"gpus": [{"name": "NVIDIA L40S"}, {"name": "NVIDIA L40S"}]}}
    return "progress line\n" + verify.MARKER + json.dumps(report) + "\n"


def fleet_run(tmp_path: Path, cluster: FakeCluster) -> FleetReport:
    path = tmp_path / "fleet.yaml"
    path.write_text(L40S)
    fleet = config.load(path)
    jobs = runner.cell_jobs(fleet, [REF], tmp_path / "out", "run1", None)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    sched = kubernetes.Kubernetes(cluster, suffix=lambda: "f00d01")
    return runner.FleetRun(jobs, {"kubernetes": sched}, tmp_path / "out", fleet, poll_s=5, clock=lambda: now[0], sleep=sleep,
                           cancel_wait_s=20).run()


def test_a_job_that_passes_is_collected_from_the_pod_log(tmp_path: Path) -> None:
    cluster = FakeCluster([(kjob(active=1), [pod("Running")]), (kjob(succeeded=1), [pod("Succeeded", terminated=("Completed", 0))])],
                          marker(True))
    (cell,) = fleet_run(tmp_path, cluster).cells
    assert cell.status == "pass" and cell.job_id == "ml-verify/imagesmith-l40s-abababababab-f00d01" and cell.node == "gpu-node-7"
    assert sorted(cluster.created) == ["cm/ml-verify/imagesmith-l40s-abababababab-f00d01", "job/ml-verify/imagesmith-l40s-abababababab-f00d01"]
    owner = cluster.owners["imagesmith-l40s-abababababab-f00d01"]
    assert (owner.kind, owner.uid) == ("Job", "uid-1")  # the ConfigMap goes with the Job (TTL)
    assert cluster.deleted == [] and cluster.contexts == [None]
    assert cell.gpus == ("NVIDIA L40S", "NVIDIA L40S")


def test_failed_checks_fail_the_cell(tmp_path: Path) -> None:
    cluster = FakeCluster([(kjob(failed=1, condition="BackoffLimitExceeded"), [pod("Failed", terminated=("Error", 1))])], marker(False))
    (cell,) = fleet_run(tmp_path, cluster).cells
    assert cell.status == "fail" and cell.reason == "failed checks: versions.torch"


def test_a_deadline_without_a_report_is_a_clear_failure(tmp_path: Path) -> None:
    cluster = FakeCluster([(kjob(failed=1, condition="DeadlineExceeded"), [pod("Failed")])], "progress line\n")
    (cell,) = fleet_run(tmp_path, cluster).cells
    assert cell.reason == "Kubernetes stopped the Job at its deadline (45m00s) before it wrote a report; last output: progress line"


def test_an_unschedulable_pod_is_deleted_at_the_start_deadline(tmp_path: Path) -> None:
    cluster = FakeCluster([(kjob(active=1), [pod("Pending", conditions=[("PodScheduled", "False", "Unschedulable")])]),
                           (None, [])])
    cluster.states = [cluster.states[0]] * 400 + [(None, [])]
    (cell,) = fleet_run(tmp_path, cluster).cells
    assert cell.status == "fail" and cell.reason.startswith("never started: still pending after 30m05s (Unschedulable: 0/12 nodes are available)")
    assert cluster.deleted == ["job/ml-verify/imagesmith-l40s-abababababab-f00d01", "cm/ml-verify/imagesmith-l40s-abababababab-f00d01"]


def test_a_refused_job_leaves_no_config_map(tmp_path: Path) -> None:
    from kubernetes.client.exceptions import ApiException

    class Refusing(FakeCluster):
        def create_job(self, namespace: str, body: Any) -> Any:
            return kubernetes._edge(lambda: (_ for _ in ()).throw(ApiException(status=403, reason="Forbidden")))

    cluster = Refusing([(None, [])])
    (cell,) = fleet_run(tmp_path, cluster).cells
    assert cell.reason == ("not submitted: the cluster refused Job ml-verify/imagesmith-l40s-abababababab-f00d01: Kubernetes API: "
                           "403 Forbidden (the account may not do this: give it RBAC on jobs, configmaps, pods and pods/log in the namespace)")
    assert cluster.deleted == ["cm/ml-verify/imagesmith-l40s-abababababab-f00d01"]


def test_no_cluster_configured_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(UserError, match=r"^no Kubernetes cluster configured \(kubeconfig context prod, or in-cluster service account\)"):
        kubernetes.ClientApi("prod")


def test_a_view_is_a_jobview() -> None:
    assert kubernetes.view_of("a/b", None, []) == JobView("a/b", GONE, "NotFound")


@pytest.mark.parametrize("error, message", [
    ("404", None), ("500", "Kubernetes API: 500 Internal Server Error"),
    ("conn", "cannot reach the Kubernetes API server: connection refused"),
])
def test_api_failures_become_user_errors(error: str, message: str | None) -> None:
    from kubernetes.client.exceptions import ApiException

    def call() -> Any:
        if error == "conn":
            raise ConnectionRefusedError("connection refused")
        raise ApiException(status=int(error), reason="Not Found" if error == "404" else "Internal Server Error")

    if message is None:
        assert kubernetes._edge(call, missing_ok=True) is None
    else:
        with pytest.raises(UserError) as exc:
            kubernetes._edge(call, missing_ok=True)
        assert str(exc.value) == message
