"""Every numeric setting is bounded, and prioritize answers 0..10 whatever the settings say.

Issue 22 item 8: weights of 1e308 gave `Score: -9223372036854775808`, a gang weight of 1e308 a 500,
`level_distances=nan,...` started, and `kernel_threads=100000` passed validation and then died at
start-up with a traceback and exit 1. Now each numeric setting has a range (exit 2 naming the
setting and the range), and the score assembly clamps into 0..10 even for settings that bypass
validation (a `Settings` built in code).
"""

from __future__ import annotations

import argparse
import copy
import re
from dataclasses import fields
from pathlib import Path

import numba
import numpy as np
import pytest

from extender.__main__ import main
from extender.bounds import NUMERIC_BOUNDS
from extender.cluster.sample import sample_objects
from extender.cluster.state import ClusterState
from extender.core import gang, scoring
from extender.pods import parse_pod
from extender.settings import ENV_PREFIX, Settings, load_settings
from extender.verdicts import HostScore
from extender.wire import encode_host_priorities
from extender.wiring import build_services
from tests.scenarios.test_gang_pipeline import GANG

#: Numeric fields: int/float (not bool) or a tuple of floats.
NUMERIC_FIELDS = [
    f.name
    for f in fields(Settings)
    if type(getattr(Settings(), f.name)) in (int, float)
    or (isinstance(getattr(Settings(), f.name), tuple) and f.name == "level_distances")
]
THREADS = int(numba.config.NUMBA_NUM_THREADS)


def _env(name: str, value: str) -> Settings:
    return load_settings(argparse.Namespace(), {ENV_PREFIX + name.upper(): value})


def test_the_numeric_fields_are_the_ones_expected():
    """A new numeric setting shows up here (and in test_every_numeric_setting_refuses_...)."""
    assert (
        len(NUMERIC_FIELDS) == 31
        and "kernel_threads" in NUMERIC_FIELDS
        and "level_distances" in NUMERIC_FIELDS
    )


@pytest.mark.parametrize("name", NUMERIC_FIELDS)
@pytest.mark.parametrize("value", ["1e308", "nan", "inf", "-1", "1e6,2e6,3e6,4e6,5e6"])
def test_every_numeric_setting_refuses_huge_non_finite_and_negative_values(name: str, value: str):
    """Each one names where the value came from and the allowed range."""
    if name == "level_distances":
        value = f"{value},2,3,4,6" if "," not in value else value
    with pytest.raises(ValueError) as caught:
        _env(name, value)
    message = str(caught.value)
    assert message.startswith(ENV_PREFIX + name.upper() + ":") and "allowed" in message


@pytest.mark.parametrize("name", sorted(NUMERIC_BOUNDS))
def test_bounds_are_inclusive_at_the_top_and_refuse_just_above(name: str):
    """The largest allowed value loads; the next one up is refused with the range in words."""
    bound = NUMERIC_BOUNDS[name]
    top = int(bound.high) if bound.integer else bound.high
    assert bound.holds(top) and not bound.holds(top + 1)
    if not name.endswith(
        ("renew_deadline_seconds", "retry_period_seconds")
    ):  # these must stay below the lease
        assert getattr(_env(name, str(top)), name) == top
    with pytest.raises(ValueError, match=bound.describe()):
        _env(name, str(top + 1))


@pytest.mark.parametrize("name", sorted(NUMERIC_BOUNDS))
def test_defaults_are_within_their_bounds(name: str):
    assert NUMERIC_BOUNDS[name].holds(getattr(Settings(), name))


def test_durations_must_be_above_zero_and_counts_whole():
    with pytest.raises(ValueError, match="greater than 0 and at most 300"):
        _env("filter_timeout_seconds", "0")
    with pytest.raises(ValueError, match="an integer from 1 to 65536"):
        _env("cel_result_cache_size", "2.5")
    assert _env("cel_result_cache_size", "64.0").cel_result_cache_size == 64


def test_kernel_threads_is_bounded_by_what_numba_accepts():
    """Up to NUMBA_NUM_THREADS (numba.set_num_threads refuses more); 0 is numba's default."""
    assert _env("kernel_threads", str(THREADS)).kernel_threads == THREADS
    assert _env("kernel_threads", "0").kernel_threads == 0
    with pytest.raises(ValueError, match=f"an integer from 0 to {THREADS}"):
        _env("kernel_threads", "100000")


def test_level_distances_must_be_finite():
    with pytest.raises(ValueError, match="LEVEL_DISTANCES"):
        _env("level_distances", "1,2,3,4,nan")
    with pytest.raises(ValueError, match="at most 1000"):
        _env("level_distances", "1,2,3,4,1001")
    assert _env("level_distances", "1,2,3,4,1000").level_distances == (1, 2, 3, 4, 1000)


def test_settings_file_values_are_bounded_too(tmp_path):
    config = tmp_path / "settings.yaml"
    config.write_text("gangWeight: 1.0e+308\n")
    with pytest.raises(ValueError, match=r"settings\.yaml: gangWeight: 1e\+308 is out of range"):
        load_settings(argparse.Namespace(config=str(config)), {})


@pytest.mark.parametrize(
    ("variable", "value"),
    [("KERNEL_THREADS", "100000"), ("LOCALITY_WEIGHT", "1e308"), ("LEVEL_DISTANCES", "nan,2,3,4,6")],
)
def test_serve_exits_2_naming_the_setting(monkeypatch, capsys, variable: str, value: str):
    """No traceback, no exit 1: the message names the variable and what is allowed."""
    monkeypatch.setenv(ENV_PREFIX + variable, value)
    assert main(["serve", "--log-level", "error"]) == 2
    err = capsys.readouterr().err
    assert ENV_PREFIX + variable in err and "Traceback" not in err


