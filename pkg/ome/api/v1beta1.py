"""OME's ``ome.io/v1beta1`` kinds as TypedDicts over the JSON the API server stores: the single
source of truth for field names, types and descriptions (``ome.api.crdgen`` builds the CRDs
from them), plus the label, annotation and finalizer names. It never performs I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Required, TypedDict

from ome.kube import Resource

GROUP = "ome.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

# -- labels, annotations, finalizers ------------------------------------------------------

LABEL_INFERENCE_SERVICE = "ome.io/inferenceservice"
LABEL_COMPONENT = "component"
LABEL_MANAGED_BY = "ome.io/managed-by"
MANAGED_BY_OMENATIVE = "OMENative"
LABEL_INSTANCE_INDEX = "ome.io/instance-index"
LABEL_RUNNER = "ome.io/runner"
LABEL_REVISION_HASH = "ome.io/revision-hash"
LABEL_POD_ORDINAL = "ome.io/pod-ordinal"
LABEL_INCARNATION = "ome.io/incarnation"
#: The InferenceReplica's own name, on its pods and ControllerRevisions, so they map back to it.
LABEL_INFERENCE_REPLICA = "ome.io/inferencereplica"

ANNOTATION_TPU_SLICE_PROVISIONING = "ome.io/tpu-slice-provisioning"

FINALIZER_IR_TEARDOWN = "ome.io/ir-teardown"

#: The most worker pods an Instance may have: more than the hosts of any TPU slice, and few
#: enough that every pass over an Instance's pods stays cheap. The CRDs' maximum on
#: ``worker.size`` and a runner's ``size``; the controllers refuse a larger size that an
#: older CRD let in.
MAX_WORKERS = 4096

# -- well-known values ----------------------------------------------------------------------

DEPLOYMENT_MODE_OMENATIVE = "OMENative"
COMPONENTS = ("engine", "decoder", "router")
RUNNER_DEFAULT = "default"
RUNNER_LEADER = "leader"
RUNNER_WORKER = "worker"
CONDITION_READY = "Ready"
INSTANCE_PHASES = (
    "Pending",
    "Creating",
    "Ready",
    "Updating",
    "Restarting",
    "Migrating",
    "Failed",
    "Deleting",
)
OPERATION_TYPES = ("Create", "Update", "Restart", "Migrate", "Delete")

# -- schema metadata carried by the types ---------------------------------------------------


@dataclass(frozen=True)
class Field:
    """Schema facts of a field or a type, carried as ``Annotated`` metadata. When several apply
    (an alias annotated again at its use), each fact set on the outer one wins."""

    description: str | None = None
    string_format: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    min_items: int | None = None
    preserve_unknown: bool = False
    embedded_resource: bool | None = None


@dataclass(frozen=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry."""

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0


@dataclass(frozen=True)
class ScaleSubresource:
    """The ``scale`` subresource's paths."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None


@dataclass(frozen=True)
class Kind:
    """A kind's CRD facts: its names, where it is served, its object type and its columns."""

    kind: str
    singular: str
    short_names: tuple[str, ...]
    resource: Resource
    object_type: object  # the kind's TypedDict class
    printer_columns: tuple[PrinterColumn, ...]
    scale: ScaleSubresource | None = None

    @property
    def crd_name(self) -> str:
        return f"{self.resource.plural}.{self.resource.group}"


# -- shared pieces --------------------------------------------------------------------------

DateTime = Annotated[str, Field(string_format="date-time")]
"""An RFC 3339 timestamp, e.g. ``2025-01-02T03:04:05Z``."""

StringMap = dict[str, str]
Quantity = int | str
"""A resource quantity: ``4``, ``"500m"``, ``"16Gi"`` (``x-kubernetes-int-or-string``)."""

FreeForm = dict[str, Any]
"""An object whose fields the schema leaves unchecked (``x-kubernetes-preserve-unknown-fields``)."""


class ObjectMeta(TypedDict, total=False):
    """Standard object metadata; only what this package reads is typed."""

    name: str
    namespace: str
    uid: str
    generation: int
    resourceVersion: str
    labels: StringMap
    annotations: StringMap
    finalizers: list[str]
    ownerReferences: list[FreeForm]
    creationTimestamp: str
    deletionTimestamp: str


