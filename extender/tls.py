"""HTTPS for the extender: the server's SSLContext and a reloader that follows certificate rotation.

kube-scheduler talks to the extender over HTTPS when its extender config sets `enableHTTPS`
(the scheme itself comes from `urlPrefix`) and, with `tlsConfig.certFile/keyFile`, presents a
client certificate; `client_ca_file` makes that mutual TLS mandatory (`CERT_REQUIRED`).

Certificates rotate while the process runs (cert-manager renewals, Secret updates). Kubernetes
updates a Secret volume by swapping a `..data` symlink, so the file names stay the same while
their contents change. `CertReloader` polls the contents and loads a changed certificate into
the *same* `SSLContext` the server listens with: aiohttp/asyncio keep a reference to that object
and create every new connection's `SSLObject` from it, so new handshakes use the new certificate
while open connections keep theirs. Nothing here restarts the listener.

Why each reload goes through an in-memory snapshot: `load_cert_chain` loads the certificate
first and the key second. If the two files do not match (a half-finished rotation, or files
swapped between the two reads) OpenSSL may already have replaced the context's certificate
before it fails, leaving a context that can no longer complete a handshake. So a reload reads
the three files once, proves the snapshot on a scratch context and only then loads the very
same bytes into the live context. A bad snapshot is logged and the live context is untouched.

A certificate outside its validity period (expired, or not valid yet) is loaded anyway, since
refusing to start helps nobody, but a warning names the file and the dates, at start-up and on
every reload: kube-scheduler would reject every handshake with it.

Out of scope: reloading `client_ca_file` can only *add* CAs. OpenSSL's certificate store has no
removal, so a CA dropped from the bundle stays trusted until the process restarts (logged).
This module imports no aiohttp; `reloading` is an aiohttp `cleanup_ctx` by shape only.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import logging
import os
import re
import ssl
import tempfile
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from extender.settings import Settings

logger = logging.getLogger(__name__)

#: How often the reloader re-reads the files. Secret volume updates already lag by up to the
#: kubelet sync period (about a minute), so a few seconds more costs nothing and reading three
#: small files this often costs nothing either.
RELOAD_INTERVAL_SECONDS = 5.0

_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


@dataclass(frozen=True, slots=True)
class _Material:
    """One consistent read of the certificate chain, the key and (optionally) the client CA bundle."""

    cert: bytes
    key: bytes
    client_ca: bytes | None

    @property
    def digest(self) -> str:
        """A content hash of all three files: the reloader's "has anything changed" test."""
        h = hashlib.sha256()
        for part in (self.cert, self.key, self.client_ca or b""):
            h.update(len(part).to_bytes(8, "big"))
            h.update(part)
        return h.hexdigest()

    def leaf_fingerprint(self) -> str:
        """SHA-256 of the first certificate of the chain (for logs), or '?' if there is none."""
        match = _PEM_CERT.search(self.cert)
        if match is None:
            return "?"
        try:
            der = ssl.PEM_cert_to_DER_cert(match.group(0).decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            return "?"
        return hashlib.sha256(der).hexdigest()[:16]

    def leaf_der(self) -> bytes | None:
        """DER of the first certificate of the chain (the serving certificate), or None."""
        match = _PEM_CERT.search(self.cert)
        if match is None:
            return None
        try:
            return ssl.PEM_cert_to_DER_cert(match.group(0).decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            return None

    def ca_certs(self) -> set[bytes]:
        """The PEM blocks of the client CA bundle, whitespace-normalised, to spot removed CAs."""
        return {re.sub(rb"\s+", b"", m) for m in _PEM_CERT.findall(self.client_ca or b"")}


#: What each context built by `server_ssl_context` was loaded with, so a reloader created later
#: compares against those exact bytes (re-reading the files instead could miss a rotation that
#: happened in between). Weak, so a dropped context is not kept alive.
_LOADED: weakref.WeakKeyDictionary[ssl.SSLContext, _Material] = weakref.WeakKeyDictionary()


def _read(cert_file: Path, key_file: Path, client_ca_file: Path | None) -> _Material:
    return _Material(
        cert=cert_file.read_bytes(),
        key=key_file.read_bytes(),
        client_ca=client_ca_file.read_bytes() if client_ca_file is not None else None,
    )


@contextlib.contextmanager
def _private_files(*contents: bytes) -> Iterator[list[str]]:
    """Paths whose contents are exactly `contents`, readable only by us, gone afterwards.

    `load_cert_chain` accepts only paths. On Linux the bytes live in anonymous memory files
    (`memfd_create`, opened again through /proc/self/fd), so the private key is never written to
    a disk, which also works under `readOnlyRootFilesystem`. Elsewhere a 0700 temp dir is used.
    """
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds: list[int] = []
        try:
            for data in contents:
                fd = os.memfd_create("dra-extender-tls", os.MFD_CLOEXEC)
                fds.append(fd)
                os.write(fd, data)
            yield [f"/proc/self/fd/{fd}" for fd in fds]
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="dra-extender-tls-") as tmp:
        paths = []
        for i, data in enumerate(contents):
            path = Path(tmp) / f"{i}.pem"
            path.write_bytes(data)
            paths.append(str(path))
        yield paths


def _apply(context: ssl.SSLContext, material: _Material) -> None:
    """Load `material` into `context`; raises ssl.SSLError/ValueError if it is unusable."""
    with _private_files(material.cert, material.key) as (cert_path, key_path):
        context.load_cert_chain(cert_path, key_path)
    if material.client_ca is not None:
        # cadata takes PEM text directly; an empty or non-PEM bundle raises SSLError/ValueError.
        context.load_verify_locations(cadata=material.client_ca.decode("ascii", errors="replace"))


def _new_context(*, verify_clients: bool) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if verify_clients:
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _validate(material: _Material) -> None:
    """Prove `material` on a throw-away context, so a bad rotation never touches the live one."""
    _apply(_new_context(verify_clients=material.client_ca is not None), material)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.strerror}: {exc.filename}"
    return f"{type(exc).__name__}: {exc}"


