"""Callback URL safety: which URLs relay will register and which addresses it will connect to.

Contract (the spec's "Callback URL safety"):

* A callback URL is ``https`` (``http`` only with ``RELAY_ALLOW_HTTP_TARGETS``), has a host,
  no userinfo, no fragment, no whitespace or control characters, a port in 1-65535 and at most
  :data:`MAX_URL_LENGTH` characters (:func:`validate_url`, no DNS).
* Its host must resolve only to public addresses (:func:`check_address`,
  :func:`resolve_and_check`); if any address is refused, all are. Addresses hidden inside
  IPv4-mapped, 6to4, Teredo and NAT64 forms are unwrapped and judged by the IPv4 address they
  carry. ``RELAY_ALLOW_PRIVATE_TARGETS`` switches the address check off for local work.
* Registration calls :func:`vet_url`; every delivery attempt goes through :func:`make_client`,
  whose network backend resolves, vets and connects to the vetted IP itself, so there is no
  window between the check and the connect for DNS rebinding. TLS still uses the hostname (SNI
  and certificate check), because httpcore does the handshake with the URL's host.

Every refusal is an :class:`~relay.exceptions.UnsafeTarget` whose ``kind`` is one of
``syntax``, ``too_long``, ``scheme``, ``userinfo``, ``fragment``, ``host``, ``port``, ``form``,
``dns``, ``private_address`` and whose ``message`` says why. What registration answers (422)
is its ``answer``: the message for what the URL's own text gets wrong, and one sentence for
every refusal that depends on DNS or on addresses (``dns``, ``private_address``: an unknown
name, a DNS timeout, a name or an IP literal with a non-public address), so the answers map
neither which internal names exist nor what they resolve to; :func:`vet_url` logs the
message.

This module checks URLs and is the guard's public surface; the address rules and DNS
resolution are in :mod:`relay.delivery.addresses`, the pinned client and
:func:`classify_error` in :mod:`relay.delivery.transport`.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import unicodedata
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from relay.delivery.addresses import IPAddress, TargetPolicy, check_address, resolve_and_check
from relay.delivery.transport import (
    ErrorKind,
    GuardedTransport,
    PinnedBackend,
    classify_error,
    make_client,
)
from relay.exceptions import UnsafeTarget

log = logging.getLogger("relay.delivery")

__all__ = [
    "CALLBACK_URL_PATTERN",
    "FORM_MESSAGE",
    "MAX_URL_LENGTH",
    "ErrorKind",
    "GuardedTransport",
    "IPAddress",
    "PinnedBackend",
    "TargetPolicy",
    "TargetUrl",
    "check_address",
    "classify_error",
    "in_documented_form",
    "make_client",
    "resolve_and_check",
    "validate_url",
    "vet_url",
]

MAX_URL_LENGTH = 2048

# The documented form of a callback URL in production (the OpenAPI document's pattern): https,
# a DNS host name (labels of letters, digits and hyphens, the last starting with a letter, at
# most 253 characters; no IP literal, no userinfo), an optional port 1-65535, then a path
# and/or query of RFC 3986 characters (anything else percent-encoded; at most 1,760 of them,
# so the whole URL stays within MAX_URL_LENGTH), no fragment. Every URL of this form passes
# validate_url; with the DNS check it is exactly what registration accepts when no
# RELAY_ALLOW_* flag is set. ECMA-262 and Python read it the same way.
_LABEL_RE = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_TOP_LABEL_RE = r"[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT_RE = (
    r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
)
_PATH_QUERY_RE = r"(?:[/?](?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2}){0,1760})"
CALLBACK_URL_PATTERN = (
    r"^[Hh][Tt][Tt][Pp][Ss]://(?=[^:/?]{1,253}(?:[:/?]|$))"
    rf"(?:{_LABEL_RE}\.)*{_TOP_LABEL_RE}(?::{_PORT_RE})?{_PATH_QUERY_RE}?$"
)
_CALLBACK_URL = re.compile(CALLBACK_URL_PATTERN)


def in_documented_form(url: str) -> bool:
    """Whether ``url`` has the documented form (``CALLBACK_URL_PATTERN``), matched in full."""
    return len(url) <= MAX_URL_LENGTH and _CALLBACK_URL.fullmatch(url) is not None


@dataclass(frozen=True)
class TargetUrl:
    """A callback URL that passed :func:`validate_url`.

    ``host`` is what the HTTP client will connect to and put in SNI: ASCII (IDNA-encoded),
    lower-case, IPv6 without brackets. ``port`` is explicit or the scheme's default. ``ip`` is
    set when the host is an IP literal (already checked).
    """

    url: str
    scheme: str
    host: str
    port: int
    ip: IPAddress | None


# --------------------------------------------------------------------------- URLs

_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
# WHATWG "ends in a number": a last label that is all digits or 0x-hex makes the host an IPv4
# literal to browsers and to inet_aton/getaddrinfo (2130706433, 0x7f.1, 127.1 are 127.0.0.1).
_NUMERIC_LABEL = re.compile(r"^(?:[0-9]+|0x[0-9a-f]*)$")


def _bad_char(url: str) -> str | None:
    for ch in url:
        if ch.isspace() or unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp", "Zs"}:
            return ch
    return None


def _check_hostname(host: str, policy: TargetPolicy) -> ipaddress.IPv4Address | None:
    """Check an ASCII hostname; returns the address when it is a dotted-quad IPv4 literal."""
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if _NUMERIC_LABEL.match(labels[-1]):
        try:
            ip = ipaddress.IPv4Address(name)
        except ValueError:
            try:
                meant = f" (resolvers read it as {socket.inet_ntoa(socket.inet_aton(name))})"
            except OSError:
                meant = ""
            raise UnsafeTarget(
                "host",
                f"host {host!r} is a numeric address that is not a plain dotted-quad IPv4 "
                f"address{meant}; write the address as a.b.c.d or use a hostname",
            ) from None
        check_address(ip, policy)
        return ip
    if len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise UnsafeTarget(
            "host",
            f"host {host!r} is not a valid hostname (letters, digits and hyphens in dot-separated "
            "labels of at most 63 characters)",
        )
    return None


def validate_url(url: str, policy: TargetPolicy) -> TargetUrl:
    """Check a callback URL's syntax (no DNS) and any IP-literal host; return its parts.

    The host is taken as httpx will see it (IDNA-encoded) and must agree with
    :func:`urllib.parse.urlsplit`'s reading, so the checked host is the one that gets called.
    Raises :class:`UnsafeTarget` (see the module docstring for kinds).
    """
    if not isinstance(url, str):
        raise UnsafeTarget("syntax", "the callback URL must be a string")
    if len(url) > MAX_URL_LENGTH:
        raise UnsafeTarget(
            "too_long", f"the callback URL is {len(url)} characters; at most {MAX_URL_LENGTH}"
        )
    if not url:
        raise UnsafeTarget("syntax", "the callback URL is empty")
    bad = _bad_char(url)
    if bad is not None:
        raise UnsafeTarget(
            "syntax",
            f"the callback URL contains whitespace or a control character (U+{ord(bad):04X}); "
            "percent-encode it",
        )
    if "\\" in url:
        # Browsers read "\" as "/" in http(s) URLs, urllib does not: refuse the ambiguity.
        raise UnsafeTarget("syntax", "the callback URL contains a backslash; percent-encode it")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise UnsafeTarget("syntax", f"the callback URL does not parse: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme != "https" and not (scheme == "http" and policy.allow_http):
        allowed = "https:// or http://" if policy.allow_http else "https://"
        given = f"{scheme}://" if scheme else "no scheme"
        hint = " (RELAY_ALLOW_HTTP_TARGETS=true allows http:// for local work)" * (scheme == "http")
        raise UnsafeTarget("scheme", f"the callback URL must use {allowed}, not {given}{hint}")
    if "#" in url:
        raise UnsafeTarget(
            "fragment",
            "the callback URL has a #fragment, which is never sent to the server; remove it",
        )
    netloc = parts.netloc
    if "@" in netloc:
        raise UnsafeTarget(
            "userinfo",
            "the callback URL must not contain credentials (user:password@); receivers "
            "authenticate callbacks by their signature",
        )
    if not netloc or not parts.hostname:
        raise UnsafeTarget("host", "the callback URL has no host")
    try:
        explicit_port = parts.port
    except ValueError:
        raise UnsafeTarget(
            "port", "the callback URL's port must be a number from 1 to 65535"
        ) from None
    if explicit_port == 0 or netloc.endswith(":"):
        raise UnsafeTarget("port", "the callback URL's port must be a number from 1 to 65535")
    port = explicit_port if explicit_port is not None else (443 if scheme == "https" else 80)

    try:
        parsed = httpx.URL(url)
        host = parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, UnicodeError) as exc:
        raise UnsafeTarget("host", f"the callback URL's host is not valid: {exc}") from None
    if parsed.port not in (None, port):
        raise UnsafeTarget("syntax", "URL parsers disagree about the callback URL's port")

    ip: IPAddress | None = None
    if netloc.startswith("["):
        if "%" in host:
            raise UnsafeTarget("host", "IPv6 zone indexes (%) are not allowed in callback URLs")
        try:
            ip = ipaddress.IPv6Address(host)
        except ValueError:
            raise UnsafeTarget("host", f"{host!r} is not a valid IPv6 address") from None
        check_address(ip, policy)
    else:
        urllib_host = parts.hostname
        if urllib_host.isascii() and urllib_host != host:
            raise UnsafeTarget(
                "syntax",
                f"URL parsers disagree about the callback URL's host ({urllib_host!r} vs {host!r})",
            )
        ip = _check_hostname(host, policy)
    return TargetUrl(url=url, scheme=scheme, host=host, port=port, ip=ip)


FORM_MESSAGE = (
    "the callback URL must be https://<host name>[:port][/path][?query]: a DNS name, "
    "not an IP address, and RFC 3986 characters (percent-encode any other)"
)


def vet_url(url: str, policy: TargetPolicy, *, timeout: float | None = 5.0) -> TargetUrl:
    """Registration check: :func:`validate_url`; then, in production (neither
    ``RELAY_ALLOW_*`` flag), the documented form (kind ``form``: an IP literal, a character
    to percent-encode), before any DNS; then :func:`resolve_and_check` on its host.

    Raises :class:`UnsafeTarget`; the API answers 422 ``invalid_webhook_url`` with its
    ``answer``. A refusal that depends on DNS or addresses is logged here with its reason.
    """
    try:
        target = validate_url(url, policy)
        if not (policy.allow_http or policy.allow_private or in_documented_form(url)):
            # Safe, but not of the form the OpenAPI document promises: production takes
            # that form only.
            raise UnsafeTarget("form", FORM_MESSAGE)
        if target.ip is None:
            resolve_and_check(target.host, target.port, policy, timeout=timeout)
    except UnsafeTarget as exc:
        if exc.kind in UnsafeTarget.NETWORK_KINDS:
            log.info("callback URL refused at registration (%s): %s", exc.kind, exc.message)
        raise
    return target