class Toleration(TypedDict, total=False):
    """A pod toleration, as in core/v1."""

    key: Annotated[str, Field("The taint key the toleration applies to; empty matches all.")]
    operator: Annotated[str, Field("Exists or Equal (the default).")]
    value: Annotated[str, Field("The taint value the toleration matches, with Equal.")]
    effect: Annotated[str, Field("NoSchedule, PreferNoSchedule or NoExecute; empty matches all.")]
    tolerationSeconds: Annotated[
        int, Field("With NoExecute, how long the pod stays bound after the taint appears.")
    ]


class ResourceRequirements(TypedDict, total=False):
    """Compute resources of a container, as in core/v1."""

    requests: Annotated[
        dict[str, Quantity],
        Field("Minimum resources the container needs, e.g. google.com/tpu: 4."),
    ]
    limits: Annotated[dict[str, Quantity], Field("Maximum resources the container may use.")]


class Runner(TypedDict, total=False):
    """The serving container. Fields of a core/v1 Container not listed here are kept as given
    and passed to the pod unchanged."""

    name: Annotated[str, Field("Name of the container, e.g. ome-container.")]
    image: Annotated[str, Field("Container image to run.")]
    command: Annotated[list[str], Field("Entrypoint array; the image's ENTRYPOINT if unset.")]
    args: Annotated[list[str], Field("Arguments to the entrypoint; the image's CMD if unset.")]
    env: Annotated[list[FreeForm], Field("Environment variables (core/v1 EnvVar objects).")]
    ports: Annotated[list[FreeForm], Field("Ports to expose (core/v1 ContainerPort objects).")]
    resources: Annotated[ResourceRequirements, Field("Compute resource requests and limits.")]
    volumeMounts: Annotated[
        list[FreeForm], Field("Volumes to mount (core/v1 VolumeMount objects).")
    ]


RunnerSpec = Annotated[Runner, Field(preserve_unknown=True)]
"""The runner container as it appears in specs: unknown container fields are preserved."""


class LeaderSpec(TypedDict, total=False):
    """The leader pod of a multi-host Instance."""

    runner: Annotated[RunnerSpec, Field("The leader's serving container.")]
    nodeSelector: Annotated[StringMap, Field("Node labels the leader pod must match.")]
    tolerations: Annotated[list[Toleration], Field("Tolerations of the leader pod.")]


class WorkerSpec(TypedDict, total=False):
    """The worker pods of a multi-host Instance."""

    size: Annotated[
        int,
        Field("Number of worker pods per Instance, besides the leader.", maximum=MAX_WORKERS),
    ]
    runner: Annotated[RunnerSpec, Field("The workers' serving container.")]
    nodeSelector: Annotated[StringMap, Field("Node labels the worker pods must match.")]
    tolerations: Annotated[list[Toleration], Field("Tolerations of the worker pods.")]


class Lifecycle(TypedDict, total=False):
    """Deadlines of Instance operations, as Go durations (``90s``, ``10m``, ``1h30m``). One
    type for the InferenceReplica's ``spec.lifecycle`` and for the component's and runtime's
    ``lifecycle`` it is projected from, so the three cannot drift apart."""

    instanceReadyTimeout: Annotated[
        str,
        Field(
            "How long an Instance's pods may take to be Ready once created (while not held), "
            "as a Go duration, e.g. 10m; unset or unreadable, there is no deadline."
        ),
    ]
    teardownTimeout: Annotated[
        str,
        Field(
            "How long deletion waits for the pods and Slices to go before it finishes anyway, "
            "as a Go duration, e.g. 10m; unset or unreadable, 10m."
        ),
    ]


class EngineConfig(TypedDict, total=False):
    """A pod spec fragment: what a component's pods get unless the InferenceService's
    component sets it."""

    annotations: Annotated[StringMap, Field("Annotations added to the pods' templates.")]
    labels: Annotated[StringMap, Field("Labels added to the pods' templates.")]
    nodeSelector: Annotated[StringMap, Field("Node labels the pods must match.")]
    tolerations: Annotated[list[Toleration], Field("Tolerations of the pods.")]
    runner: Annotated[RunnerSpec, Field("The serving container of single-pod Instances.")]
    leader: Annotated[LeaderSpec, Field("The leader pod of multi-host Instances.")]
    worker: Annotated[WorkerSpec, Field("The worker pods of multi-host Instances.")]
    lifecycle: Annotated[
        Lifecycle,
        Field(
            "Deadlines of the Instances' operations, copied to the InferenceReplica's "
            "spec.lifecycle; each field the InferenceService's component sets wins over the "
            "runtime's."
        ),
    ]