def server_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The SSLContext to serve HTTPS with, or None when no certificate is configured (plain HTTP).

    TLS 1.2 is the minimum (kube-scheduler's Go client speaks 1.2 and 1.3). With
    `client_ca_file` every client must present a certificate signed by that bundle.

    Args:
        settings: `tls_cert_file`, `tls_key_file` and `client_ca_file` are read (settings
            validation already guarantees cert and key come together).

    Returns:
        The context, or None for plain HTTP.

    Raises:
        ValueError: a file is unreadable or the certificate, key or CA is invalid or mismatched;
            the message names the files.
    """
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    files = _file_names(settings.tls_cert_file, settings.tls_key_file, settings.client_ca_file)
    try:
        material = _read(settings.tls_cert_file, settings.tls_key_file, settings.client_ca_file)
        context = _new_context(verify_clients=material.client_ca is not None)
        _apply(context, material)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ValueError(f"TLS ({files}): cannot load: {_describe(exc)}") from exc
    _LOADED[context] = material
    logger.info("TLS: loaded %s (leaf sha256 %s)", files, material.leaf_fingerprint())
    warn_if_not_valid_now(material, files)
    return context


def _der_element(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER element at `pos`."""
    tag, length = der[pos], der[pos + 1]
    pos += 2
    if length & 0x80:
        size = length & 0x7F
        length = int.from_bytes(der[pos : pos + size], "big")
        pos += size
    if pos + length > len(der):
        raise ValueError("truncated DER element")
    return tag, pos, pos + length


def _der_time(tag: int, raw: bytes) -> datetime.datetime:
    text = raw.decode("ascii")
    if tag == 0x17:  # UTCTime YYMMDDHHMMSSZ; RFC 5280: YY >= 50 is 19YY
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    elif tag != 0x18:  # GeneralizedTime YYYYMMDDHHMMSSZ
        raise ValueError(f"unexpected time tag {tag:#x}")
    return datetime.datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=datetime.UTC)


