"""The sample configuration in config/: the extender's settings file and the two scheduler configs.

The settings file must load with the real `load_settings` and name every `Settings` field, so a
new setting fails here until it is documented. The KubeSchedulerConfigurations are checked for
the fields extender-protocol.md §4-§6 requires of a DRA extender (empty managedResources,
nodeCacheCapable, percentageOfNodesToScore 100, a positive weight with prioritizeVerb, ...).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.server import VERBS
from extender.settings import Settings, load_settings

CONFIG = Path(__file__).resolve().parents[2] / "config"
SETTINGS_FILE = CONFIG / "extender-settings.yaml"
ADVISORY = CONFIG / "scheduler-advisory.yaml"
ALLOCATOR = CONFIG / "scheduler-allocator.yaml"
SCHEDULER_API = "kubescheduler.config.k8s.io/v1"
#: Extension points of the in-tree DynamicResources plugin (its `var _ fwk.<Point>Plugin`
#: assertions upstream) where it decides or writes; the allocator profile must disable it at each
#: one and in multiPoint. PreEnqueue is the one it keeps: there the plugin only holds a pod back
#: until its claims exist (tests/e2e/test_faults.py shows what that spares the pods).
DRA_EXTENSION_POINTS = (
    "multiPoint",
    "preFilter",
    "filter",
    "postFilter",
    "score",
    "reserve",
    "preBind",
)
#: Settings fields whose settings-file key is not simply the field name.
FILE_KEYS = {"features": "feature_gates"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _documented_keys(text: str) -> set[str]:
    """Keys set in the file plus keys shown commented out (`# kubeconfig: ...`, one space, no indent)."""
    active = set((yaml.safe_load(text) or {}).keys())
    commented = set(re.findall(r"^# ([A-Za-z][A-Za-z0-9]*):(?:\s|$)", text, flags=re.MULTILINE))
    return active | commented


# ------------------------------------------------------------------ extender-settings.yaml


def test_settings_file_loads_with_the_real_loader():
    """config/extender-settings.yaml is accepted by load_settings as it is."""
    settings = load_settings(argparse.Namespace(config=str(SETTINGS_FILE)), {})
    assert settings.kube is True and settings.leader_elect is True
    assert settings.tls_cert_file == Path("/etc/dra-extender/tls/tls.crt")
    assert settings.client_ca_file == Path("/etc/dra-extender/tls/ca.crt")


def test_settings_file_names_every_settings_field():
    """Every Settings field appears in the file (camelCase, set or commented out); add new fields there."""
    keys = _documented_keys(SETTINGS_FILE.read_text(encoding="utf-8"))
    missing = [
        f.name
        for f in fields(Settings)
        if _camel(FILE_KEYS.get(f.name, f.name)) not in keys and FILE_KEYS.get(f.name, f.name) not in keys
    ]
    assert not missing, f"document these settings in {SETTINGS_FILE.name}: {', '.join(missing)}"


def test_settings_file_has_a_comment_for_every_key():
    """Each key line is preceded by a comment line (its documentation)."""
    lines = SETTINGS_FILE.read_text(encoding="utf-8").splitlines()
    undocumented = [
        line.split(":")[0]
        for i, line in enumerate(lines)
        if re.match(r"^[A-Za-z]", line) and (i == 0 or not lines[i - 1].startswith("#"))
    ]
    assert not undocumented


def test_commented_out_keys_are_valid_settings(tmp_path):
    """A key shown commented out is a real setting that loads when uncommented."""
    text = SETTINGS_FILE.read_text(encoding="utf-8")
    shown = re.findall(r"^# ([A-Za-z][A-Za-z0-9]*):\s+(\S+)\s*$", text, flags=re.MULTILINE)
    assert shown  # kubeconfig, at least
    for key, value in shown:
        config = tmp_path / f"{key}.yaml"
        config.write_text(yaml.safe_dump({key: value}))
        load_settings(argparse.Namespace(config=str(config)), {})


# ------------------------------------------------------------------ scheduler configurations


def _scheduler_config(path: Path) -> dict[str, Any]:
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert config["apiVersion"] == SCHEDULER_API
    assert config["kind"] == "KubeSchedulerConfiguration"
    return config


def _check_extender(extender: dict[str, Any]) -> None:
    """The fields every configuration of this extender needs (extender-protocol.md §4, §6)."""
    assert extender["urlPrefix"].startswith("https://")  # the scheme selects TLS, not enableHTTPS
    assert extender["enableHTTPS"] is True
    assert {"certFile", "keyFile", "caFile"} <= set(extender["tlsConfig"])
    assert extender["filterVerb"] in VERBS and extender["prioritizeVerb"] in VERBS
    assert isinstance(extender["weight"], int) and extender["weight"] > 0  # required with prioritizeVerb
    assert extender["nodeCacheCapable"] is True
    assert extender["managedResources"] == []  # IsInterested() ignores ResourceClaims
    assert re.fullmatch(r"\d+(\.\d+)?(ms|s)", extender["httpTimeout"])
    assert isinstance(extender["ignorable"], bool)


@pytest.mark.parametrize("path", [ADVISORY, ALLOCATOR], ids=["advisory", "allocator"])
def test_scheduler_config_required_fields(path):
    """apiVersion v1, percentageOfNodesToScore 100 and one fully specified extender."""
    config = _scheduler_config(path)
    assert config["percentageOfNodesToScore"] == 100
    assert len(config["extenders"]) == 1
    _check_extender(config["extenders"][0])


def test_advisory_config_filters_and_scores_only():
    """Advisory: no bindVerb (the in-tree plugin allocates, DefaultBinder binds), ignorable, one profile."""
    config = _scheduler_config(ADVISORY)
    extender = config["extenders"][0]
    assert "bindVerb" not in extender and "preemptVerb" not in extender
    assert extender["ignorable"] is True
    assert [p["schedulerName"] for p in config["profiles"]] == ["default-scheduler"]
    assert "plugins" not in config["profiles"][0]  # DynamicResources stays on


def test_allocator_config_profiles_and_binder():
    """Allocator: default profile as is, DynamicResources off in the DRA profile except at
    PreEnqueue, bind."""
    config = _scheduler_config(ALLOCATOR)
    extender = config["extenders"][0]
    assert extender["bindVerb"] == "bind" and extender["bindVerb"] in VERBS
    assert extender["ignorable"] is False
    profiles = {p["schedulerName"]: p for p in config["profiles"]}
    assert set(profiles) == {"default-scheduler", "dra-topology-scheduler"}
    assert "plugins" not in profiles["default-scheduler"]
    plugins = profiles["dra-topology-scheduler"]["plugins"]
    for point in DRA_EXTENSION_POINTS:
        assert {"name": "DynamicResources"} in plugins[point]["disabled"], point
        assert not plugins[point].get("enabled"), point
    assert plugins["preEnqueue"] == {"enabled": [{"name": "DynamicResources"}]}
