"""Writes and reads as kube-apiserver answers them: metadata, optimistic concurrency,
preconditions, status split and bad input, through the official client and kubectl."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import V1DeleteOptions, V1Preconditions
from kubernetes.client.exceptions import ApiException
from test.cluster import Cluster, Kubectl
from test.manifests import WIDGET_CRD, configmap, install, pod, widget


def _status(e: ApiException) -> dict:
    return json.loads(e.body)


@pytest.mark.conformance
def test_create_stamps_uid_timestamp_and_increasing_resource_versions(cluster: Cluster) -> None:
    core = cluster.core()
    a = core.create_namespaced_config_map("default", configmap("a"))
    b = core.create_namespaced_config_map("default", configmap("b"))
    assert a.metadata.uid and b.metadata.uid and a.metadata.uid != b.metadata.uid
    assert a.metadata.creation_timestamp is not None
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)


@pytest.mark.conformance
def test_generate_name_gives_a_unique_name(cluster: Cluster) -> None:
    body = configmap("")
    body["metadata"] = {"generateName": "cfg-"}
    made = {
        cluster.core().create_namespaced_config_map("default", body).metadata.name for _ in range(5)
    }
    assert len(made) == 5 and all(n.startswith("cfg-") and len(n) == 9 for n in made)


@pytest.mark.conformance
def test_create_of_an_existing_name_is_409_already_exists(
    cluster: Cluster, kubectl: Kubectl
) -> None:
    cluster.core().create_namespaced_config_map("default", configmap("dup"))
    with pytest.raises(ApiException) as e:
        cluster.core().create_namespaced_config_map("default", configmap("dup"))
    assert e.value.status == 409
    assert _status(e.value)["reason"] == "AlreadyExists"
    assert _status(e.value)["message"] == 'configmaps "dup" already exists'
    out = kubectl("create", "configmap", "dup", check=False)
    assert out.returncode != 0
    assert 'configmaps "dup" already exists' in out.stderr


@pytest.mark.conformance
def test_stale_resource_version_update_is_409_conflict(cluster: Cluster, kubectl: Kubectl) -> None:
    core = cluster.core()
    first = core.create_namespaced_config_map("default", configmap("cm"))
    fresh = core.read_namespaced_config_map("cm", "default")
    fresh.data = {"k": "new"}
    core.replace_namespaced_config_map("cm", "default", fresh)
    first.data = {"k": "stale"}
    with pytest.raises(ApiException) as e:
        core.replace_namespaced_config_map("cm", "default", first)
    assert e.value.status == 409
    status = _status(e.value)
    assert status["kind"] == "Status" and status["reason"] == "Conflict"
    assert "the object has been modified" in status["message"]
    assert core.read_namespaced_config_map("cm", "default").data == {"k": "new"}
    # kubectl replace with the stale object fails the same way.
    stale = configmap("cm")
    stale["metadata"]["resourceVersion"] = first.metadata.resource_version
    out = kubectl("replace", "-f", "-", input=json.dumps(stale), check=False)
    assert out.returncode != 0 and "the object has been modified" in out.stderr


@pytest.mark.conformance
def test_custom_resource_update_requires_a_resource_version(cluster: Cluster) -> None:
    install(cluster, WIDGET_CRD)
    custom = cluster.custom()
    custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", widget("w"))
    with pytest.raises(ApiException) as e:
        custom.replace_namespaced_custom_object(
            "example.com", "v1", "default", "widgets", "w", widget("w", size="large")
        )
    assert e.value.status == 422
    assert "metadata.resourceVersion" in _status(e.value)["message"]


@pytest.mark.conformance
def test_delete_with_mismatched_uid_precondition_is_409_and_keeps_the_object(
    cluster: Cluster,
) -> None:
    core = cluster.core()
    made = core.create_namespaced_config_map("default", configmap("keep"))
    with pytest.raises(ApiException) as e:
        core.delete_namespaced_config_map(
            "keep",
            "default",
            body=V1DeleteOptions(preconditions=V1Preconditions(uid="not-the-uid")),
        )
    assert e.value.status == 409
    assert _status(e.value)["reason"] == "Conflict"
    assert _status(e.value)["message"] == (
        'Operation cannot be fulfilled on ConfigMap "keep": the UID in the precondition '
        f"(not-the-uid) does not match the UID in record ({made.metadata.uid}). The object "
        "might have been deleted and then recreated"
    )
    still = core.read_namespaced_config_map("keep", "default")
    assert still.metadata.uid == made.metadata.uid
    assert still.metadata.deletion_timestamp is None
    core.delete_namespaced_config_map(
        "keep",
        "default",
        body=V1DeleteOptions(preconditions=V1Preconditions(uid=made.metadata.uid)),
    )
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("keep", "default")
    assert gone.value.status == 404


@pytest.mark.conformance
def test_delete_with_stale_resource_version_precondition_is_409(cluster: Cluster) -> None:
    core = cluster.core()
    made = core.create_namespaced_config_map("default", configmap("rv"))
    core.patch_namespaced_config_map("rv", "default", {"data": {"k": "2"}})
    with pytest.raises(ApiException) as e:
        core.delete_namespaced_config_map(
            "rv",
            "default",
            body=V1DeleteOptions(
                preconditions=V1Preconditions(resource_version=made.metadata.resource_version)
            ),
        )
    assert e.value.status == 409
    current = core.read_namespaced_config_map("rv", "default").metadata.resource_version
    assert _status(e.value)["message"] == (
        'Operation cannot be fulfilled on ConfigMap "rv": the ResourceVersion in the '
        f"precondition ({made.metadata.resource_version}) does not match the ResourceVersion "
        f"in record ({current}). The object might have been modified"
    )


@pytest.mark.conformance
def test_noop_update_writes_nothing(cluster: Cluster) -> None:
    core = cluster.core()
    made = core.create_namespaced_config_map("default", configmap("same"))
    again = core.replace_namespaced_config_map("same", "default", made)
    assert again.metadata.resource_version == made.metadata.resource_version


@pytest.mark.conformance
def test_status_subresource_is_apart_from_the_main_resource(cluster: Cluster) -> None:
    install(cluster, WIDGET_CRD)
    custom = cluster.custom()
    created = custom.create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", {**widget("w"), "status": {"replicas": 9}}
    )
    assert "status" not in created, "status is dropped on create when it is a subresource"
    assert created["metadata"]["generation"] == 1
    # PUT on the main resource ignores status.
    created["status"] = {"replicas": 3}
    created["spec"]["size"] = "large"
    updated = custom.replace_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "w", created
    )
    assert "status" not in updated and updated["spec"]["size"] == "large"
    assert updated["metadata"]["generation"] == 2
    # PUT on /status ignores spec, and does not move the generation.
    updated["status"] = {"replicas": 2}
    updated["spec"]["size"] = "small"
    status = custom.replace_namespaced_custom_object_status(
        "example.com", "v1", "default", "widgets", "w", updated
    )
    assert status["status"] == {"replicas": 2}
    assert status["spec"]["size"] == "large"
    assert status["metadata"]["generation"] == 2


@pytest.mark.conformance
def test_pod_status_is_reset_on_create_and_written_through_status(cluster: Cluster) -> None:
    core = cluster.core()
    body = pod("p")
    body["status"] = {"phase": "Running"}
    made = core.create_namespaced_pod("default", body)
    assert made.status.phase == "Pending"
    core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("p", "default").status.phase == "Running"
    core.patch_namespaced_pod("p", "default", {"status": {"phase": "Failed"}})
    assert core.read_namespaced_pod("p", "default").status.phase == "Running"


@pytest.mark.conformance
def test_pod_spec_is_immutable_except_images(cluster: Cluster) -> None:
    core = cluster.core()
    core.create_namespaced_pod("default", pod("p", node_selector={"a": "b"}))
    with pytest.raises(ApiException) as e:
        core.patch_namespaced_pod("p", "default", {"spec": {"nodeSelector": {"a": "c"}}})
    assert e.value.status == 422
    assert "pod updates may not change fields other than" in _status(e.value)["message"]
    core.patch_namespaced_pod(
        "p",
        "default",
        {"spec": {"containers": [{"name": "main", "image": "registry.example/app:2"}]}},
    )
    assert core.read_namespaced_pod("p", "default").spec.containers[0].image.endswith(":2")


@pytest.mark.conformance
def test_patch_types(cluster: Cluster) -> None:
    core = cluster.core()
    core.create_namespaced_config_map("default", configmap("p", labels={"a": "1"}))
    status, body, _ = cluster.request(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/p",
        [{"op": "add", "path": "/metadata/labels/b", "value": "2"}],
        headers={"Content-Type": "application/json-patch+json"},
    )
    assert status == 200 and body["metadata"]["labels"] == {"a": "1", "b": "2"}
    status, body, _ = cluster.request(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/p",
        {"metadata": {"labels": {"a": None}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert status == 200 and body["metadata"]["labels"] == {"b": "2"}
    status, body, _ = cluster.request(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/p",
        {"metadata": {"finalizers": ["example.com/x"]}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert status == 200 and body["metadata"]["finalizers"] == ["example.com/x"]


def test_server_side_apply_is_an_unsupported_media_type(cluster: Cluster) -> None:
    """A deliberate gap (docs/embedded-apiserver.md): kube-apiserver serves apply patches."""
    cluster.core().create_namespaced_config_map("default", configmap("p"))
    status, body, _ = cluster.request(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/p?fieldManager=test",
        {"a": 1},
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert status == 415 and body["reason"] == "UnsupportedMediaType"


@pytest.mark.conformance
def test_strategic_merge_patch_is_refused_for_custom_resources(cluster: Cluster) -> None:
    install(cluster, WIDGET_CRD)
    cluster.custom().create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", widget("w")
    )
    status, body, _ = cluster.request(
        "PATCH",
        "/apis/example.com/v1/namespaces/default/widgets/w",
        {"spec": {"size": "large"}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert status == 415 and body["reason"] == "UnsupportedMediaType"


@pytest.mark.conformance
@pytest.mark.parametrize(
    ("method", "path", "raw", "code", "reason"),
    [
        ("POST", "/api/v1/namespaces/default/configmaps", b"{not json", 400, "BadRequest"),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}).encode(),
            400,
            "BadRequest",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            json.dumps(
                {"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
            ).encode(),
            400,
            "BadRequest",
        ),
        ("GET", "/api/v1/namespaces/default/widgets", None, 404, "NotFound"),
        # No API serves the group: kube-apiserver's last handler answers in plain text.
        ("GET", "/apis/nothing.example.com/v1/things", None, 404, None),
        (
            "POST",
            "/api/v1/namespaces/missing/configmaps",
            json.dumps(configmap("x", namespace="missing")).encode(),
            404,
            "NotFound",
        ),
        ("PUT", "/api/v1/namespaces/default/configmaps", b"{}", 405, "MethodNotAllowed"),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(",
            None,
            400,
            "BadRequest",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?fieldSelector=spec.nodeName%3Dx",
            None,
            400,
            "BadRequest",
        ),
        ("GET", "/api/v1/namespaces/default/configmaps?limit=ten", None, 400, "BadRequest"),
    ],
)
def test_bad_input_gets_kube_status_codes(
    cluster: Cluster, method: str, path: str, raw: bytes | None, code: int, reason: str | None
) -> None:
    status, body, headers = cluster.request(method, path, raw=raw)
    assert status == code, body
    if reason is None:
        assert body == "404 page not found\n" and headers["Content-Type"].startswith("text/plain")
        return
    assert body["kind"] == "Status" and body["reason"] == reason and body["code"] == code


@pytest.mark.conformance
def test_missing_namespace_error_names_the_namespace(cluster: Cluster, kubectl: Kubectl) -> None:
    with pytest.raises(ApiException) as e:
        cluster.core().create_namespaced_config_map("nowhere", configmap("x", namespace="nowhere"))
    assert e.value.status == 404
    assert _status(e.value)["message"] == 'namespaces "nowhere" not found'
    out = kubectl("create", "configmap", "x", "-n", "nowhere", check=False)
    assert out.returncode != 0 and 'namespaces "nowhere" not found' in out.stderr


@pytest.mark.conformance
def test_invalid_names_and_labels_are_422(cluster: Cluster) -> None:
    with pytest.raises(ApiException) as e:
        cluster.core().create_namespaced_config_map("default", configmap("Bad_Name"))
    assert e.value.status == 422
    assert (
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name"'
        in _status(e.value)["message"]
    )
    with pytest.raises(ApiException) as e:
        cluster.core().create_namespaced_config_map(
            "default", configmap("ok", labels={"a": "x" * 64})
        )
    assert e.value.status == 422
    assert _status(e.value)["message"].endswith(f'"{"x" * 64}": must be no more than 63 bytes')


@pytest.mark.conformance
def test_list_paginates_with_limit_and_continue(cluster: Cluster) -> None:
    # Secrets, not configmaps: kube-controller-manager puts a kube-root-ca.crt configmap in
    # every namespace, and nothing puts secrets in default.
    core = cluster.core()
    for i in range(5):
        core.create_namespaced_secret(
            "default", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"c{i}"}}
        )
    first = core.list_namespaced_secret("default", limit=2)
    assert [c.metadata.name for c in first.items] == ["c0", "c1"]
    assert first.metadata._continue and first.metadata.remaining_item_count == 3
    rest = core.list_namespaced_secret("default", limit=10, _continue=first.metadata._continue)
    assert [c.metadata.name for c in rest.items] == ["c2", "c3", "c4"]
    assert not rest.metadata._continue


@pytest.mark.conformance
def test_a_selected_list_pages_without_a_remaining_count(cluster: Cluster) -> None:
    """With a selector the count of what is left is unknown (kube-apiserver leaves it unset),
    and paging still returns every match once, in order."""
    core = cluster.core()
    for i in range(7):
        labels = {"pick": "yes" if i % 2 == 0 else "no"}
        core.create_namespaced_secret(
            "default",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"s{i}", "labels": labels}},
        )
    names, token = [], None
    for _ in range(4):
        page = core.list_namespaced_secret(
            "default", label_selector="pick=yes", limit=2, _continue=token
        )
        names += [s.metadata.name for s in page.items]
        assert page.metadata.remaining_item_count is None
        token = page.metadata._continue
        if not token:
            break
    assert names == ["s0", "s2", "s4", "s6"]


@pytest.mark.conformance
def test_secret_string_data_is_folded_into_data(cluster: Cluster) -> None:
    made = cluster.core().create_namespaced_secret(
        "default",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"a": "b"}},
    )
    assert made.data == {"a": "Yg=="} and made.type == "Opaque"


@pytest.mark.conformance
def test_dry_run_persists_nothing(cluster: Cluster) -> None:
    core = cluster.core()
    core.create_namespaced_config_map("default", configmap("dry"), dry_run="All")
    with pytest.raises(ApiException) as e:
        core.read_namespaced_config_map("dry", "default")
    assert e.value.status == 404


@pytest.mark.conformance
def test_future_resource_version_is_504_too_large(cluster: Cluster) -> None:
    status, body, _ = cluster.request(
        "GET", "/api/v1/namespaces/default/configmaps?resourceVersion=99999999"
    )
    assert status == 504 and body["reason"] == "Timeout"
    assert "Too large resource version" in body["message"]


@pytest.mark.conformance
def test_pod_qos_class_follows_cpu_and_memory(cluster: Cluster) -> None:
    core = cluster.core()

    def qos(name: str, resources: dict) -> str:
        body = pod(name)
        body["spec"]["containers"][0]["resources"] = resources
        return str(core.create_namespaced_pod("default", body).status.qos_class)

    assert qos("tpu-only", {"limits": {"google.com/tpu": "4"}}) == "BestEffort"
    assert qos("burst", {"requests": {"cpu": "1"}}) == "Burstable"
    assert qos("exact", {"limits": {"cpu": "1", "memory": "1Gi"}}) == "Guaranteed"
