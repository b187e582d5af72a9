"""Kubernetes: one batch/v1 Job per cell, built with the official client's models.

The Job runs the image under test itself (pinned by digest) with the payload
from ``verify/`` mounted read-only from a ConfigMap, so the node needs no
imagesmith; the verify report comes back as the payload's marker line in the
pod's log. Placement and limits are the class's: namespace,
``nvidia.com/gpu`` count, nodeSelector (e.g. ``nvidia.com/gpu.product``),
tolerations, an imagePullSecret (the Harbor robot account),
activeDeadlineSeconds, ttlSecondsAfterFinished; backoffLimit 0 and
restartPolicy Never (a failed verification is a verdict, not something to
retry); the pod runs non-root with no privilege escalation, all capabilities
dropped, the RuntimeDefault seccomp profile and no service-account token.

The cluster is reached through :class:`ClientApi` (BatchV1Api / CoreV1Api);
:class:`Kubernetes` takes any object with the same methods, so tests pass a
double. What ran against a real cluster is said in the README.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, Callable, Protocol, Sequence

from imagesmith.errors import UserError
from imagesmith.model import compat
from imagesmith.model.fleet import KubernetesPlacement
from imagesmith.model.platform import DEFAULT as DEFAULT_PLATFORM
from imagesmith.model.verifyreport import VerifyReport
from imagesmith.stages.fleet.jobs import ENDED, FINISHED, GONE, PENDING, RUNNING, CellJob, JobView
from imagesmith.stages.verify import judge, verify

MANAGED_BY = "imagesmith"
LABEL_RUN = "imagesmith.io/fleet-run"
LABEL_CLASS = "imagesmith.io/fleet-class"
JOB_NAME_LABEL = "job-name"
ARCH_LABEL = "kubernetes.io/arch"  # the well-known node label: amd64, arm64
CONTAINER = "verify"
INSTALL_HINT = "the kubernetes client is not installed: pip install 'imagesmith[kubernetes]'"


def _models() -> Any:
    try:
        from kubernetes import client
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return client


def _placement(job: CellJob) -> KubernetesPlacement:
    if job.klass.kubernetes is None:
        raise UserError(f"class {job.klass.name} is not a Kubernetes class")
    return job.klass.kubernetes


# -- pure: the objects -------------------------------------------------------------------------


def job_name(job: CellJob, suffix: str) -> str:
    return f"imagesmith-{job.klass.name}-{job.ref.sha256[7:19]}-{suffix}"


def payload_items(files: Sequence[str]) -> list[tuple[str, str]]:
    """ConfigMap keys (``[-._a-zA-Z0-9]+``) for the payload's paths, with the path each mounts at."""
    items = [(path.replace("/", "."), path) for path in files]
    if len({k for k, _ in items}) != len(items):
        raise UserError("two payload files map to one ConfigMap key; rename one of them in verify/")
    return items


def payload_config(job: CellJob) -> dict[str, Any]:
    options = verify.VerifyOptions(tier=job.tier, gpus="all" if job.klass.gpus else "none", require_gpu=bool(job.klass.gpus))
    return verify.payload_config({}, options, compat.load())


def config_map(job: CellJob, name: str) -> Any:
    c = _models()
    files = {k: v.decode() for k, v in verify.payload_files().items()} | {"config.json": json.dumps(payload_config(job), indent=2)}
    return c.V1ConfigMap(metadata=_meta(job, name), data={key: files[path] for key, path in payload_items(sorted(files))})


def _meta(job: CellJob, name: str) -> Any:
    c = _models()
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY, LABEL_RUN: job.run_id.lower(), LABEL_CLASS: job.klass.name}
    return c.V1ObjectMeta(name=name, namespace=_placement(job).namespace, labels=labels,
                          annotations={"imagesmith.io/image": str(job.ref)})


