"""Fuzzed request bodies against the real services (sample cluster): no 5xx, no traceback in the
logs, and the next good request is answered correctly.

Every field of ExtenderArgs (Pod and the fields of it the extender reads, NodeNames, Nodes) and
of ExtenderBindingArgs is drawn either well-formed (names from the sample cluster, so deep paths
such as claim resolution and allocation are reached) or as any JSON value; some bodies are raw
bytes. Seeded (`derandomize`) and bounded for CI (a few seconds). A longer run:

    DRA_FUZZ_EXAMPLES=20000 python -m pytest tests/server/test_fuzz_bodies.py -q -p no:cacheprovider
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from extender.cluster.sample import sample_objects
from extender.settings import Settings
from tests.fuzzing import fuzz_settings
from tests.server.sample_app import Served, served_app

FUZZ = fuzz_settings("DRA_FUZZ_EXAMPLES", 250, HealthCheck.data_too_large)

_OBJECTS = sample_objects()
NODE_NAMES = sorted(o["metadata"]["name"] for o in _OBJECTS if o["kind"] == "Node")
CLAIM_NAMES = sorted(o["metadata"]["name"] for o in _OBJECTS if o["kind"] == "ResourceClaim")
POD_NAMES = ["gpu-training", "llm-finetune-0", "notebook-alice", "web-0"]
NAMESPACES = ["ml-training", "ml-serving", "default"]

# ---------------------------------------------------------------------- strategies
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=24)
_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)
any_json = st.recursive(
    _leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=8
)


def field(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value: mostly well-formed, else any JSON value (wrong types, nulls, nesting)."""
    return st.one_of(good, good, any_json)


def names(known: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(known), _text)


claim_entry = st.fixed_dictionaries(
    {"name": field(names(["devices", "gpu", "mig"]))},
    optional={
        "resourceClaimName": field(names(CLAIM_NAMES)),
        "resourceClaimTemplateName": field(names(["gpu-template"])),
    },
)
status_entry = st.fixed_dictionaries(
    {"name": field(names(["devices", "gpu"]))}, optional={"resourceClaimName": field(names(CLAIM_NAMES))}
)
pod = st.fixed_dictionaries(
    {},
    optional={
        "metadata": field(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": field(names(POD_NAMES)),
                    "namespace": field(names(NAMESPACES)),
                    "uid": field(names(["uid-1", "uid-2", ""])),
                    "labels": any_json,
                },
            )
        ),
        "spec": field(
            st.fixed_dictionaries(
                {},
                optional={
                    "resourceClaims": field(st.lists(field(claim_entry), max_size=3)),
                    "nodeName": field(names(NODE_NAMES)),
                    "schedulerName": any_json,
                },
            )
        ),
        "status": field(
            st.fixed_dictionaries(
                {}, optional={"resourceClaimStatuses": field(st.lists(field(status_entry), max_size=3))}
            )
        ),
    },
)
node_list = st.fixed_dictionaries(
    {},
    optional={
        "metadata": any_json,
        "items": field(
            st.lists(
                field(
                    st.fixed_dictionaries(
                        {"metadata": field(st.fixed_dictionaries({"name": field(names(NODE_NAMES))}))}
                    )
                ),
                max_size=4,
            )
        ),
    },
)
extender_args = st.fixed_dictionaries(
    {},
    optional={
        "Pod": field(pod),
        "NodeNames": field(st.lists(field(names(NODE_NAMES)), max_size=5)),
        "Nodes": field(node_list),
    },
)
binding_args = st.fixed_dictionaries(
    {},
    optional={
        "PodName": field(names(POD_NAMES)),
        "PodNamespace": field(names(NAMESPACES)),
        "PodUID": field(names(["uid-1", "aa508aa5-b3ce-4e6c-8d80-29077be7e7c2"])),
        "Node": field(names(NODE_NAMES)),
    },
)


def bodies(args: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        args.map(orjson.dumps), args.map(orjson.dumps), any_json.map(orjson.dumps), st.binary(max_size=40)
    )


# ---------------------------------------------------------------------- the server under test
@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with served_app(Settings()) as server:
        yield server


GOOD_POD = {"metadata": {"name": "fuzz-probe", "namespace": "default", "uid": "uid-probe"}, "spec": {}}


def _check(served: Served, status: int, answer: bytes) -> None:
    assert status < 500, f"HTTP {status}: {answer[:300]!r}"
    bad = [r for r in served.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [f"{r.name} {r.levelname}: {r.getMessage()}" for r in bad]
    # The next good request is answered correctly: a pod without claims passes every node given.
    nodes = ["h100-node-01", "cpu-node-01"]
    status, answer = served.post("/filter", orjson.dumps({"Pod": GOOD_POD, "NodeNames": nodes}))
    assert status == 200
    result = orjson.loads(answer)
    assert result["Error"] == "" and result["NodeNames"] == nodes


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_fuzzed_extender_args_never_crash(served: Served, verb: str) -> None:
    @FUZZ
    @given(body=bodies(extender_args))
    def run(body: bytes) -> None:
        served.records.clear()  # each example is judged by its own log records
        status, answer = served.post(f"/{verb}", body)
        if status == 200 and verb == "filter":
            assert "internal error" not in orjson.loads(answer)["Error"]
        _check(served, status, answer)

    run()


def test_fuzzed_binding_args_never_crash(served: Served) -> None:
    @FUZZ
    @given(body=bodies(binding_args))
    def run(body: bytes) -> None:
        served.records.clear()
        status, answer = served.post("/bind", body)
        if status == 200:
            assert "internal error" not in orjson.loads(answer)["Error"]
        _check(served, status, answer)

    run()
