"""Settings (extender.settings): defaults, the file < env < flags layering, and validation messages."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from extender.allocator.features import Features
from extender.settings import Settings, load_settings


def _flags(**given) -> argparse.Namespace:
    return argparse.Namespace(**given)


def test_defaults():
    """With no file, env or flags, the documented defaults apply."""
    settings = load_settings(_flags(), {})
    assert settings == Settings()
    assert (settings.listen_host, settings.listen_port) == ("127.0.0.1", 8888)
    assert settings.state_paths == ()
    assert settings.max_body_bytes == 64 * 1024 * 1024
    assert settings.features == Features.from_gates()
    assert (settings.assume_ttl_seconds, settings.filter_timeout_seconds) == (60.0, 10.0)
    assert (settings.log_level, settings.log_json, settings.kube) == ("info", False, False)


def test_settings_are_frozen():
    """Settings cannot be changed after loading."""
    with pytest.raises(AttributeError):
        Settings().listen_port = 1  # type: ignore[misc]


def test_flags_fill_fields():
    """Each serve flag sets its field."""
    settings = load_settings(
        _flags(
            listen="0.0.0.0:9000",
            state=["a.yaml", "b"],
            kubeconfig="/kc",
            max_body_bytes="1Mi",
            log_level="debug",
            log_json=True,
            feature_gates="DRADeviceTaints=false",
        ),
        {},
    )
    assert (settings.listen_host, settings.listen_port) == ("0.0.0.0", 9000)
    assert settings.state_paths == (Path("a.yaml"), Path("b"))
    assert settings.kubeconfig == Path("/kc")
    assert settings.max_body_bytes == 1024 * 1024
    assert (settings.log_level, settings.log_json) == ("debug", True)
    assert settings.features.device_taints is False


def test_ipv6_listen_address():
    """--listen accepts a bracketed IPv6 address."""
    settings = load_settings(_flags(listen="[::1]:8443"), {})
    assert (settings.listen_host, settings.listen_port) == ("::1", 8443)


def test_env_vars_fill_fields():
    """DRA_EXTENDER_<FIELD> env vars set fields."""
    environ = {
        "DRA_EXTENDER_LISTEN_PORT": "9100",
        "DRA_EXTENDER_ASSUME_TTL_SECONDS": "30",
        "DRA_EXTENDER_FILTER_TIMEOUT_SECONDS": "2.5",
        "DRA_EXTENDER_LOG_JSON": "true",
        "DRA_EXTENDER_SCHEDULER_NAMES": "dra-scheduler, default-scheduler",
        "DRA_EXTENDER_STATE_PATHS": os.pathsep.join(["x.yaml", "y.yaml"]),
    }
    settings = load_settings(_flags(), environ)
    assert settings.listen_port == 9100
    assert (settings.assume_ttl_seconds, settings.filter_timeout_seconds) == (30.0, 2.5)
    assert settings.log_json is True
    assert settings.scheduler_names == ("dra-scheduler", "default-scheduler")
    assert settings.state_paths == (Path("x.yaml"), Path("y.yaml"))


def test_file_keys_accept_camel_and_snake_case(tmp_path):
    """The settings file takes field names in camelCase or snake_case."""
    config = tmp_path / "settings.yaml"
    config.write_text("listenPort: 9200\nmax_body_bytes: 4096\nschedulerNames: [dra]\nlogLevel: warning\n")
    settings = load_settings(_flags(config=str(config)), {})
    assert (settings.listen_port, settings.max_body_bytes) == (9200, 4096)
    assert settings.scheduler_names == ("dra",)
    assert settings.log_level == "warning"


def test_file_paths_are_relative_to_the_file(tmp_path):
    """Relative state paths in the settings file resolve against the file's directory."""
    config = tmp_path / "conf" / "settings.yaml"
    config.parent.mkdir()
    config.write_text("statePaths: [cluster.yaml, /abs/state]\n")
    settings = load_settings(_flags(config=str(config)), {})
    assert settings.state_paths == (tmp_path / "conf" / "cluster.yaml", Path("/abs/state"))


