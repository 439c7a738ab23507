"""A serving certificate outside its validity period is loaded with a warning, at start-up and on
reload (issue 12 finding 12: an expired certificate was accepted at start-up without a word)."""

from __future__ import annotations

import datetime
import logging

import pytest

from extender import tls
from tests.tls import certs
from tests.tls.test_tls import Pki
from tests.tls.test_tls import pki as pki  # the fixture

UTC = datetime.UTC
NOW = datetime.datetime.now(UTC)


@pytest.mark.parametrize(
    ("not_before", "not_after"),
    [
        (datetime.datetime(1999, 1, 2, 3, 4, 5, tzinfo=UTC), datetime.datetime(2049, 12, 31, tzinfo=UTC)),
        (datetime.datetime(2020, 6, 1, tzinfo=UTC), datetime.datetime(2060, 6, 1, 12, 30, tzinfo=UTC)),
    ],
)
def test_validity_is_read_from_utc_and_generalized_times(not_before, not_after):
    """X.509 writes dates up to 2049 as UTCTime and later ones as GeneralizedTime: both are read."""
    issued = certs.server(certs.ca(), not_before=not_before, not_after=not_after)
    der = tls._Material(issued.cert_pem(), b"", None).leaf_der()
    assert der is not None
    assert tls.certificate_validity(der) == (not_before, not_after)


def test_garbage_is_a_value_error():
    with pytest.raises(ValueError):
        tls.certificate_validity(b"\x30\x82\xff\xff\x00")


def _install(pki: Pki, issued: certs.Issued) -> None:
    pki.volume.update(
        {"tls.crt": issued.cert_pem(), "tls.key": issued.key_pem(), "ca.crt": pki.ca.cert_pem()}
    )


@pytest.fixture(autouse=True)
def _capture_tls_warnings(caplog: pytest.LogCaptureFixture) -> None:
    # Other tests run `serve --log-level error`, which leaves the root logger at ERROR.
    caplog.set_level(logging.WARNING, logger="extender.tls")


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "extender.tls"
    ]


def test_expired_certificate_at_start_up_is_loaded_with_a_warning(pki, caplog):
    expired = certs.server(
        pki.ca, not_before=NOW - datetime.timedelta(days=30), not_after=NOW - datetime.timedelta(days=1)
    )
    _install(pki, expired)
    context = tls.server_ssl_context(pki.settings(mtls=False))
    assert context is not None
    (warning,) = _warnings(caplog)
    assert "expired at" in warning and str(pki.volume.path("tls.crt")) in warning


def test_not_yet_valid_certificate_warns_and_a_valid_one_does_not(pki, caplog):
    assert tls.server_ssl_context(pki.settings(mtls=False)) is not None
    assert _warnings(caplog) == []
    early = certs.server(
        pki.ca, not_before=NOW + datetime.timedelta(days=2), not_after=NOW + datetime.timedelta(days=90)
    )
    _install(pki, early)
    tls.server_ssl_context(pki.settings(mtls=False))
    (warning,) = _warnings(caplog)
    assert "is not valid until" in warning


def test_reload_of_an_expired_certificate_warns(pki, caplog):
    settings = pki.settings(mtls=False)
    context = tls.server_ssl_context(settings)
    assert context is not None
    reloader = tls.CertReloader.from_settings(context, settings)
    expired = certs.server(
        pki.ca, not_before=NOW - datetime.timedelta(days=30), not_after=NOW - datetime.timedelta(hours=1)
    )
    _install(pki, expired)
    assert reloader.check() is True  # still loaded: refusing would help nobody
    (warning,) = _warnings(caplog)
    assert "expired at" in warning