class ComponentSpec(EngineConfig, total=False):
    """One component of an InferenceService (engine, decoder or router). Its values win over
    the serving runtime's engineConfig. Set leader and worker for multi-host Instances,
    runner alone for single-pod Instances."""

    minReplicas: Annotated[int, Field("Fewest Instances of the component.")]
    maxReplicas: Annotated[int, Field("Most Instances of the component.")]


class Condition(TypedDict, total=False):
    """One aspect of an object's current state."""

    type: Required[Annotated[str, Field("Type of the condition, e.g. Ready.")]]
    status: Required[
        Annotated[Literal["True", "False", "Unknown"], Field("True, False or Unknown.")]
    ]
    reason: Annotated[str, Field("Machine-readable CamelCase reason for the last transition.")]
    message: Annotated[str, Field("Human-readable details of the last transition.")]
    lastTransitionTime: Annotated[DateTime, Field("When the status last changed.")]
    observedGeneration: Annotated[int, Field("The metadata.generation the condition was set from.")]


class _Object(TypedDict, total=False):
    apiVersion: Annotated[
        str, Field("Versioned schema of this representation of an object: ome.io/v1beta1.")
    ]
    kind: Annotated[str, Field("The REST resource this object represents, in CamelCase.")]
    metadata: Annotated[ObjectMeta, Field("Standard object metadata.")]


# -- BaseModel, ClusterBaseModel ------------------------------------------------------------


class ModelFormat(TypedDict, total=False):
    """The format a model is stored in."""

    name: Annotated[str, Field("Name of the format, e.g. safetensors.")]
    version: Annotated[str, Field("Version of the format.")]


class ModelStorage(TypedDict, total=False):
    """Where a model's files are."""

    storageUri: Annotated[str, Field("URI of the model's files, e.g. hf://Qwen/Qwen3-0.6B.")]
    path: Annotated[str, Field("Path on the node where the model's files are placed.")]


class BaseModelSpec(TypedDict, total=False):
    """A model that InferenceServices serve. Fields not listed here are kept as given."""

    modelFormat: Annotated[ModelFormat, Field("The format the model is stored in.")]
    modelArchitecture: Annotated[str, Field("Architecture, e.g. Qwen3ForCausalLM.")]
    modelParameterSize: Annotated[str, Field("Parameter count, e.g. 0.6B.")]
    storage: Annotated[ModelStorage, Field("Where the model's files are.")]
    displayName: Annotated[str, Field("Human-readable name of the model.")]


class BaseModelStatus(TypedDict, total=False):
    """Observed state of a model."""

    state: Annotated[str, Field("State of the model, e.g. Ready.")]


class BaseModel(_Object, total=False):
    """A model an InferenceService in the same namespace can serve (spec.model.name)."""

    spec: Annotated[BaseModelSpec, Field("The model's format and storage.", preserve_unknown=True)]
    status: Annotated[BaseModelStatus, Field("Observed state of the model.")]


class ClusterBaseModel(_Object, total=False):
    """A model an InferenceService in any namespace can serve (spec.model.name)."""

    spec: Annotated[BaseModelSpec, Field("The model's format and storage.", preserve_unknown=True)]
    status: Annotated[BaseModelStatus, Field("Observed state of the model.")]


# -- ServingRuntime, ClusterServingRuntime --------------------------------------------------


class SupportedModelFormat(TypedDict, total=False):
    """A model format a runtime can serve."""

    name: Annotated[str, Field("Name of the format, e.g. safetensors.")]
    version: Annotated[str, Field("Version of the format.")]
    autoSelect: Annotated[bool, Field("Whether the runtime may be chosen for this format.")]


class ServingRuntimeSpec(TypedDict, total=False):
    """How models are served: the pods' defaults."""

    supportedModelFormats: Annotated[
        list[SupportedModelFormat], Field("Model formats the runtime can serve.")
    ]
    disabled: Annotated[bool, Field("Whether the runtime is out of use.")]
    engineConfig: Annotated[
        EngineConfig,
        Field("Defaults for the engine's pods; the InferenceService's own values win."),
    ]


class ServingRuntimeStatus(TypedDict, total=False):
    """Observed state of a serving runtime (none is reported yet)."""


