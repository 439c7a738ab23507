"""Selector masks by groups of equal read values equal masks evaluated device by device.

`extender.index.selector_groups` evaluates one device per group of devices that read equal values;
these tests build the same masks with grouping switched off (every expression treated as having no
footprint) and compare, on the mixed fleet and on devices made to defeat the grouping: a bare and a
qualified name under the driver's domain, an unparsable version, a list, a value of the wrong type,
capacities written differently, attributes missing on some devices.
"""

from __future__ import annotations

import copy
from unittest import mock

import numpy as np
import pytest

from extender import cel
from extender.allocator.features import Features
from extender.cluster.state import ClusterState
from extender.index import attribute_table, selector_groups, snapshot
from extender.index.snapshot import build_index
from extender.objects import Obj
from loadtests.fleet import generate_mixed_cluster

FEATURES = Features.from_gates()
DRIVER = "gpu.example.com"

# Selectors with a footprint (fixed paths) and without; runtime errors (missing keys, a failed
# conversion), capacity comparisons, driver checks, optional reads and has().
EXPRESSIONS = (
    f'device.driver == "{DRIVER}"',
    f'device.attributes["{DRIVER}"].model == "a100"',
    f'device.attributes["{DRIVER}"].index >= 2',
    f'device.attributes["{DRIVER}"].version.isGreaterThan(semver("1.2.0"))',
    f'device.attributes["{DRIVER}"].?family.orValue("none") == "hopper"',
    f'has(device.attributes["{DRIVER}"].family)',
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0',
    f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("1Gi")) && '
    f'device.attributes["{DRIVER}"].model != "x"',
    'device.attributes["other.example.com"].zone == "a"',
    f'device.attributes["{DRIVER}"].family == "hopper"',  # missing on some devices: runtime error
    f'device.attributes["{DRIVER}"].tags.exists(t, t == "fast")',
    f'"model" in device.attributes["{DRIVER}"]',  # no footprint: device by device
    f'device.attributes["{DRIVER}"]["model"].startsWith("a")',
)


def _device(name: str, attributes: Obj, memory: str) -> Obj:
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}


def _awkward_devices() -> list[Obj]:
    """Devices that share read values with their neighbours but differ where grouping must look."""
    plain = {"model": {"string": "a100"}, "index": {"int": 1}, "version": {"version": "1.3.0"}}
    return [
        _device("plain-0", dict(plain), "40Gi"),
        _device("plain-1", dict(plain), "40Gi"),
        _device("plain-2", {**plain, "index": {"int": 3}}, "42949672960"),  # 40Gi written in bytes
        _device("plain-3", {**plain, "family": {"string": "hopper"}}, "80Gi"),
        # the same model twice: bare and qualified under the driver's domain (order decides in CEL)
        _device("both-names", {**plain, f"{DRIVER}/model": {"string": "h100"}}, "40Gi"),
        _device("qualified-only", {f"{DRIVER}/model": {"string": "a100"}, "index": {"int": 1}}, "40Gi"),
        # not plainly built: the whole device is a CEL runtime error, whatever is read
        _device("bad-version", {**plain, "version": {"version": "not-a-version"}}, "40Gi"),
        _device("two-kinds", {**plain, "extra": {"string": "x", "int": 1}}, "40Gi"),
        _device("wrong-type", {**plain, "index": {"int": "1"}}, "40Gi"),
        _device("a-list", {**plain, "tags": {"strings": ["fast", "big"]}}, "40Gi"),
        _device("other-domain", {**plain, "other.example.com/zone": {"string": "a"}}, "40Gi"),
        _device("no-model", {"index": {"int": 1}}, "40Gi"),
    ]


