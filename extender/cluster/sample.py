"""The embedded sample cluster (package data `sample_cluster.yaml`).

A heterogeneous, internally consistent set of Kubernetes objects (resource.k8s.io/v1 DRA kinds plus
Nodes, Pods and Namespaces) for running the extender without a cluster, for demos and for tests:
H100 nodes with RDMA NICs, an L40S node, an A100 node with MIG partitions published as partitionable
devices, TPU v5e, Gaudi2, MI300X, Inferentia2 and FPGA nodes, a plain CPU node, DeviceClasses,
ResourceClaimTemplates, two allocated claims with their running pods, and the unallocated generated
claims of the seed pipeline pods in `tests/data/pipeline_pods.yaml`. The header comment of the YAML
file summarises the contents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from extender import yamlsafe

#: Location of the sample inside the installed package.
SAMPLE_PATH: Path = Path(__file__).with_name("sample_cluster.yaml")


def sample_text() -> str:
    """The sample as multi-document YAML text."""
    return SAMPLE_PATH.read_text(encoding="utf-8")


def sample_objects() -> list[dict[str, Any]]:
    """The sample's objects, freshly parsed on every call (callers may mutate them); empty documents
    are skipped. Read as state files are (`extender.yamlsafe`: timestamps stay text)."""
    return [doc for doc in yamlsafe.load_all(sample_text()) if doc]