def test_config_file_from_env(tmp_path):
    """DRA_EXTENDER_CONFIG names the settings file when --config is not given."""
    config = tmp_path / "settings.yaml"
    config.write_text("listenPort: 9300\n")
    assert load_settings(_flags(), {"DRA_EXTENDER_CONFIG": str(config)}).listen_port == 9300


def test_layers_override_file_then_env_then_flags(tmp_path):
    """A flag beats an env var, which beats the file, which beats the default."""
    config = tmp_path / "settings.yaml"
    config.write_text("listenHost: 10.0.0.1\nlistenPort: 1111\nlogLevel: error\nmaxBodyBytes: 100\n")
    environ = {"DRA_EXTENDER_LISTEN_PORT": "2222", "DRA_EXTENDER_LOG_LEVEL": "warning"}
    settings = load_settings(_flags(config=str(config), log_level="debug"), environ)
    assert settings.listen_host == "10.0.0.1"  # file only
    assert settings.listen_port == 2222  # env over file
    assert settings.log_level == "debug"  # flag over env and file
    assert settings.max_body_bytes == 100  # file over default


def test_feature_gates_merge_gate_by_gate(tmp_path):
    """Gates from file, env and flags merge; the higher layer wins per gate."""
    config = tmp_path / "settings.yaml"
    config.write_text("featureGates: {DRADeviceTaints: false, DRAAdminAccess: false}\n")
    environ = {"DRA_EXTENDER_FEATURE_GATES": "DRAListTypeAttributes=true"}
    settings = load_settings(_flags(config=str(config), feature_gates="DRAAdminAccess=true"), environ)
    assert settings.features.device_taints is False
    assert settings.features.list_type_attributes is True
    assert settings.features.admin_access is True


def test_unset_flags_do_not_override():
    """Flags that are None (not given) leave lower layers alone."""
    settings = load_settings(_flags(listen=None, log_json=None, kube=None), {"DRA_EXTENDER_LOG_JSON": "1"})
    assert settings.log_json is True


def test_environment_without_prefix_is_ignored():
    """Only DRA_EXTENDER_* variables are read."""
    assert load_settings(_flags(), {"LOG_LEVEL": "debug", "KUBECONFIG": "/x"}) == Settings()


INVALID = {
    "bad-log-level": (_flags(log_level="loud"), {}, "allowed: debug, info, warning, error, critical"),
    "bad-listen": (_flags(listen="8888"), {}, "--listen: '8888' is not HOST:PORT"),
    "bad-port": (_flags(listen="localhost:99999"), {}, "allowed: an integer 0..65535"),
    "bad-size": (_flags(max_body_bytes="lots"), {}, "allowed: an integer of bytes from 1 to 1Gi"),
    "zero-size": (_flags(max_body_bytes="0"), {}, "--max-body-bytes"),
    "bad-gate-syntax": (_flags(feature_gates="DRAAdminAccess"), {}, "must look like Name=true"),
    "unknown-gate": (_flags(feature_gates="NoSuchGate=true"), {}, "known gates: DRAAdminAccess"),
    "bad-env-bool": (
        _flags(),
        {"DRA_EXTENDER_LOG_JSON": "maybe"},
        "DRA_EXTENDER_LOG_JSON: 'maybe' is not a boolean",
    ),
    "bad-env-seconds": (
        _flags(),
        {"DRA_EXTENDER_ASSUME_TTL_SECONDS": "-1"},
        "greater than 0 and at most 3600",
    ),
    "kube-and-state": (_flags(kube=True, state=["a.yaml"]), {}, "mutually exclusive"),
    "bad-kernel-warmup": (
        _flags(),
        {"DRA_EXTENDER_KERNEL_WARMUP": "lazy"},
        "'lazy' is not a kernel warm-up; allowed: background, blocking",
    ),
}


@pytest.mark.parametrize(("flags", "environ", "needle"), list(INVALID.values()), ids=list(INVALID))
def test_invalid_values_raise_value_error(flags, environ, needle):
    """Invalid values raise ValueError whose message says what is allowed."""
    with pytest.raises(ValueError) as info:
        load_settings(flags, environ)
    assert needle in str(info.value)