def _awkward_state() -> ClusterState:
    objects: list[Obj] = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}", "resourceVersion": "1"}}
        for i in range(3)
    ]
    for i in range(3):
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"slice-{i}", "resourceVersion": "1"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": f"node-{i}",
                    "pool": {"name": f"pool-{i}", "generation": 1, "resourceSliceCount": 1},
                    "devices": _awkward_devices(),
                },
            }
        )
    objects.append(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu", "resourceVersion": "1"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    return ClusterState.from_objects(objects)


def _masks(
    state: ClusterState, cases: list[tuple[str, tuple[str, ...]]], features: Features
) -> list[tuple[np.ndarray, np.ndarray]]:
    index = build_index(state, features)
    return [(m.match.copy(), m.error.copy()) for m in (index.mask(c, s) for c, s in cases)]


def _assert_grouping_changes_nothing(
    state: ClusterState, cases: list[tuple[str, tuple[str, ...]]], features: Features = FEATURES
) -> int:
    """Masks with groups equal masks device by device; returns how many CEL runs grouping saved."""
    runs: list[int] = []
    real = snapshot.DeviceIndex._evaluate

    def counting(self: snapshot.DeviceIndex, *args: object) -> tuple[bool, bool]:
        runs.append(1)
        return real(self, *args)  # type: ignore[arg-type]

    with mock.patch.object(snapshot.DeviceIndex, "_evaluate", counting):
        grouped = _masks(state, cases, features)
        grouped_runs = len(runs)
        runs.clear()
        with mock.patch.object(cel, "union_of_reads", lambda expressions: None):
            one_by_one = _masks(state, cases, features)
    for case, (gm, ge), (m, e) in zip(cases, grouped, one_by_one, strict=True):
        assert np.array_equal(gm, m), case
        assert np.array_equal(ge, e), case
    return len(runs) - grouped_runs


@pytest.mark.parametrize("version", ["1.36", "1.37"])  # 1.37 converts list attributes
@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_awkward_devices_get_their_own_verdicts(expression: str, version: str) -> None:
    state = _awkward_state()
    features = Features.from_gates(version=version)
    _assert_grouping_changes_nothing(state, [("gpu", ()), ("gpu", (expression,))], features)


def test_awkward_devices_are_all_in_one_mask_with_both_outcomes() -> None:
    """The cases above are not vacuous: the masks hold selected, unselected and failed rows."""
    state = _awkward_state()
    index = build_index(state, FEATURES)
    mask = index.mask("gpu", (f'device.attributes["{DRIVER}"].model == "a100"',))
    names = [d.name for d in index.row_device]
    selected = {names[r] for r in np.flatnonzero(mask.match)}
    failed = {names[r] for r in np.flatnonzero(mask.error)}
    assert {"plain-0", "plain-1", "qualified-only"} <= selected
    assert "both-names" not in selected  # CEL sees the qualified h100 published after the bare name
    # (list attributes are off by default in 1.36: a list makes the whole device unusable in CEL)
    assert {"bad-version", "wrong-type", "a-list", "no-model"} <= failed
    assert "two-kinds" in selected  # CEL takes the int of {"string", "int"}: still one verdict alone


def test_the_mixed_fleet_masks_equal_and_grouping_saves_most_runs() -> None:
    objects, _ = generate_mixed_cluster(nodes=60, seed=3, pods=10)
    state = ClusterState.from_objects(objects)
    classes = [obj["metadata"]["name"] for obj in objects if obj["kind"] == "DeviceClass"]
    cases: list[tuple[str, tuple[str, ...]]] = [(name, ()) for name in classes]
    cases.append(
        ("gpu.nvidia.com", ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',))
    )
    saved = _assert_grouping_changes_nothing(state, cases)
    rows = build_index(state, FEATURES).num_rows
    assert saved > rows  # one run per device model instead of one per device


def test_a_rebuilt_node_is_grouped_again_and_equals_a_fresh_mask() -> None:
    state = _awkward_state()
    expression = f'device.attributes["{DRIVER}"].index >= 2'
    first = build_index(state, FEATURES)
    first.mask("gpu", (expression,))
    raw = copy.deepcopy(state.get("ResourceSlice", "slice-1"))
    raw["metadata"]["resourceVersion"] = "2"
    raw["spec"]["devices"][0]["attributes"]["index"] = {"int": 7}
    state.upsert(raw)
    second = build_index(state, FEATURES, previous=first)
    after = second.mask("gpu", (expression,))
    fresh = build_index(state, FEATURES).mask("gpu", (expression,))
    assert np.array_equal(after.match, fresh.match) and np.array_equal(after.error, fresh.error)


def test_group_ids_are_dense_and_equal_exactly_for_equal_columns() -> None:
    keys = np.array([[5, 5, 7, 5, 7], [1, 2, 1, 1, 1]])
    group = selector_groups._group_ids(keys)
    assert sorted(set(group.tolist())) == [0, 1, 2]
    assert group[0] == group[3] and group[2] == group[4]
    assert len({group[0], group[1], group[2]}) == 3


READS = [
    ("driver",),
    ("allowMultipleAllocations",),
    ("attributes", DRIVER, "model"),
    ("attributes", DRIVER, "index"),
    ("attributes", DRIVER, "tags"),
    ("attributes", DRIVER, "version"),
    ("attributes", DRIVER, "extra"),
    ("attributes", "other.example.com", "zone"),
    ("attributes", "a/b", "c"),
    ("capacity", DRIVER, "memory"),
    ("capacity", "other.example.com", "memory"),
]


@pytest.mark.parametrize("read", READS)
def test_the_table_and_the_per_device_way_give_the_same_codes(read: tuple[str, ...]) -> None:
    """Columns built from the attribute table (a new index) equal the per-device codes (the
    rebuilt nodes' rows of a carried column); the awkward devices cover every special code."""
    index = build_index(_awkward_state(), FEATURES)
    one, whole = selector_groups.read_ways(index, read)
    per_device = np.array([one(device) for device in index.row_device], dtype=np.int32)
    assert np.array_equal(whole(), per_device)
    plain = np.array([attribute_table.plain(d) for d in index.row_device])
    assert np.array_equal(index.attribute_table().plain, plain)


@pytest.mark.parametrize(
    "name",
    [f"{DRIVER}/model", "model", f"{DRIVER}/tags", f"{DRIVER}/extra", "other.example.com/zone", "nothing"],
)
def test_attribute_codes_from_the_table_resolve_names_as_lookup_attribute(name: str) -> None:
    from extender.allocator.constraints import lookup_attribute

    index = build_index(_awkward_state(), FEATURES)
    codes = index.attribute_codes(name)
    for row, device in enumerate(index.row_device):
        value = lookup_attribute(device, name)
        if value is None or not any(
            value.get(k) is not None
            for k in ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
        ):
            assert codes[row] == -1, (device.name, name)
        elif any(value.get(k) is not None for k in ("ints", "bools", "strings", "versions")):
            assert codes[row] == -2, (device.name, name)
        else:
            kind = next(k for k in ("int", "bool", "string", "version") if value.get(k) is not None)
            assert codes[row] == index.intern((kind, value[kind])), (device.name, name)


def test_the_table_is_carried_through_generations_that_did_not_need_it() -> None:
    """A slice change whose generation builds no new column leaves its table unbuilt; the next
    generation carries the older table through both row maps instead of filing every device."""
    from extender.index.attribute_table import AttributeTable

    state = _awkward_state()
    index = build_index(state, FEATURES)
    index.mask("gpu", ())  # builds the table
    for i, name in enumerate(("slice-1", "slice-2")):
        raw = copy.deepcopy(state.get("ResourceSlice", name))
        raw["metadata"]["resourceVersion"] = str(2 + i)
        raw["spec"]["devices"][1]["attributes"]["index"] = {"int": 9 + i}
        state.upsert(raw)
        index = build_index(state, FEATURES, previous=index)
    with mock.patch.object(AttributeTable, "build", side_effect=AssertionError("filed every device again")):
        codes = index.attribute_codes(f"{DRIVER}/index")
        read = selector_groups.read_ways(index, ("attributes", DRIVER, "index"))[1]()
    fresh = build_index(state, FEATURES)
    fresh_codes = fresh.attribute_codes(f"{DRIVER}/index")
    fresh_read = selector_groups.read_ways(fresh, ("attributes", DRIVER, "index"))[1]()
    for ours, theirs in ((codes, fresh_codes), (read, fresh_read)):
        _assert_same_partition(ours, theirs)


def _assert_same_partition(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Equal codes exactly where the other has equal codes, and the same special (negative) codes
    (codes are interned per table, so only their equality means anything)."""
    assert np.array_equal(ours < 0, theirs < 0) and np.array_equal(ours[ours < 0], theirs[theirs < 0])
    pairs = set(zip(ours.tolist(), theirs.tolist(), strict=True))
    assert len({a for a, _ in pairs}) == len(pairs) == len({b for _, b in pairs})