def job_object(job: CellJob, name: str) -> Any:
    """The batch/v1 Job for one cell."""
    c, k = _models(), _placement(job)
    return c.V1Job(
        api_version="batch/v1", kind="Job", metadata=_meta(job, name),
        spec=c.V1JobSpec(backoff_limit=0, active_deadline_seconds=k.deadline_s, ttl_seconds_after_finished=k.ttl_s,
                         template=c.V1PodTemplateSpec(metadata=c.V1ObjectMeta(labels=_meta(job, name).labels),
                                                      spec=_pod_spec(job, name))))


def _pod_spec(job: CellJob, name: str) -> Any:
    c, k = _models(), _placement(job)
    return c.V1PodSpec(
        restart_policy="Never", containers=[_container(job)], node_selector=_node_selector(job),
        tolerations=[c.V1Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect,
                                    toleration_seconds=t.seconds) for t in k.tolerations] or None,
        image_pull_secrets=[c.V1LocalObjectReference(name=k.image_pull_secret)] if k.image_pull_secret else None,
        automount_service_account_token=False, enable_service_links=False,
        security_context=c.V1PodSecurityContext(run_as_non_root=True, seccomp_profile=c.V1SeccompProfile(type="RuntimeDefault")),
        volumes=[c.V1Volume(name="payload", config_map=c.V1ConfigMapVolumeSource(
                     name=name, items=[c.V1KeyToPath(key=key, path=path) for key, path in payload_items(sorted(_payload_paths()))])),
                 c.V1Volume(name="shm", empty_dir=c.V1EmptyDirVolumeSource(medium="Memory", size_limit=k.shm_size))])


def _payload_paths() -> list[str]:
    return [*verify.payload_files(), "config.json"]


def _node_selector(job: CellJob) -> dict[str, str] | None:
    """The class's nodeSelector; a class of another platform than linux/amd64 also selects its nodes by the
    well-known label kubernetes.io/arch (unless the class names that label itself)."""
    selector = dict(_placement(job).node_selector)
    if job.klass.platform is not DEFAULT_PLATFORM:
        selector.setdefault(ARCH_LABEL, job.klass.platform.arch)
    return selector or None


def _container(job: CellJob) -> Any:
    c, k = _models(), _placement(job)
    limits = {"nvidia.com/gpu": str(job.klass.gpus)} if job.klass.gpus else {}
    limits |= {key: value for key, value in (("cpu", k.cpu), ("memory", k.memory)) if value}
    return c.V1Container(
        name=CONTAINER, image=str(job.ref), image_pull_policy="IfNotPresent",
        command=["python3", f"{verify.IN_CONTAINER}/run.py", "--config", f"{verify.IN_CONTAINER}/config.json", "--emit-marker"],
        env=[c.V1EnvVar(name="PYTHONUNBUFFERED", value="1"), c.V1EnvVar(name="NCCL_NVLS_ENABLE", value="0")],
        resources=c.V1ResourceRequirements(limits=limits or None, requests=limits or None),
        volume_mounts=[c.V1VolumeMount(name="payload", mount_path=verify.IN_CONTAINER, read_only=True),
                       c.V1VolumeMount(name="shm", mount_path="/dev/shm")],
        security_context=c.V1SecurityContext(allow_privilege_escalation=False, capabilities=c.V1Capabilities(drop=["ALL"])))


def to_dict(obj: Any) -> dict[str, Any]:
    """A model as the API server receives it (camelCase, no nulls)."""
    return dict(_models().ApiClient().sanitize_for_serialization(obj))


# -- pure: what the cluster says -----------------------------------------------------------------


def view_of(job_id: str, job: Any, pods: Sequence[Any]) -> JobView:
    """A Job and its pods -> one view."""
    if job is None:
        return JobView(job_id, GONE, "NotFound")
    pod = pods[-1] if pods else None
    status = job.status
    failed = next((cond for cond in status.conditions or [] if cond.type == "Failed" and cond.status == "True"), None)
    if status.succeeded:
        return JobView(job_id, FINISHED, "Complete", node=_node(pod))
    if failed is not None or status.failed:
        return _failed_view(job_id, failed.reason if failed else "Failed", pod)
    if pod is not None and pod.status.phase == "Running":
        return JobView(job_id, RUNNING, "Running", node=_node(pod))
    return JobView(job_id, PENDING, "Pending", reason=_why_pending(pod))


