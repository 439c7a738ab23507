"""The `kubernetes_version` setting: where it comes from and what it selects (docs/kubernetes-versions.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from extender.allocator.features import GATE_DEFAULTS, GATE_DEFAULTS_137, Features
from extender.kube.version import VersionError, version_of
from extender.settings import load_settings


def _flags(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**given)


def test_file_mode_default_is_136() -> None:
    settings = load_settings(_flags(), {})
    assert settings.kubernetes_version is None
    assert settings.features.kubernetes_version == "1.36"
    assert settings.features == Features.from_gates(version="1.36")


def test_flag_env_and_file_layers(tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("kubernetesVersion: 1.37\n")  # YAML reads a float; its text is the version
    assert load_settings(_flags(config=str(config)), {}).features.v137
    env = {"DRA_EXTENDER_KUBERNETES_VERSION": "1.37"}
    assert load_settings(_flags(), env).kubernetes_version == "1.37"
    # flags win over env
    settings = load_settings(_flags(kubernetes_version="1.36"), env)
    assert settings.kubernetes_version == "1.36" and not settings.features.v137


def test_unsupported_version_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"--kubernetes-version: '1.35' is not a supported .*1\.36, 1\.37"):
        load_settings(_flags(kubernetes_version="1.35"), {})


def test_gate_defaults_follow_the_version() -> None:
    """1.37 as kube-scheduler v1.37.2 runs by default: DRADeviceTaintRules GA; the new gates off,
    the fractional capacity range too (on only with --min-compatibility-version=1.37)."""
    f136 = load_settings(_flags(), {}).features
    f137 = load_settings(_flags(kubernetes_version="1.37"), {}).features
    assert (f136.device_taint_rules, f137.device_taint_rules) == (False, True)
    assert (f136.fractional_capacity_range, f137.fractional_capacity_range) == (False, False)
    assert not (f137.compatibility_groups or f137.derived_attributes or f137.optional_node_operations)
    assert set(GATE_DEFAULTS_137) - set(GATE_DEFAULTS) == {
        "DRADerivedAttributes",
        "DRADeviceCompatibilityGroups",
        "DRAFractionalCapacityRange",
        "DRAOptionalNodeOperations",
    }


def test_a_137_gate_is_unknown_to_136() -> None:
    """The 1.36 scheduler has no such gate; naming it is a mistake to report, not to ignore."""
    gates = "DRADerivedAttributes=true"
    with pytest.raises(ValueError, match=r"unknown feature gate 'DRADerivedAttributes' for Kubernetes 1\.36"):
        load_settings(_flags(feature_gates=gates), {})
    settings = load_settings(_flags(feature_gates=gates, kubernetes_version="1.37"), {})
    assert settings.features.derived_attributes


def test_kube_mode_rebuilds_features_for_the_servers_version() -> None:
    settings = load_settings(_flags(kube=True, feature_gates="DRADeviceTaintRules=false"), {})
    assert settings.kubernetes_version is None
    rebuilt = settings.with_kubernetes_version("1.37")
    assert rebuilt.features.v137 and rebuilt.features.device_taint_rules is False
    assert not rebuilt.features.fractional_capacity_range  # 1.37's default, not overridden


def test_kube_mode_with_a_137_only_gate_on_a_136_server() -> None:
    settings = load_settings(_flags(kube=True, feature_gates="DRADerivedAttributes=true"), {})
    with pytest.raises(ValueError, match=r"for Kubernetes 1\.36"):
        settings.with_kubernetes_version("1.36")


@pytest.mark.parametrize(
    ("info", "version"),
    [
        ({"gitVersion": "v1.37.2", "major": "1", "minor": "37"}, "1.37"),
        ({"gitVersion": "v1.36.3-gke.100", "major": "1", "minor": "36+"}, "1.36"),
        ({"gitVersion": "", "major": "1", "minor": "37+"}, "1.37"),
    ],
)
def test_version_of_the_api_server(info: dict[str, str], version: str) -> None:
    assert version_of(info) == version


def test_unsupported_server_version_names_the_override() -> None:
    with pytest.raises(VersionError) as caught:
        version_of({"gitVersion": "v1.35.1", "major": "1", "minor": "35"})
    text = str(caught.value)
    assert "Kubernetes 1.35" in text and "supported: 1.36, 1.37" in text and "--kubernetes-version" in text


@pytest.mark.parametrize(
    ("version", "gate", "value"),
    [
        ("1.36", "DRAAdminAccess", False),
        ("1.37", "DRAExtendedResource", False),
        ("1.37", "DRAPrioritizedList", False),
        ("1.37", "DRAResourceClaimDeviceStatus", False),
    ],
)
def test_a_locked_gate_cannot_leave_its_default(version: str, gate: str, value: bool) -> None:
    """GA gates locked to their default (LockToDefault in kube_features.go) are refused with
    component-base's text; naming them at their default is fine."""
    expected = f"cannot set feature gate {gate} to false, feature is locked to true"
    with pytest.raises(ValueError, match=expected):
        Features.from_gates({gate: value}, version)
    assert Features.from_gates({gate: not value}, version) == Features.from_gates({}, version)


def test_a_gate_locked_only_in_137_can_be_turned_off_in_136() -> None:
    """DRAExtendedResource is beta in 1.36 (switchable) and locked on in 1.37."""
    assert not Features.from_gates({"DRAExtendedResource": False}, "1.36").extended_resource