class ServingRuntime(_Object, total=False):
    """A serving runtime InferenceServices in the same namespace can use (spec.runtime.name)."""

    spec: Annotated[ServingRuntimeSpec, Field("The runtime's model formats and pod defaults.")]
    status: Annotated[ServingRuntimeStatus, Field("Observed state of the runtime.")]


class ClusterServingRuntime(_Object, total=False):
    """A serving runtime InferenceServices in any namespace can use (spec.runtime.name)."""

    spec: Annotated[ServingRuntimeSpec, Field("The runtime's model formats and pod defaults.")]
    status: Annotated[ServingRuntimeStatus, Field("Observed state of the runtime.")]


# -- InferenceService -----------------------------------------------------------------------


class ModelRef(TypedDict, total=False):
    """The model an InferenceService serves."""

    name: Annotated[str, Field("Name of the BaseModel or ClusterBaseModel.")]
    kind: Annotated[
        Literal["BaseModel", "ClusterBaseModel"],
        Field("BaseModel or ClusterBaseModel; unset, a BaseModel of that name comes first."),
    ]


class RuntimeRef(TypedDict, total=False):
    """The serving runtime an InferenceService uses."""

    name: Annotated[str, Field("Name of the ServingRuntime or ClusterServingRuntime.")]
    kind: Annotated[
        Literal["ServingRuntime", "ClusterServingRuntime"],
        Field(
            "ServingRuntime or ClusterServingRuntime; unset, a ServingRuntime of that name "
            "comes first."
        ),
    ]


class InferenceServiceSpec(TypedDict, total=False):
    """What to serve, with which runtime, and how each component's pods look."""

    deploymentMode: Annotated[
        str,
        Field("How the service is deployed: OMENative. Other modes are reported as a condition."),
    ]
    model: Annotated[ModelRef, Field("The model to serve.")]
    runtime: Annotated[RuntimeRef, Field("The serving runtime whose engineConfig is the base.")]
    engine: Annotated[ComponentSpec, Field("The engine component: it serves the model.")]
    decoder: Annotated[ComponentSpec, Field("The decoder component, for disaggregated serving.")]
    router: Annotated[ComponentSpec, Field("The router component, optional.")]


class ComponentStatus(TypedDict, total=False):
    """Observed state of one component."""

    replicas: Annotated[int, Field("Instances of the component.")]
    readyReplicas: Annotated[int, Field("Instances of the component that are Ready.")]


class InferenceServiceStatus(TypedDict, total=False):
    """Observed state of an InferenceService."""

    conditions: Annotated[
        list[Condition], Field("Ready, and one condition per component, e.g. EngineReady.")
    ]
    observedGeneration: Annotated[int, Field("The metadata.generation last reconciled.")]
    components: Annotated[
        dict[str, ComponentStatus], Field("Per component (engine, decoder, router), its counts.")
    ]


class InferenceService(_Object, total=False):
    """A model served by OME: one InferenceReplica per component."""

    spec: Annotated[InferenceServiceSpec, Field("The desired service.")]
    status: Annotated[InferenceServiceStatus, Field("Observed state of the service.")]


# -- InferenceReplica -----------------------------------------------------------------------


class PodTemplateMetadata(TypedDict, total=False):
    """Metadata given to the runner's pods."""

    labels: Annotated[StringMap, Field("Labels of the runner's pods.")]
    annotations: Annotated[StringMap, Field("Annotations of the runner's pods.")]


class PodTemplate(TypedDict, total=False):
    """A core/v1 PodTemplateSpec."""

    metadata: Annotated[PodTemplateMetadata, Field("Labels and annotations of the pods.")]
    spec: Annotated[FreeForm, Field("The pods' core/v1 PodSpec.")]


class ReplicaRunner(TypedDict, total=False):
    """One role of an Instance's pods."""

    name: Required[
        Annotated[
            Literal["default", "leader", "worker"],
            Field("default (the one pod of a single-pod Instance), leader or worker."),
        ]
    ]
    size: Annotated[
        int,
        Field(
            "Pods of this runner per Instance: 1 for default and leader.",
            minimum=0,
            maximum=MAX_WORKERS,
        ),
    ]
    template: Annotated[
        PodTemplate,
        Field("Template of the runner's pods.", preserve_unknown=True, embedded_resource=False),
    ]


