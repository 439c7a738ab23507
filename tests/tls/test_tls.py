"""HTTPS serving (extender.tls): the real app over TLS, mutual TLS, and certificate rotation.

Every test starts the real application (make_app with the sample cluster's services) on
127.0.0.1 behind the SSLContext from `server_ssl_context`, and talks to it over real TLS
connections. Rotation tests swap files the way the kubelet updates a Secret volume (a new
`..data` directory behind an atomically replaced symlink) and read the serial number of the
certificate that a *new* connection is served.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from extender import tls, wiring
from extender.__main__ import main
from extender.cluster import sample
from extender.cluster.state import ClusterState
from extender.server import make_app
from extender.settings import Settings, load_settings
from tests.conftest import JSON_HEADERS
from tests.tls import certs

FILTER_BODY = orjson.dumps(
    {
        "Pod": {
            "metadata": {"name": "gpu-training", "namespace": "ml-training", "uid": "261134f3"},
            "spec": {
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"claims": [{"name": "devices"}]}}
                ],
                "resourceClaims": [{"name": "devices", "resourceClaimName": "gpu-training-devices-vbdcr"}],
            },
        },
        "Nodes": None,
        "NodeNames": ["h100-node-01", "l40s-node-01", "cpu-node-01"],
    }
)
#: Any TLS-level refusal surfaces as one of these in aiohttp (handshake alert, reset, EOF).
REFUSED = (aiohttp.ClientError, ssl.SSLError, ConnectionError)


# ------------------------------------------------------------------------------------ fixtures


class SecretVolume:
    """A directory laid out like a kubelet Secret volume: `tls.crt -> ..data/tls.crt`, `..data -> ..vN`.

    `update()` writes a new `..vN` and swaps `..data` with one `rename`, as the kubelet's
    atomic writer does, so readers see either the old or the new set of files, never a mix.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.version = 0
        root.mkdir()

    def update(self, files: dict[str, bytes]) -> None:
        self.version += 1
        target = self.root / f"..v{self.version}"
        target.mkdir()
        for name, data in files.items():
            (target / name).write_bytes(data)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(target.name)
        os.replace(tmp, self.root / "..data")
        for name in files:
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(Path("..data") / name)

    def path(self, name: str) -> Path:
        return self.root / name


@dataclass
class Pki:
    ca: certs.Issued
    ca_file: Path
    server: certs.Issued
    client: certs.Issued
    client_files: tuple[Path, Path]
    stranger_files: tuple[Path, Path]  # a client certificate from a CA the server does not trust
    volume: SecretVolume

    def settings(self, *, mtls: bool) -> Settings:
        """Settings as `serve --tls-cert-file ... [--client-ca-file ...]` would build them."""
        flags: dict[str, Any] = {
            "tls_cert_file": str(self.volume.path("tls.crt")),
            "tls_key_file": str(self.volume.path("tls.key")),
        }
        if mtls:
            flags["client_ca_file"] = str(self.volume.path("ca.crt"))
        return load_settings(_Namespace(**flags), {})


class _Namespace:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = certs.ca("extender-ca")
    server = certs.server(ca)
    client = certs.client(ca)
    stranger = certs.client(certs.ca("someone-else"))
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.cert_pem())
    volume = SecretVolume(tmp_path / "secret")
    volume.update({"tls.crt": server.cert_pem(), "tls.key": server.key_pem(), "ca.crt": ca.cert_pem()})
    return Pki(
        ca=ca,
        ca_file=ca_file,
        server=server,
        client=client,
        client_files=client.write(tmp_path, "client"),
        stranger_files=stranger.write(tmp_path, "stranger"),
        volume=volume,
    )


@pytest.fixture(scope="module")
def services() -> Iterator[tuple[Any, Any]]:
    """The sample cluster's placement and binder (built once: the index build is the slow part)."""
    state = ClusterState.from_objects(sample.sample_objects())
    yield wiring.build_services(Settings(), state)


@asynccontextmanager
async def serving_app(
    settings: Settings, services: tuple[Any, Any]
) -> AsyncIterator[tuple[int, ssl.SSLContext]]:
    """Serve the real app over TLS on 127.0.0.1:<free port>; yields (port, the server's context)."""
    context = tls.server_ssl_context(settings)
    assert context is not None
    placement, binder = services
    app = make_app(settings, placement=placement, binder=binder, registry=CollectorRegistry())
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        yield runner.addresses[0][1], context
    finally:
        await runner.cleanup()


