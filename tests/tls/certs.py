"""Test PKI builders: a CA, server and client certificates written as PEM files (cryptography)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_NOW = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)
_VALID_FOR = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, in memory and (after `write`) as PEM files."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def serial(self) -> int:
        return self.cert.serial_number

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Write `<name>.crt` and `<name>.key` into `directory`; returns both paths."""
        cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
        cert_path.write_bytes(self.cert_pem())
        key_path.write_bytes(self.key_pem())
        return cert_path, key_path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def ca(common_name: str = "test-ca") -> Issued:
    """A self-signed CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOW)
        .not_valid_after(_NOW + _VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return Issued(cert, key)


def _leaf(
    issuer: Issued,
    common_name: str,
    *,
    server: bool,
    client_auth: bool = False,
    not_before: datetime.datetime = _NOW,
    not_after: datetime.datetime = _NOW + _VALID_FOR,
) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH] * server
                + [ExtendedKeyUsageOID.CLIENT_AUTH] * (client_auth or not server)
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return Issued(builder.sign(issuer.key, hashes.SHA256()), key)


def server(
    issuer: Issued,
    common_name: str = "dra-topology-extender",
    *,
    client_auth: bool = False,
    not_before: datetime.datetime = _NOW,
    not_after: datetime.datetime = _NOW + _VALID_FOR,
) -> Issued:
    """A server certificate for `localhost` and `127.0.0.1`, signed by `issuer`.

    `client_auth` adds the clientAuth usage, so the certificate can also log in as a client
    (what the exec probes in deploy/deployment.yaml do); `not_before`/`not_after` set its
    validity (default: 2025-01-01 for ten years).
    """
    return _leaf(
        issuer, common_name, server=True, client_auth=client_auth, not_before=not_before, not_after=not_after
    )


def client(issuer: Issued, common_name: str = "system:kube-scheduler") -> Issued:
    """A client certificate (clientAuth), signed by `issuer`."""
    return _leaf(issuer, common_name, server=False)