class InferenceReplicaSpec(TypedDict, total=False):
    """Instances of one component of an InferenceService."""

    component: Annotated[str, Field("The component: engine, decoder or router.")]
    replicas: Annotated[int, Field("Number of Instances, indexed from 0.", minimum=0)]
    runners: Required[
        Annotated[
            list[ReplicaRunner],
            Field(
                "The pods of an Instance: runner default alone, or a leader and workers.",
                min_items=1,
            ),
        ]
    ]
    lifecycle: Annotated[
        Lifecycle,
        Field(
            "Deadlines of Instance operations; the InferenceService projects its component's "
            "(over its runtime's) here, and keeps this one when it sets none."
        ),
    ]
    selector: Annotated[str, Field("Label selector of the replica's pods, optional.")]


class Operation(TypedDict, total=False):
    """The operation an Instance is going through."""

    id: Annotated[str, Field("Identifier of the operation.")]
    type: Annotated[
        Literal["Create", "Update", "Restart", "Migrate", "Delete"],
        Field("Create, Update, Restart, Migrate or Delete."),
    ]
    step: Annotated[str, Field("The step the operation is at.")]
    startedAt: Annotated[DateTime, Field("When the operation started.")]
    lastProgressAt: Annotated[DateTime, Field("When the operation last made progress.")]
    deadline: Annotated[
        DateTime | None, Field("When the operation fails unless done; null while parked.")
    ]
    retryCount: Annotated[int, Field("Retries of the operation so far.")]
    targetRevision: Annotated[str, Field("The revision the operation moves to.")]
    reason: Annotated[str, Field("Why the operation started.")]
    waiting: Annotated[
        str | None,
        Field("What the operation is held on, e.g. CapacityProvisioning; null when not held."),
    ]
    capacityRefusedAt: Annotated[
        DateTime | None, Field("When capacity was last refused; null if never.")
    ]
    surgeIndex: Annotated[
        int | None, Field("The Instance index a multi-pod update surges to; null if none.")
    ]


class LastFailure(TypedDict, total=False):
    """The Instance's most recent failure."""

    podName: Annotated[str, Field("The pod that failed.")]
    containerName: Annotated[str, Field("The container that failed.")]
    reason: Annotated[str, Field("Why it failed, e.g. OOMKilled or CapacityProvisioning.")]
    exitCode: Annotated[int | None, Field("The container's exit code; null if none.")]
    message: Annotated[str, Field("Details of the failure.")]
    time: Annotated[DateTime, Field("When the failure was seen.")]


class InstanceStatus(TypedDict, total=False):
    """One Instance's row."""

    index: Annotated[int, Field("Index of the Instance, from 0.")]
    incarnation: Annotated[int, Field("How many times the Instance was rebuilt.")]
    phase: Annotated[
        str,
        Field("Pending, Creating, Ready, Updating, Restarting, Migrating, Failed or Deleting."),
    ]
    runningRevision: Annotated[str, Field("The revision the Instance's pods run.")]
    targetRevision: Annotated[str, Field("The revision the Instance should run.")]
    podCount: Annotated[int, Field("Pods of the Instance.")]
    servingPodCount: Annotated[int, Field("Pods of the Instance that serve.")]
    availablePodCount: Annotated[int, Field("Pods of the Instance that are available.")]
    readySince: Annotated[
        DateTime | None, Field("When the Instance became Ready; null while not Ready.")
    ]
    activeOrdinal: Annotated[
        int, Field("Which pod ordinal (0 or 1) of a single-pod Instance is active.")
    ]
    operation: Annotated[Operation | None, Field("The operation in progress; null when none.")]
    lastFailure: Annotated[LastFailure | None, Field("The latest failure; null if none.")]


class InferenceReplicaStatus(TypedDict, total=False):
    """Observed state of an InferenceReplica."""

    replicas: Annotated[int, Field("Instances that exist.")]
    readyReplicas: Annotated[int, Field("Instances that are Ready.")]
    availableReplicas: Annotated[int, Field("Instances that are available.")]
    updatedReplicas: Annotated[int, Field("Instances at the update revision.")]
    observedGeneration: Annotated[int, Field("The metadata.generation last reconciled.")]
    selector: Annotated[str, Field("Label selector of the pods, for the scale subresource.")]
    currentRevision: Annotated[str, Field("Revision of the running pod templates.")]
    updateRevision: Annotated[str, Field("Revision of the desired pod templates.")]
    conditions: Annotated[list[Condition], Field("Conditions of the replica.")]
    instanceStatuses: Annotated[list[InstanceStatus], Field("One row per Instance.")]


