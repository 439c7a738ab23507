"""Every object of deploy/ (the kustomization's resources) as the real kube-apiserver validates it:
created with `dryRun=All` and `fieldValidation=Strict`, so a wrong field, an unknown field or an
invalid value fails here, not in a user's cluster. (The objects the suite also runs, the
extender's identity and the second scheduler's, are applied for real by the fixtures.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import ROOT, ControlPlane, KubeError, collection_path, object_path

pytestmark = pytest.mark.e2e

DEPLOY = ROOT / "deploy"
STRICT = "?dryRun=All&fieldValidation=Strict"


def _resources() -> list[tuple[str, dict[str, Any]]]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    found: list[tuple[str, dict[str, Any]]] = []
    for name in kustomization["resources"]:
        found += [(name, d) for d in yaml.safe_load_all((DEPLOY / Path(name)).read_text()) if d]
    return found


@pytest.mark.parametrize(
    ("source", "obj"),
    _resources(),
    ids=[f"{name}:{obj['kind']}/{obj['metadata']['name']}" for name, obj in _resources()],
)
def test_the_api_server_accepts_each_deploy_object_strictly(
    plane: ControlPlane, source: str, obj: dict[str, Any]
) -> None:
    namespace = obj["metadata"].get("namespace")
    try:
        plane.kube.request("POST", collection_path(obj) + STRICT, obj, ok=(201,))
    except KubeError as exc:
        if exc.status != 409:  # already there (applied by the fixtures): validate as an update
            raise AssertionError(f"{source}: {exc}") from None
        path = object_path(obj["kind"], obj["metadata"]["name"], namespace)
        current = plane.kube.get(path)
        version = current["metadata"]["resourceVersion"]
        update = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}
        plane.kube.request("PUT", path + STRICT, update, ok=(200,))