def client_context(pki: Pki, *, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """A client context that trusts the test CA and optionally presents `cert`."""
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


async def call_filter(port: int, context: ssl.SSLContext) -> dict[str, Any]:
    """POST /filter over a fresh HTTPS connection; returns the decoded ExtenderFilterResult."""
    connector = aiohttp.TCPConnector(ssl=context, force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(f"https://localhost:{port}/filter", data=FILTER_BODY, headers=JSON_HEADERS) as resp,
    ):
        assert resp.status == 200
        return await resp.json()


async def peer_serial(port: int, context: ssl.SSLContext) -> int:
    """Serial number of the certificate the server presents to a new connection."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    try:
        return int(writer.get_extra_info("peercert")["serialNumber"], 16)
    finally:
        writer.close()
        await writer.wait_closed()


def _rotate(
    pki: Pki, cert: certs.Issued, key: certs.Issued | None = None, *, ca: bytes | None = None
) -> None:
    pki.volume.update(
        {
            "tls.crt": cert.cert_pem(),
            "tls.key": (key or cert).key_pem(),
            "ca.crt": ca if ca is not None else pki.ca.cert_pem(),
        }
    )


# ------------------------------------------------------------------------------ context shape


def test_no_certificate_means_plain_http():
    """Without tls_cert_file there is no SSLContext: the server speaks HTTP."""
    assert tls.server_ssl_context(Settings()) is None


def test_context_requires_tls12_and_client_certs_only_with_a_ca(pki):
    """Minimum TLS 1.2 always; CERT_REQUIRED only when client_ca_file is given."""
    plain = tls.server_ssl_context(pki.settings(mtls=False))
    mutual = tls.server_ssl_context(pki.settings(mtls=True))
    assert plain is not None and mutual is not None
    assert plain.minimum_version == mutual.minimum_version == ssl.TLSVersion.TLSv1_2
    assert plain.verify_mode == ssl.CERT_NONE
    assert mutual.verify_mode == ssl.CERT_REQUIRED


def test_mismatched_key_at_startup_names_the_files(pki, tmp_path):
    """A key that does not belong to the certificate is a start-up error naming both files."""
    other = certs.server(pki.ca)
    _, other_key = other.write(tmp_path, "other")
    settings = load_settings(
        _Namespace(tls_cert_file=str(pki.volume.path("tls.crt")), tls_key_file=str(other_key)), {}
    )
    with pytest.raises(ValueError, match=r"TLS \(tls_cert_file=.*tls\.crt tls_key_file=.*other\.key\)"):
        tls.server_ssl_context(settings)


def test_missing_file_at_startup_is_a_value_error(pki, tmp_path):
    """An unreadable certificate file fails start-up with the path in the message."""
    settings = load_settings(
        _Namespace(tls_cert_file=str(tmp_path / "nope.crt"), tls_key_file=str(pki.volume.path("tls.key"))), {}
    )
    with pytest.raises(ValueError, match=r"nope\.crt"):
        tls.server_ssl_context(settings)


def test_garbage_client_ca_at_startup_is_a_value_error(pki, tmp_path):
    """A client CA bundle without certificates fails start-up."""
    bad_ca = tmp_path / "bad-ca.crt"
    bad_ca.write_text("not a certificate\n")
    settings = load_settings(
        _Namespace(
            tls_cert_file=str(pki.volume.path("tls.crt")),
            tls_key_file=str(pki.volume.path("tls.key")),
            client_ca_file=str(bad_ca),
        ),
        {},
    )
    with pytest.raises(ValueError, match="client_ca_file="):
        tls.server_ssl_context(settings)


# ------------------------------------------------------------------------------ serving HTTPS


async def test_https_filter_without_client_ca(pki, services):
    """Server-only TLS: a client without a certificate gets a normal filter answer."""
    async with serving_app(pki.settings(mtls=False), services) as (port, _):
        result = await call_filter(port, client_context(pki))
        assert await peer_serial(port, client_context(pki)) == pki.server.serial
    assert result["Error"] == ""
    assert result["NodeNames"] == ["h100-node-01"]


async def test_mtls_accepts_a_client_cert_from_the_ca(pki, services):
    """With client_ca_file, a client certificate signed by that CA is accepted."""
    async with serving_app(pki.settings(mtls=True), services) as (port, _):
        result = await call_filter(port, client_context(pki, cert=pki.client_files))
    assert result["NodeNames"] == ["h100-node-01"]


async def test_mtls_refuses_a_client_without_cert(pki, services):
    """With client_ca_file, a client that presents no certificate gets no answer."""
    async with serving_app(pki.settings(mtls=True), services) as (port, _):
        with pytest.raises(REFUSED):
            await call_filter(port, client_context(pki))
        # The listener survives the refused handshake.
        result = await call_filter(port, client_context(pki, cert=pki.client_files))
    assert result["Error"] == ""


async def test_mtls_refuses_a_client_cert_from_another_ca(pki, services):
    """With client_ca_file, a certificate from an untrusted CA is refused."""
    async with serving_app(pki.settings(mtls=True), services) as (port, _):
        with pytest.raises(REFUSED):
            await call_filter(port, client_context(pki, cert=pki.stranger_files))


async def test_mtls_refusal_is_a_handshake_failure_under_tls12(pki, services):
    """Under TLS 1.2 the missing client certificate fails the handshake itself (no request is sent).

    open_connection returns only after the handshake, so any error it raises is a handshake
    failure; the server aborts it with an alert or a reset, depending on timing.
    """
    context = client_context(pki)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    async with serving_app(pki.settings(mtls=True), services) as (port, _):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")


# ------------------------------------------------------------------------------------ rotation


async def test_rotation_serves_the_new_certificate_to_new_connections(pki, services):
    """After a Secret-style swap, check() reloads the same context and new connections see the new cert."""
    settings = pki.settings(mtls=True)
    renewed = certs.server(pki.ca)
    async with serving_app(settings, services) as (port, context):
        reloader = tls.CertReloader.from_settings(context, settings)
        client = client_context(pki, cert=pki.client_files)
        assert reloader.check() is False  # nothing changed yet
        assert await peer_serial(port, client) == pki.server.serial
        _rotate(pki, renewed)
        assert reloader.check() is True
        assert await peer_serial(port, client) == renewed.serial
        result = await call_filter(port, client)
    assert result["NodeNames"] == ["h100-node-01"]
    assert (reloader.reloads, reloader.failures) == (1, 0)


async def test_reloader_task_in_cleanup_ctx_follows_rotation(pki, services):
    """The cleanup_ctx task polls on its own and is cancelled with the app."""
    settings = pki.settings(mtls=False)
    renewed = certs.server(pki.ca)
    context = tls.server_ssl_context(settings)
    assert context is not None
    reloader = tls.CertReloader.from_settings(context, settings, interval_seconds=0.02)
    placement, binder = services
    app = make_app(settings, placement=placement, binder=binder, registry=CollectorRegistry())
    app.cleanup_ctx.append(tls.reloading(reloader))
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
        port = runner.addresses[0][1]
        _rotate(pki, renewed)
        for _ in range(250):  # up to 5 s; the poll interval is 20 ms
            if await peer_serial(port, client_context(pki)) == renewed.serial:
                break
            await asyncio.sleep(0.02)
        assert await peer_serial(port, client_context(pki)) == renewed.serial
    finally:
        await runner.cleanup()
    reloads = reloader.reloads
    await asyncio.sleep(0.1)
    assert reloads == reloader.reloads == 1  # the task stopped with the app


@pytest.mark.parametrize(
    "bad",
    ["mismatched-key", "garbage-cert", "empty-key", "garbage-ca"],
)
async def test_bad_replacement_keeps_serving_the_old_certificate(pki, services, bad, caplog):
    """A broken rotation is logged once and the previous certificate keeps serving; a fix then loads."""
    settings = pki.settings(mtls=True)
    renewed = certs.server(pki.ca)
    files = {"tls.crt": renewed.cert_pem(), "tls.key": renewed.key_pem(), "ca.crt": pki.ca.cert_pem()}
    if bad == "mismatched-key":
        files["tls.key"] = pki.server.key_pem()  # this would leave a live context unusable
    elif bad == "garbage-cert":
        files["tls.crt"] = b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
    elif bad == "empty-key":
        files["tls.key"] = b""
    else:
        files["ca.crt"] = b"garbage\n"
    async with serving_app(settings, services) as (port, context):
        reloader = tls.CertReloader.from_settings(context, settings)
        client = client_context(pki, cert=pki.client_files)
        pki.volume.update(files)
        with caplog.at_level(logging.ERROR, logger="extender.tls"):
            assert reloader.check() is False
            assert reloader.check() is False  # same bad files: not logged again
        # Only the reload's errors: INFO lines of the server's start-up are captured too when an
        # earlier test left the root logger at INFO.
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1
        assert "keeping the previous certificate" in errors[0]
        assert await peer_serial(port, client) == pki.server.serial
        assert (await call_filter(port, client))["Error"] == ""
        _rotate(pki, renewed)  # the operator fixes the Secret
        assert reloader.check() is True
        assert await peer_serial(port, client) == renewed.serial
    assert (reloader.reloads, reloader.failures) == (1, 1)


async def test_missing_files_during_rotation_keep_the_old_certificate(pki, services):
    """A file that vanishes for a moment (non-atomic copy) does not disturb serving."""
    settings = pki.settings(mtls=False)
    async with serving_app(settings, services) as (port, context):
        reloader = tls.CertReloader.from_settings(context, settings)
        (pki.volume.path("..data") / "tls.key").unlink()
        assert reloader.check() is False
        assert reloader.check() is False  # still missing: counted (and logged) once
        assert reloader.failures == 1
        assert await peer_serial(port, client_context(pki)) == pki.server.serial


async def test_client_ca_rotation_adds_the_new_ca(pki, services, tmp_path, caplog):
    """A CA added to client_ca_file is trusted after reload; a removed CA is reported as still trusted."""
    settings = pki.settings(mtls=True)
    new_ca = certs.ca("extender-ca-2")
    new_client_files = certs.client(new_ca).write(tmp_path, "new-client")
    async with serving_app(settings, services) as (port, context):
        reloader = tls.CertReloader.from_settings(context, settings)
        with pytest.raises(REFUSED):
            await call_filter(port, client_context(pki, cert=new_client_files))
        _rotate(pki, pki.server, ca=pki.ca.cert_pem() + new_ca.cert_pem())
        assert reloader.check() is True
        assert (await call_filter(port, client_context(pki, cert=new_client_files)))["Error"] == ""
        with caplog.at_level(logging.WARNING, logger="extender.tls"):
            _rotate(pki, pki.server, ca=new_ca.cert_pem())
            assert reloader.check() is True
        assert any("stay trusted until the process restarts" in r.getMessage() for r in caplog.records)


def test_serve_exits_2_on_an_unusable_certificate(pki, tmp_path, capsys):
    """`serve` with a key that does not match the certificate stops before start-up work, code 2."""
    other_key = certs.server(pki.ca).write(tmp_path, "other")[1]
    argv = ["serve", "--tls-cert-file", str(pki.volume.path("tls.crt")), "--tls-key-file", str(other_key)]
    assert main([*argv, "--log-level", "error"]) == 2
    assert "TLS (tls_cert_file=" in capsys.readouterr().err


# ------------------------------------------------------------------ the Deployment's exec probes

DEPLOYMENT = Path(__file__).resolve().parents[2] / "deploy" / "deployment.yaml"
PROBE_CERT_DIR = "/etc/dra-extender/tls"


def _probe_command(kind: str, *, port: int, cert_dir: Path) -> list[str]:
    """The exec probe `kind` of deploy/deployment.yaml, pointed at a test server and test files."""
    import yaml

    deployment = yaml.safe_load(DEPLOYMENT.read_text(encoding="utf-8"))
    command = deployment["spec"]["template"]["spec"]["containers"][0][kind]["exec"]["command"]
    assert command[0] == "python"
    script = command[2].replace(PROBE_CERT_DIR, str(cert_dir)).replace("127.0.0.1:8443", f"127.0.0.1:{port}")
    return [sys.executable, command[1], script, *command[3:]]


async def _run(command: list[str]) -> int:
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    return await asyncio.wait_for(proc.wait(), timeout=60)


@pytest.mark.parametrize("client_auth", [True, False], ids=["dual-use-cert", "server-only-cert"])
async def test_deployment_probes_pass_mutual_tls(pki, services, tmp_path, client_auth):
    """The exec probes present the serving certificate as a client certificate under --client-ca-file.

    That works only if the serving certificate also has the clientAuth usage, which is what
    deploy/deployment.yaml and the README ask for; without it the probes fail.
    """
    cert_dir = tmp_path / "mounted"
    cert_dir.mkdir()
    serving = certs.server(pki.ca, client_auth=client_auth)
    serving.write(cert_dir, "tls")
    (cert_dir / "ca.crt").write_bytes(pki.ca.cert_pem())
    settings = load_settings(
        _Namespace(
            tls_cert_file=str(cert_dir / "tls.crt"),
            tls_key_file=str(cert_dir / "tls.key"),
            client_ca_file=str(cert_dir / "ca.crt"),
        ),
        {},
    )
    async with serving_app(settings, services) as (port, _):
        codes = [
            await _run(_probe_command(kind, port=port, cert_dir=cert_dir))
            for kind in ("startupProbe", "livenessProbe", "readinessProbe")
        ]
    assert codes == ([0, 0, 0] if client_auth else [1, 1, 1])