class InferenceReplica(_Object, total=False):
    """Instances of one component of an InferenceService, named <isvc>-<component> and owned
    by it."""

    spec: Annotated[InferenceReplicaSpec, Field("The desired Instances.")]
    status: Annotated[InferenceReplicaStatus, Field("Observed state of the Instances.")]


# -- resources and kinds --------------------------------------------------------------------

BASE_MODELS = Resource(GROUP, VERSION, "basemodels")
CLUSTER_BASE_MODELS = Resource(GROUP, VERSION, "clusterbasemodels", namespaced=False)
SERVING_RUNTIMES = Resource(GROUP, VERSION, "servingruntimes")
CLUSTER_SERVING_RUNTIMES = Resource(GROUP, VERSION, "clusterservingruntimes", namespaced=False)
INFERENCE_SERVICES = Resource(GROUP, VERSION, "inferenceservices")
INFERENCE_REPLICAS = Resource(GROUP, VERSION, "inferencereplicas")
CONTROLLER_REVISIONS = Resource("apps", "v1", "controllerrevisions")

_AGE = PrinterColumn(
    "Age", "date", ".metadata.creationTimestamp", "Time since the object was created."
)
_MODEL_COLUMNS = (
    PrinterColumn("Format", "string", ".spec.modelFormat.name", "Format of the model."),
    _AGE,
)
_RUNTIME_COLUMNS = (
    PrinterColumn("Disabled", "boolean", ".spec.disabled", "Whether the runtime is disabled."),
    _AGE,
)

BASE_MODEL = Kind("BaseModel", "basemodel", ("bm",), BASE_MODELS, BaseModel, _MODEL_COLUMNS)
CLUSTER_BASE_MODEL = Kind(
    "ClusterBaseModel",
    "clusterbasemodel",
    ("cbm",),
    CLUSTER_BASE_MODELS,
    ClusterBaseModel,
    _MODEL_COLUMNS,
)
SERVING_RUNTIME = Kind(
    "ServingRuntime",
    "servingruntime",
    ("sr",),
    SERVING_RUNTIMES,
    ServingRuntime,
    _RUNTIME_COLUMNS,
)
CLUSTER_SERVING_RUNTIME = Kind(
    "ClusterServingRuntime",
    "clusterservingruntime",
    ("csr",),
    CLUSTER_SERVING_RUNTIMES,
    ClusterServingRuntime,
    _RUNTIME_COLUMNS,
)
INFERENCE_SERVICE = Kind(
    "InferenceService",
    "inferenceservice",
    ("isvc",),
    INFERENCE_SERVICES,
    InferenceService,
    (
        PrinterColumn(
            "Ready",
            "string",
            '.status.conditions[?(@.type=="Ready")].status',
            "Whether the service is Ready.",
        ),
        PrinterColumn(
            "Reason",
            "string",
            '.status.conditions[?(@.type=="Ready")].reason',
            "Why the service is or is not Ready.",
            priority=1,
        ),
        _AGE,
    ),
)
INFERENCE_REPLICA = Kind(
    "InferenceReplica",
    "inferencereplica",
    ("irep",),
    INFERENCE_REPLICAS,
    InferenceReplica,
    (
        PrinterColumn("COMPONENT", "string", ".spec.component", "The component."),
        PrinterColumn("DESIRED", "integer", ".spec.replicas", "Instances wanted."),
        PrinterColumn("CURRENT", "integer", ".status.replicas", "Instances that exist."),
        PrinterColumn("READY", "integer", ".status.readyReplicas", "Instances that are Ready."),
        PrinterColumn(
            "AVAILABLE", "integer", ".status.availableReplicas", "Instances that are available."
        ),
        PrinterColumn(
            "AGE", "date", ".metadata.creationTimestamp", "Time since the object was created."
        ),
    ),
    scale=ScaleSubresource(".spec.replicas", ".status.replicas", ".status.selector"),
)

KINDS = (
    BASE_MODEL,
    CLUSTER_BASE_MODEL,
    SERVING_RUNTIME,
    CLUSTER_SERVING_RUNTIME,
    INFERENCE_SERVICE,
    INFERENCE_REPLICA,
)


def controller_reference(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    """The ownerReference that makes ``obj`` (an ``ome.io/v1beta1`` object of ``kind``) the
    controller of a dependent, so that deleting it garbage-collects the dependent."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
