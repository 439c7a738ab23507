"""The dra-extender command line (extender.__main__): subcommands, and exit code 2 with a message
for bad settings, unreadable state and an unusable kubeconfig."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from extender.__main__ import build_parser, main


def test_sample_cluster_prints_parseable_multi_document_yaml(capsys):
    """`sample-cluster` prints YAML documents that all carry a kind."""
    pytest.importorskip("extender.cluster.sample", reason="extender/cluster/sample.py not written yet")
    assert main(["sample-cluster"]) == 0
    documents = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d is not None]
    assert documents
    assert all(isinstance(d, dict) and d.get("kind") for d in documents)


def test_bad_feature_gates_exit_2_with_message(capsys):
    """A malformed --feature-gates value exits 2 and says what is expected."""
    assert main(["serve", "--feature-gates", "DRAAdminAccess=maybe"]) == 2
    err = capsys.readouterr().err
    assert "must look like Name=true or Name=false" in err
    assert "Traceback" not in err


def test_unknown_feature_gate_exits_2_listing_known_gates(capsys):
    """An unknown gate name exits 2 and lists the known gates."""
    assert main(["serve", "--feature-gates", "Bogus=true"]) == 2
    assert "known gates:" in capsys.readouterr().err


def test_missing_state_file_exits_2(tmp_path, capsys):
    """A --state path that does not exist exits 2 naming it."""
    missing = tmp_path / "missing.yaml"
    assert main(["serve", "--state", str(missing), "--log-level", "error"]) == 2
    assert f"{missing}: no such file or directory" in capsys.readouterr().err


def test_malformed_state_file_exits_2(tmp_path, capsys):
    """A malformed state file exits 2 with the loader's message, no traceback."""
    bad = tmp_path / "state.yaml"
    bad.write_text("apiVersion: v1\nkind: Node\nmetadata: {}\n")
    assert main(["serve", "--state", str(bad), "--log-level", "error"]) == 2
    err = capsys.readouterr().err
    assert "document 0 (Node): metadata.name: required" in err
    assert "Traceback" not in err


def test_kube_without_a_usable_kubeconfig_exits_2(capsys, tmp_path):
    """--kube with an unreadable kubeconfig exits 2 with a clear message, before serving."""
    missing = tmp_path / "no-such-kubeconfig"
    assert main(["serve", "--kube", "--kubeconfig", str(missing), "--log-level", "error"]) == 2
    err = capsys.readouterr().err
    assert "--kube: cannot load the Kubernetes client configuration" in err
    assert "Traceback" not in err


def test_bad_listen_exits_2(capsys):
    """An invalid --listen exits 2."""
    assert main(["serve", "--listen", "nowhere"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err


def test_no_subcommand_prints_help_and_exits_2(capsys):
    """Without a subcommand the help goes to stderr and the exit code is 2."""
    assert main([]) == 2
    assert "serve" in capsys.readouterr().err


def test_serve_flags_parse():
    """Every serve flag is accepted by the parser; unset flags stay None."""
    argv = "serve --listen 0.0.0.0:1 --state a --state b --kube --kubeconfig k --config c"
    argv += " --feature-gates X=true --max-body-bytes 1 --log-level debug --log-json"
    args = build_parser().parse_args(argv.split())
    assert args.state == ["a", "b"]
    assert (args.kube, args.log_json, args.log_level) == (True, True, "debug")
    unset = build_parser().parse_args(["serve"])
    assert (unset.listen, unset.kube, unset.log_json, unset.state) == (None, None, None, None)


def test_python_dash_m_runs_the_cli():
    """`python -m extender --help` works."""
    result = subprocess.run(
        [sys.executable, "-m", "extender", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert "sample-cluster" in result.stdout