# ------------------------------------------------------------------ scores stay in 0..10 regardless
def test_priorities_of_non_finite_scores_are_0_and_the_rest_stretch():
    scores = np.array([np.nan, np.inf, -np.inf, 1.0, 3.0, 2.0])
    assert scoring.priorities(scores).tolist() == [0, 0, 0, 0, 10, 5]


def test_priorities_of_scores_whose_difference_overflows():
    """-1e308..1e308 spans more than a double holds; the halves do not."""
    assert scoring.priorities(np.array([-1e308, 0.0, 1e308])).tolist() == [0, 5, 10]
    assert scoring.priorities(np.array([np.nan, np.nan])).tolist() == [0, 0]
    assert scoring.priorities(np.array([7.0, 7.0])).tolist() == [10, 10]


@pytest.mark.parametrize("weight", [0.0, 1.0, 3.0, 1000.0, 1e308, float("inf"), float("nan")])
@pytest.mark.parametrize(("priority", "clique"), [(0, 0.0), (4, 1.0), (10, 0.5), (7, 0.0)])
def test_gang_combine_is_0_to_10_for_any_weight(weight: float, priority: int, clique: float):
    assert 0 <= gang.combine(priority, clique, weight) <= 10


def test_gang_combine_keeps_its_weighted_mean():
    """weight : 1 between the clique term (x10) and the topology priority, as before."""
    assert gang.combine(4, 1.0, 3.0) == round((3 * 10 + 4) / 4)
    assert gang.combine(2, 0.25, 1.0) == round((2.5 + 2) / 2)
    assert gang.combine(6, 0.0, 0.0) == 6


def test_the_wire_clamps_whatever_reaches_it():
    body = encode_host_priorities([HostScore("a", -(2**63)), HostScore("b", 99), HostScore("c", 4)])
    assert body == b'[{"Host":"a","Score":0},{"Host":"b","Score":10},{"Host":"c","Score":4}]'


def _placement(settings: Settings):  # type: ignore[no-untyped-def]
    placement, _ = build_services(settings, ClusterState.from_objects(copy.deepcopy(sample_objects())))
    return placement


GPU_POD = parse_pod(
    {
        "metadata": {"name": "gpu-training", "namespace": "ml-training", "uid": "u-huge"},
        "spec": {"resourceClaims": [{"name": "devices", "resourceClaimName": "gpu-training-devices-vbdcr"}]},
    }
)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow this test provokes on purpose
def test_huge_weights_built_in_code_still_score_0_to_10():
    """Settings made in code skip validation; 1e308 weights once gave -2**63 on the passed nodes."""
    huge = Settings(locality_weight=1e308, fragmentation_weight=1e308, packing_weight=1e308)
    placement = _placement(huge)
    try:
        nodes = sorted(placement.index().nodes)
        scores = placement.prioritize(GPU_POD, nodes)
        assert all(0 <= s.score <= 10 for s in scores)
        assert {s.host for s in scores if s.score} <= {"h100-node-01", "h100-node-02"}
    finally:
        placement.worker.close()


def test_a_huge_gang_weight_built_in_code_does_not_fail_prioritize():
    """A gang member with gang_weight 1e308 once raised (HTTP 500); now the clique term decides."""
    placement = _placement(Settings(gang_weight=1e308))
    try:
        member = parse_pod(copy.deepcopy(GANG[0]))
        nodes = sorted(placement.index().nodes)
        passed = placement.filter(member, nodes).passed
        scores = placement.prioritize(member, passed)
        assert scores and all(0 <= s.score <= 10 for s in scores)
        assert max(s.score for s in scores) == 10
    finally:
        placement.worker.close()


# ------------------------------------------------------------------ the README states the ranges
README = Path(__file__).resolve().parents[2] / "README.md"
#: What the README's Allowed cell says for the numeric settings without a `Bound`.
OWN_CONVERTERS = {
    "listen_port": "from 0 to 65535",
    "max_body_bytes": "from 1 to 1Gi",
    "selector_mask_cache_bytes": "from 1 to 1Gi",
    "evaluation_cache_bytes": "from 1 to 1Gi",
    "pods_seen_cache_bytes": "from 1 to 1Gi",
    "level_distances": "at most 1000",
    "kernel_threads": "NUMBA_NUM_THREADS",
}


def _settings_rows() -> dict[str, str]:
    """Field name -> its row of the README's settings table (rows may name several fields)."""
    text = README.read_text(encoding="utf-8")
    table = text[text.index("| Field | Default | Allowed |") :].split("\n\n", 1)[0]
    rows: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        first = line.split("|")[1]
        for name in re.findall(r"`([a-z_]+)`", first):
            rows[name] = line
    return rows


@pytest.mark.parametrize("name", NUMERIC_FIELDS)
def test_readme_states_each_numeric_settings_range(name: str):
    row = _settings_rows().get(name)
    assert row is not None, f"README settings table has no row for {name}"
    expected = NUMERIC_BOUNDS[name].describe() if name in NUMERIC_BOUNDS else OWN_CONVERTERS[name]
    assert expected in row, f"README's row for {name} does not say {expected!r}"
