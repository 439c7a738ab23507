"""The claim's requests and the container mappings, against upstream's own tables:
kubernetes v1.36.3 pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources_test.go
(`Test_createRequestsAndMappings_requests` and `_mappings`; v1.37.2 has the same cases). Pods are
built as upstream's `st.MakePod()` builds them: `Res` adds container `con<N>`, `InitReq`
init container `init-con<N>`, `SidecarReq` init container `sidecar-con<N>` with restartPolicy
Always, each with the map as both requests and limits."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.extended import CLASS_PREFIX, needs_of, requests_and_mappings
from extender.pods import parse_pod

ERN = "example.com/gpu"  # upstream's extendedResourceName


class PodBuilder:
    def __init__(self) -> None:
        self.containers: list[dict[str, Any]] = []
        self.init: list[dict[str, Any]] = []

    def res(self, resources: dict[str, str]) -> PodBuilder:
        self.containers.append(_container(f"con{len(self.containers)}", resources))
        return self

    def init_req(self, resources: dict[str, str]) -> PodBuilder:
        self.init.append(_container(f"init-con{len(self.init)}", resources))
        return self

    def sidecar_req(self, resources: dict[str, str]) -> PodBuilder:
        self.init.append({**_container(f"sidecar-con{len(self.init)}", resources), "restartPolicy": "Always"})
        return self

    def obj(self) -> dict[str, Any]:
        return {
            "metadata": {"name": "pod", "namespace": "default", "uid": "pod-uid"},
            "spec": {"initContainers": self.init, "containers": self.containers},
        }


def _container(name: str, resources: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "image": "pause",
        "resources": {"requests": dict(resources), "limits": dict(resources)},
    }


def _make(builder: PodBuilder, classes: dict[str, str], resources: list[str]) -> tuple[list[Any], list[Any]]:
    needs = needs_of(parse_pod(builder.obj()), classes)
    if needs is None:
        return [], []
    requests, mappings = requests_and_mappings(needs, resources)
    return requests, mappings


pod1 = PodBuilder().res({ERN: "1", ERN + "1": "2"})
pod2 = PodBuilder().res({ERN: "1"}).res({ERN + "1": "2"})
pod_init = PodBuilder().res({ERN: "1"}).init_req({ERN + "init": "2"})
pod_init2 = PodBuilder().res({ERN: "1"}).init_req({ERN + "init": "1"}).init_req({ERN + "init": "2"})
pod_init3 = (
    PodBuilder()
    .res({ERN: "1"})
    .init_req({ERN + "init": "1"})
    .sidecar_req({ERN + "init": "1"})
    .init_req({ERN + "init": "2"})
)
pod1_init_implicit = PodBuilder().init_req({ERN + "init": "1", CLASS_PREFIX + "classInit": "2"})
pod_init_implicit = (
    PodBuilder().res({ERN: "1"}).init_req({ERN + "init": "1"}).init_req({CLASS_PREFIX + "classInit": "2"})
)

dev_map = {ERN: "class"}
dev_map2 = {ERN: "class", ERN + "1": "class1"}
dev_map_init = {ERN: "class", ERN + "init": "classInit", CLASS_PREFIX + "classInit": "classInit"}
res = [ERN]
res2 = [ERN, ERN + "1"]
res_init = [ERN, ERN + "init"]
res_init_implicit = [ERN, ERN + "init", CLASS_PREFIX + "classInit"]


@pytest.mark.parametrize(
    ("builder", "classes", "resources", "want"),
    [
        pytest.param(pod1, {}, [], [], id="nil"),
        pytest.param(pod1, dev_map, res, [("container-0-request-0", "class", 1)], id="one resource match"),
        pytest.param(
            pod1, dev_map, res2, [("container-0-request-0", "class", 1)], id="one resource match, one not"
        ),
        pytest.param(
            pod1,
            dev_map2,
            res2,
            [("container-0-request-0", "class", 1), ("container-0-request-1", "class1", 2)],
            id="two resources match",
        ),
        pytest.param(
            pod2,
            dev_map2,
            res2,
            [("container-0-request-0", "class", 1), ("container-1-request-0", "class1", 2)],
            id="two containers match",
        ),
        pytest.param(
            pod_init,
            dev_map_init,
            res_init,
            [("container-0-request-0", "classInit", 2), ("container-1-request-0", "class", 1)],
            id="one init container, one regular container",
        ),
        pytest.param(
            pod_init2,
            dev_map_init,
            res_init,
            [("container-1-request-0", "classInit", 2), ("container-2-request-0", "class", 1)],
            id="two init containers, one regular container",
        ),
        pytest.param(
            pod_init3,
            dev_map_init,
            res_init,
            [
                ("container-1-request-0", "classInit", 1),
                ("container-2-request-0", "classInit", 2),
                ("container-3-request-0", "class", 1),
            ],
            id="three init containers, one sidecar, one regular container",
        ),
    ],
)
def test_requests(
    builder: PodBuilder, classes: dict[str, str], resources: list[str], want: list[Any]
) -> None:
    requests, _ = _make(builder, classes, resources)
    got = [(r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in requests]
    assert got == want
    assert all(r["exactly"]["allocationMode"] == "ExactCount" for r in requests)


@pytest.mark.parametrize(
    ("builder", "classes", "resources", "want"),
    [
        pytest.param(
            pod1,
            dev_map2,
            res2,
            [("con0", ERN, "container-0-request-0"), ("con0", ERN + "1", "container-0-request-1")],
            id="one container, two requests",
        ),
        pytest.param(
            pod1_init_implicit,
            dev_map_init,
            res_init_implicit,
            [
                ("init-con0", CLASS_PREFIX + "classInit", "container-0-request-0"),
                ("init-con0", ERN + "init", "container-0-request-1"),
            ],
            id="one container, one explicit and one implicit request",
        ),
        pytest.param(
            pod2,
            dev_map2,
            res2,
            [("con0", ERN, "container-0-request-0"), ("con1", ERN + "1", "container-1-request-0")],
            id="two containers, two requests",
        ),
        pytest.param(
            pod_init,
            dev_map_init,
            res_init,
            [("init-con0", ERN + "init", "container-0-request-0"), ("con0", ERN, "container-1-request-0")],
            id="one init container, one regular container, one request",
        ),
        pytest.param(
            pod_init2,
            dev_map_init,
            res_init,
            [
                ("init-con0", ERN + "init", "container-1-request-0"),
                ("init-con1", ERN + "init", "container-1-request-0"),
                ("con0", ERN, "container-2-request-0"),
            ],
            id="three containers (two are init container), two requests",
        ),
        pytest.param(
            pod_init_implicit,
            dev_map_init,
            res_init_implicit,
            [
                ("init-con0", ERN + "init", "container-0-request-0"),
                ("init-con1", CLASS_PREFIX + "classInit", "container-1-request-0"),
                ("con0", ERN, "container-2-request-0"),
            ],
            id="three containers (two are init container), both explicit and implicit resources",
        ),
        pytest.param(
            pod_init3,
            dev_map_init,
            res_init,
            [
                ("init-con0", ERN + "init", "container-1-request-0"),
                ("sidecar-con1", ERN + "init", "container-1-request-0"),
                ("init-con2", ERN + "init", "container-2-request-0"),
                ("con0", ERN, "container-3-request-0"),
            ],
            id="four containers (two are init container, one sidecar), three requests",
        ),
    ],
)
def test_mappings(
    builder: PodBuilder, classes: dict[str, str], resources: list[str], want: list[Any]
) -> None:
    _, mappings = _make(builder, classes, resources)
    got = sorted(
        ((m.container_name, m.resource_name, m.request_name) for m in mappings), key=lambda t: (t[2], t[0])
    )
    assert got == want  # upstream sorts by request name, then container name, before comparing
