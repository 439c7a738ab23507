"""What the extender refuses from a browser: cross-origin writes (403) and verbs that are not JSON (415).

The extender's callers are kube-scheduler, Prometheus, the kubelet's probes and the dashboard's own
page. A browser tab the operator has open on any other site can also reach it (127.0.0.1, or the
cluster network through a port-forward), and some requests need no CORS preflight: a cross-site
`POST` with `Content-Type: text/plain` (or none, with a Blob body) is sent, and acted upon,
even though the page cannot read the answer. Without these checks such a page could bind pods
(in kube mode with the extender's service account) or keep the worker busy with explains.

Two independent rules, so either one alone stops that request:

- `cross_origin_refusal`: a request whose method changes or computes something (anything but
  GET, HEAD, OPTIONS) is refused when the browser says it comes from another origin. This is
  the algorithm of Go's `net/http.CrossOriginProtection` (Go 1.25): `Sec-Fetch-Site` decides
  when present (`same-origin` and `none`, a user's own navigation, pass; `same-site` and
  `cross-site` do not: another port on localhost is the same site but another origin); without
  it, an `Origin` header must name the request's own `Host`; with neither the client is not a
  browser (kube-scheduler, curl) or an old browser's same-origin request, and passes. GET and
  HEAD stay open, so links to `/ui` from elsewhere work and probes and scrapes are untouched:
  they change nothing and a cross-origin page cannot read their answers.
- `json_refusal`: the verbs take only `application/json` (kube-scheduler always sends it). A
  browser sends that type cross-origin only after a CORS preflight, which this server never
  grants.

Pure functions over the method and headers: the aiohttp middleware is in `extender.server`.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

#: Methods that only read: never refused for their origin (as Go's CrossOriginProtection).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: `Sec-Fetch-Site` values of requests a page of this server (or the user) made.
SAME_ORIGIN_FETCHES = frozenset({"same-origin", "none"})
JSON = "application/json"


def cross_origin_refusal(method: str, headers: Mapping[str, str]) -> str:
    """Why a browser request from another origin is refused ('' if it is not refused).

    Args:
        method: the request method.
        headers: the request headers (case-insensitive lookups, e.g. aiohttp's `CIMultiDict`):
            `Sec-Fetch-Site`, `Origin` and `Host` are read.
    """
    if method.upper() in SAFE_METHODS:
        return ""
    site = headers.get("Sec-Fetch-Site", "").strip().lower()
    if site:
        if site in SAME_ORIGIN_FETCHES:
            return ""
        return (
            f"cross-origin request refused: the browser says it comes from another origin "
            f"(Sec-Fetch-Site: {_printable(site)}); only the extender's own pages and non-browser "
            "clients may send it"
        )
    origin = headers.get("Origin", "")
    if not origin:
        return ""
    host = headers.get("Host", "")
    if _origin_host(origin) == host.strip().lower() and host:
        return ""
    return (
        f"cross-origin request refused: Origin {_printable(origin)} is not this server "
        f"(Host {_printable(host) or 'missing'}); only the extender's own pages and non-browser "
        "clients may send it"
    )


def json_refusal(content_type: str | None) -> str:
    """Why a verb's body is refused for its Content-Type ('' if it is JSON).

    Args:
        content_type: the raw `Content-Type` header, None if absent; parameters such as
            `charset=utf-8` are allowed.
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == JSON:
        return ""
    got = f"got {_printable(content_type)}" if content_type else "got no Content-Type"
    return f"the request body must be sent as Content-Type: {JSON} (as kube-scheduler does); {got}"


def _origin_host(origin: str) -> str:
    """`host[:port]` of an Origin header, lower case ('' for `null` or anything unparsable)."""
    try:
        return urlsplit(origin.strip()).netloc.lower()
    except ValueError:
        return ""


def _printable(text: str, limit: int = 100) -> str:
    """A header value for a message: its repr (no control characters), cut to `limit` characters."""
    return repr(text[:limit] + ("..." if len(text) > limit else ""))