def certificate_validity(der: bytes) -> tuple[datetime.datetime, datetime.datetime]:
    """(notBefore, notAfter) of a DER X.509 certificate (RFC 5280 §4.1), without a crypto library.

    Raises:
        ValueError: the bytes are not a certificate this reader understands.
    """
    try:
        _, start, _ = _der_element(der, 0)  # Certificate
        _, pos, _ = _der_element(der, start)  # tbsCertificate
        tag, _, end = _der_element(der, pos)
        if tag == 0xA0:  # [0] EXPLICIT version
            pos = end
        for _ in range(3):  # serialNumber, signature, issuer
            pos = _der_element(der, pos)[2]
        tag, start, _ = _der_element(der, pos)  # validity
        if tag != 0x30:
            raise ValueError("no validity sequence")
        before_tag, before_start, before_end = _der_element(der, start)
        after_tag, after_start, after_end = _der_element(der, before_end)
        return (
            _der_time(before_tag, der[before_start:before_end]),
            _der_time(after_tag, der[after_start:after_end]),
        )
    except (IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed certificate: {exc}") from None


def warn_if_not_valid_now(material: _Material, files: str, now: datetime.datetime | None = None) -> bool:
    """Log a warning if the serving certificate is expired or not yet valid; True if it warned."""
    der = material.leaf_der()
    if der is None:
        return False
    try:
        not_before, not_after = certificate_validity(der)
    except ValueError as exc:
        logger.debug("TLS: cannot read the validity of %s: %s", files, exc)
        return False
    now = now or datetime.datetime.now(datetime.UTC)
    if now > not_after:
        logger.warning(
            "TLS: the serving certificate (%s) expired at %s; clients will reject it until it is renewed",
            files,
            not_after.isoformat(),
        )
        return True
    if now < not_before:
        logger.warning(
            "TLS: the serving certificate (%s) is not valid until %s; clients will reject it until then",
            files,
            not_before.isoformat(),
        )
        return True
    return False


def _file_names(cert_file: Path, key_file: Path, client_ca_file: Path | None) -> str:
    names = f"tls_cert_file={cert_file} tls_key_file={key_file}"
    return names + (f" client_ca_file={client_ca_file}" if client_ca_file is not None else "")


class CertReloader:
    """Polls the certificate, key and client CA files and reloads the live SSLContext on change.

    Lifecycle: `check()` is one poll and can be called directly (tests do); `run()` polls
    forever until cancelled. Both run on the event loop thread on purpose: OpenSSL contexts must
    not be modified while another thread creates connections from them, and the loop is the only
    thread that does. A poll reads three small files; a reload costs a few milliseconds.

    The counters are written only by `check()` and are read by tests and logs.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        *,
        cert_file: Path,
        key_file: Path,
        client_ca_file: Path | None = None,
        interval_seconds: float = RELOAD_INTERVAL_SECONDS,
    ) -> None:
        """Watch the given files for `context`, which must already hold their current contents."""
        self._context = context
        self._cert_file = cert_file
        self._key_file = key_file
        self._client_ca_file = client_ca_file
        self.interval_seconds = interval_seconds
        self._loaded: _Material | None = _LOADED.get(context)
        self._rejected_digest: str | None = None  # the last bad state, so it is logged only once
        self.reloads = 0
        """Successful reloads since start (the initial load is not counted)."""
        self.failures = 0
        """Distinct bad states seen: invalid contents or unreadable files (each logged once)."""
        if self._loaded is None:  # a context built elsewhere: assume it holds the current files
            try:
                self._loaded = self._read()
            except OSError as exc:
                logger.warning("TLS: cannot read the files for change tracking: %s", _describe(exc))

    @classmethod
    def from_settings(
        cls, context: ssl.SSLContext, settings: Settings, *, interval_seconds: float = RELOAD_INTERVAL_SECONDS
    ) -> CertReloader:
        """A reloader for the files named in `settings` (which must configure TLS)."""
        if settings.tls_cert_file is None or settings.tls_key_file is None:
            raise ValueError("TLS reloader needs tls_cert_file and tls_key_file")
        return cls(
            context,
            cert_file=settings.tls_cert_file,
            key_file=settings.tls_key_file,
            client_ca_file=settings.client_ca_file,
            interval_seconds=interval_seconds,
        )

    def _read(self) -> _Material:
        return _read(self._cert_file, self._key_file, self._client_ca_file)

    def _files(self) -> str:
        return _file_names(self._cert_file, self._key_file, self._client_ca_file)

    def check(self) -> bool:
        """Poll once: reload if the files changed and are valid. Returns True if it reloaded."""
        try:
            material = self._read()
        except OSError as exc:
            # A Secret update or a non-atomic copy can leave a file missing for a moment.
            reason = f"cannot read: {_describe(exc)}"
            self._reject(reason, reason)
            return False
        digest = material.digest
        if self._loaded is not None and digest == self._loaded.digest:
            self._rejected_digest = None
            return False
        if digest == self._rejected_digest:
            return False  # the same bad files as last poll: already logged
        try:
            _validate(material)
        except (ssl.SSLError, ValueError) as exc:
            self._reject(digest, f"invalid: {_describe(exc)}")
            return False
        try:
            _apply(self._context, material)
        except (ssl.SSLError, ValueError):  # cannot happen: the same bytes just loaded on a scratch
            logger.exception("TLS: reloading the validated files failed; restoring the previous ones")
            if self._loaded is not None:
                _apply(self._context, self._loaded)
            return False
        self._warn_removed_cas(material)
        self._loaded = material
        self._rejected_digest = None
        self.reloads += 1
        logger.info(
            "TLS: reloaded %s (leaf sha256 %s); new connections use it",
            self._files(),
            material.leaf_fingerprint(),
        )
        warn_if_not_valid_now(material, self._files())
        return True

    def _reject(self, key: str, reason: str) -> None:
        """Log a failed reload once per distinct bad state (`key`: content hash or read error)."""
        if key == self._rejected_digest:
            return
        self._rejected_digest = key
        self.failures += 1
        logger.error("TLS: not reloading %s: %s; keeping the previous certificate", self._files(), reason)

    def _warn_removed_cas(self, material: _Material) -> None:
        if self._loaded is None or material.client_ca is None:
            return
        removed = self._loaded.ca_certs() - material.ca_certs()
        if removed:
            logger.warning(
                "TLS: %d CA certificate(s) were removed from %s but stay trusted until the process "
                "restarts (OpenSSL cannot drop trusted CAs from a live context)",
                len(removed),
                self._client_ca_file,
            )

    async def run(self) -> None:
        """Poll every `interval_seconds` until cancelled; a failing poll never ends the loop."""
        while True:
            await asyncio.sleep(self.interval_seconds)
            try:
                self.check()
            except Exception:  # keep following rotations even after a surprise
                logger.exception("TLS: certificate reload check failed")


def reloading(reloader: CertReloader) -> Callable[[object], AsyncIterator[None]]:
    """An aiohttp `cleanup_ctx` entry that runs `reloader` for the application's lifetime.

    Usage: `app.cleanup_ctx.append(tls.reloading(reloader))`. The task starts with the app and
    is cancelled and awaited at cleanup.
    """

    async def ctx(app: object) -> AsyncIterator[None]:  # any app: tls imports no aiohttp
        task = asyncio.create_task(reloader.run(), name="tls-cert-reloader")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return ctx