def _node(pod: Any) -> str:
    return str(pod.spec.node_name or "") if pod is not None and pod.spec is not None else ""


def _failed_view(job_id: str, reason: str, pod: Any) -> JobView:
    """The container ended by itself (a report is expected), or was stopped from outside."""
    if reason == "DeadlineExceeded":
        return JobView(job_id, ENDED, "DeadlineExceeded", node=_node(pod))
    if pod is not None and (pod.status.reason == "Evicted" or _disrupted(pod)):
        return JobView(job_id, ENDED, "Evicted" if pod.status.reason == "Evicted" else "DisruptionTarget", node=_node(pod))
    term = _terminated(pod)
    if term is not None and term.reason == "OOMKilled":
        return JobView(job_id, ENDED, "OOMKilled", node=_node(pod), exit_code=str(term.exit_code))
    return JobView(job_id, FINISHED, reason, node=_node(pod), exit_code=str(term.exit_code) if term else "")


def _disrupted(pod: Any) -> bool:
    return any(cond.type == "DisruptionTarget" and cond.status == "True" for cond in pod.status.conditions or [])


def _terminated(pod: Any) -> Any:
    for cs in (pod.status.container_statuses or []) if pod is not None else []:
        if cs.state is not None and cs.state.terminated is not None:
            return cs.state.terminated
    return None


def _why_pending(pod: Any) -> str:
    if pod is None:
        return "no pod yet"
    for cs in pod.status.container_statuses or []:
        if cs.state is not None and cs.state.waiting is not None:
            return f"{cs.state.waiting.reason}: {cs.state.waiting.message or ''}".strip(": ")
    for cond in pod.status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False":
            return f"{cond.reason}: {cond.message or ''}".strip(": ")
    return str(pod.status.phase or "Pending")


# -- the cluster ------------------------------------------------------------------------------------


class KubeApi(Protocol):
    def create_config_map(self, namespace: str, body: Any) -> Any: ...
    def create_job(self, namespace: str, body: Any) -> Any: ...
    def own_config_map(self, namespace: str, name: str, owner: Any) -> None: ...
    def read_job(self, namespace: str, name: str) -> Any: ...
    def list_pods(self, namespace: str, job: str) -> list[Any]: ...
    def read_log(self, namespace: str, pod: str) -> str: ...
    def delete_job(self, namespace: str, name: str) -> None: ...
    def delete_config_map(self, namespace: str, name: str) -> None: ...