def test_unknown_file_key_lists_allowed_keys(tmp_path):
    """An unknown settings-file key is rejected with the list of allowed keys."""
    config = tmp_path / "settings.yaml"
    config.write_text("listenPrt: 1\n")
    with pytest.raises(ValueError, match=r"listenPrt: unknown setting; allowed .*listen_port"):
        load_settings(_flags(config=str(config)), {})


def test_missing_settings_file(tmp_path):
    """A settings file that cannot be read is a ValueError naming it."""
    with pytest.raises(ValueError, match=r"settings file .*nope\.yaml: cannot read"):
        load_settings(_flags(config=str(tmp_path / "nope.yaml")), {})


def test_settings_file_must_be_a_mapping(tmp_path):
    """A settings file that is not a mapping is rejected."""
    config = tmp_path / "settings.yaml"
    config.write_text("- listenPort\n")
    with pytest.raises(ValueError, match="must be a mapping"):
        load_settings(_flags(config=str(config)), {})


def test_as_dict_is_printable():
    """as_dict gives a printable value per field, for the start-up log."""
    described = Settings(state_paths=(Path("a"), Path("b"))).as_dict()
    assert described["state_paths"] == "a,b"
    assert "device_taints=True" in described["features"]
    assert set(described) == set(Settings.__dataclass_fields__)


# ---------------------------------------------------------------- TLS combinations


def test_tls_files_from_flags_env_and_file(tmp_path):
    """The TLS paths come from flags, env vars or the file (relative file paths: the file's directory)."""
    config = tmp_path / "settings.yaml"
    config.write_text("tlsCertFile: tls/tls.crt\ntlsKeyFile: tls/tls.key\nclientCaFile: /ca/ca.crt\n")
    from_file = load_settings(_flags(config=str(config)), {})
    assert (from_file.tls_cert_file, from_file.tls_key_file) == (
        tmp_path / "tls/tls.crt",
        tmp_path / "tls/tls.key",
    )
    assert from_file.client_ca_file == Path("/ca/ca.crt")
    environ = {"DRA_EXTENDER_TLS_CERT_FILE": "/e/c", "DRA_EXTENDER_TLS_KEY_FILE": "/e/k"}
    from_env = load_settings(_flags(), environ)
    assert (from_env.tls_cert_file, from_env.tls_key_file, from_env.client_ca_file) == (
        Path("/e/c"),
        Path("/e/k"),
        None,
    )
    from_flags = load_settings(
        _flags(tls_cert_file="/f/c", tls_key_file="/f/k", client_ca_file="/f/ca"), environ
    )
    assert (from_flags.tls_cert_file, from_flags.client_ca_file) == (Path("/f/c"), Path("/f/ca"))


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"tls_cert_file": "/c"}, "tls_cert_file and tls_key_file must be given together"),
        ({"tls_key_file": "/k"}, "tls_cert_file and tls_key_file must be given together"),
        ({"client_ca_file": "/ca"}, r"client_ca_file \(--client-ca-file\) needs HTTPS"),
        ({"tls_key_file": "/k", "client_ca_file": "/ca"}, "must be given together"),
    ],
    ids=["cert-without-key", "key-without-cert", "client-ca-without-https", "key-and-ca-without-cert"],
)
def test_incomplete_tls_settings_are_rejected(given, message):
    """HTTPS needs both certificate and key; mutual TLS needs HTTPS."""
    with pytest.raises(ValueError, match=message):
        load_settings(_flags(**given), {})


def test_tls_combination_is_checked_across_layers():
    """A certificate from the environment and a key from a flag make a valid pair."""
    settings = load_settings(_flags(tls_key_file="/k"), {"DRA_EXTENDER_TLS_CERT_FILE": "/c"})
    assert (settings.tls_cert_file, settings.tls_key_file) == (Path("/c"), Path("/k"))


def test_kernel_warmup_defaults_to_background_and_accepts_blocking():
    """The kernels compile in the background unless `kernel_warmup: blocking` (env or file)."""
    assert load_settings(_flags(), {}).kernel_warmup == "background"
    assert load_settings(_flags(), {"DRA_EXTENDER_KERNEL_WARMUP": "Blocking"}).kernel_warmup == "blocking"