class ClientApi:
    """The real cluster through the official client (kubeconfig context, else in-cluster)."""

    def __init__(self, context: str | None = None) -> None:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        try:
            config.load_kube_config(context=context)
        except (ConfigException, OSError, TypeError):
            try:
                config.load_incluster_config()
            except ConfigException:
                raise UserError(f"no Kubernetes cluster configured (kubeconfig{' context ' + context if context else ''}, "
                                f"or in-cluster service account): set KUBECONFIG or the class's context:") from None
        self.batch, self.core, self.client = client.BatchV1Api(), client.CoreV1Api(), client

    def create_config_map(self, namespace: str, body: Any) -> Any:
        return _edge(lambda: self.core.create_namespaced_config_map(namespace, body))

    def create_job(self, namespace: str, body: Any) -> Any:
        return _edge(lambda: self.batch.create_namespaced_job(namespace, body))

    def own_config_map(self, namespace: str, name: str, owner: Any) -> None:
        _edge(lambda: self.core.patch_namespaced_config_map(name, namespace, {"metadata": {"ownerReferences": [owner]}}))

    def read_job(self, namespace: str, name: str) -> Any:
        return _edge(lambda: self.batch.read_namespaced_job_status(name, namespace), missing_ok=True)

    def list_pods(self, namespace: str, job: str) -> list[Any]:
        return list(_edge(lambda: self.core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={job}")).items)

    def read_log(self, namespace: str, pod: str) -> str:
        return str(_edge(lambda: self.core.read_namespaced_pod_log(pod, namespace, container=CONTAINER), missing_ok=True) or "")

    def delete_job(self, namespace: str, name: str) -> None:
        _edge(lambda: self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background"), missing_ok=True)

    def delete_config_map(self, namespace: str, name: str) -> None:
        _edge(lambda: self.core.delete_namespaced_config_map(name, namespace), missing_ok=True)


def _edge(call: Callable[[], Any], missing_ok: bool = False) -> Any:
    """One API call; its failures become UserErrors with the status (a 404 is None where that is an answer)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return call()
    except ApiException as exc:
        if exc.status == 404 and missing_ok:
            return None
        hint = {401: "the kubeconfig's credentials were refused", 403: "the account may not do this: give it RBAC on jobs, "
                "configmaps, pods and pods/log in the namespace"}.get(exc.status or 0, "")
        raise UserError(f"Kubernetes API: {exc.status} {exc.reason}" + (f" ({hint})" if hint else "")) from None
    except (HTTPError, OSError) as exc:
        raise UserError(f"cannot reach the Kubernetes API server: {exc}") from None


class Kubernetes:
    """Jobs on a cluster; ``api`` makes the cluster client for a context (a seam)."""

    name = "kubernetes"

    def __init__(self, api: Callable[[str | None], KubeApi] = ClientApi, suffix: Callable[[], str] = lambda: secrets.token_hex(3)) -> None:
        self.api_for, self.suffix = api, suffix
        self.apis: dict[str | None, KubeApi] = {}
        self.jobs: dict[str, CellJob] = {}

    def _api(self, job: CellJob) -> KubeApi:
        context = _placement(job).context
        if context not in self.apis:
            self.apis[context] = self.api_for(context)
        return self.apis[context]

    def submit(self, job: CellJob) -> str:
        ns, name = _placement(job).namespace, job_name(job, self.suffix())
        api = self._api(job)
        try:
            api.create_config_map(ns, config_map(job, name))
            created = api.create_job(ns, job_object(job, name))
            owner = _models().V1OwnerReference(api_version="batch/v1", kind="Job", name=name, uid=created.metadata.uid,
                                               block_owner_deletion=False)
            api.own_config_map(ns, name, owner)
        except UserError as exc:
            api.delete_config_map(ns, name)
            raise UserError(f"the cluster refused Job {ns}/{name}: {exc}") from None
        self.jobs[f"{ns}/{name}"] = job
        return f"{ns}/{name}"

    def status(self, job_ids: Sequence[str]) -> dict[str, JobView]:
        out = {}
        for job_id in job_ids:
            ns, name = job_id.split("/", 1)
            api = self._api(self.jobs[job_id])
            out[job_id] = view_of(job_id, api.read_job(ns, name), api.list_pods(ns, name))
        return out

    def cancel(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            ns, name = job_id.split("/", 1)
            api = self._api(self.jobs[job_id])
            api.delete_job(ns, name)
            api.delete_config_map(ns, name)

    def _log(self, job: CellJob, view: JobView) -> str:
        ns, name = view.job_id.split("/", 1)
        api = self._api(job)
        pods = api.list_pods(ns, name)
        return api.read_log(ns, pods[-1].metadata.name) if pods else ""

    def report(self, job: CellJob, view: JobView) -> VerifyReport | None:
        return judge.finished_marker(self._log(job, view), job.ref)

    def output_tail(self, job: CellJob, view: JobView, lines: int = 5) -> list[str]:
        return [line for line in self._log(job, view).splitlines() if line.strip()][-lines:]
