"""The browser guard: a pure-ASGI middleware in front of the API and the dashboard that
keeps a hostile web page from using the browser of someone who can reach the server.

- **Host check.** A request whose ``Host`` header (its port ignored) is not one of the
  names the server answers for is refused 421 (field ``Host``). The names are those of
  the address it is bound to (``127.0.0.1``, ``::1`` and ``localhost`` for a loopback
  address) plus the ``--allowed-host`` ones: a DNS-rebinding page, whose requests
  carry its own name, reads and changes nothing.
- **Cross-site state changes.** A POST, PUT, PATCH or DELETE whose ``Origin`` is
  present and is not this server's own origin (scheme, host and port), or whose
  ``Sec-Fetch-Site`` says ``cross-site`` or ``same-site`` (another origin of the same
  site, such as another port of ``localhost``), is refused 403 naming the header,
  whether it has a body or not. Clients that send neither (curl, ``cronwheel.Client``)
  are not browsers and keep working.

Both checks run before the body guard, the routes or the store see the request. The
scheme compared with ``Origin`` is the connection's, or the one a trusted proxy reports
(``server.create_app`` puts uvicorn's proxy-headers middleware in front of this one for
the ``--trusted-proxy`` addresses only).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from cronwheel.errors import ValidationError
from cronwheel.web.errors import send_error

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = frozenset({"127.0.0.1", "::1", "localhost"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)", re.ASCII)
_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)


def normalize_host(text: str) -> str | None:
    """A host name or IP address in the form hosts are compared in (lower case, no
    trailing dot, IPv6 without brackets and compressed); None when it is neither."""
    name = text.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        return ipaddress.ip_address(name).compressed
    except ValueError:
        pass
    name = name.removesuffix(".")
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(p) for p in name.split(".")):
        return None
    return name


def is_loopback(host: str) -> bool:
    name = normalize_host(host)
    if name == "localhost":
        return True
    try:
        return name is not None and ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """0.0.0.0 or :: (every address of the machine)."""
    name = normalize_host(host)
    return name in {"0.0.0.0", "::"}


def parse_allowed_hosts(values: Iterable[str]) -> list[str]:
    """``--allowed-host`` values (each may list several, comma- or space-separated),
    normalized; ValidationError naming ``allowed_host`` for one that is not a host."""
    out: list[str] = []
    for value in values:
        for item in value.replace(",", " ").split():
            name = normalize_host(item)
            if name is None:
                raise ValidationError(
                    f"{item[:80]!r} is not a host name or IP address (give it without port)",
                    field="allowed_host",
                )
            out.append(name)
    return out


def parse_trusted_proxies(values: Iterable[str]) -> list[str]:
    """``--trusted-proxy`` values: IP addresses or CIDR networks (comma- or
    space-separated); ValidationError naming ``trusted_proxy`` for anything else."""
    out: list[str] = []
    for value in values:
        for item in value.replace(",", " ").split():
            try:
                out.append(str(ipaddress.ip_network(item.strip("[]"), strict=False)))
            except ValueError:
                raise ValidationError(
                    f"{item[:80]!r} is not an IP address or network (such as 10.0.0.0/8)",
                    field="trusted_proxy",
                ) from None
    return out


def allowed_hosts_for(bind: str, extra: Iterable[str] = ()) -> frozenset[str] | None:
    """The Host names a server bound to ``bind`` answers: the loopback names for a
    loopback address, else the address (or name) itself; plus ``extra``. Bound to every
    address (0.0.0.0, ::), it is ``extra`` and the loopback names, or None (any Host:
    such a server needs tokens, which a rebinding page does not have) without ``extra``."""
    names = set(parse_allowed_hosts(extra))
    if is_wildcard(bind):
        return frozenset(names | LOOPBACK_NAMES) if names else None
    bound = normalize_host(bind)
    if bound is None:
        raise ValidationError(f"{bind[:80]!r} is not a host name or IP address", field="host")
    names.add(bound)
    if is_loopback(bound):
        names |= LOOPBACK_NAMES
    return frozenset(names)


@functools.lru_cache(maxsize=256)  # every request's Host: the same few texts
def _split_host_port(value: str) -> tuple[str, int | None] | None:
    """``name``, ``name:port``, ``[v6]`` or ``[v6]:port`` -> (name, port); None if malformed."""
    if value.startswith("["):
        end = value.find("]")
        host, rest = value[: end + 1], value[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    else:
        host, sep, port_text_or = value.rpartition(":")
        if not sep:
            host, port_text = value, None
        else:
            port_text = port_text_or
    if port_text is not None and not _PORT.fullmatch(port_text):
        return None
    name = normalize_host(host)
    if name is None:
        return None
    return name, None if port_text is None else int(port_text)


def _origin_of(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    name = normalize_host(parts.hostname or "")
    extra = parts.username or parts.password or parts.query or parts.fragment
    if scheme not in _DEFAULT_PORTS or name is None or parts.path not in ("", "/") or extra:
        return None
    return scheme, name, port if port is not None else _DEFAULT_PORTS[scheme]


class Refused(Exception):
    def __init__(self, status: int, message: str, field: str) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


class BrowserGuard:
    """See the module docstring. ``allowed_hosts`` None: any Host is answered."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: Iterable[str] | None = None) -> None:
        self.app = app
        self.allowed = None if allowed_hosts is None else frozenset(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            self.check(scope)
        except Refused as refusal:
            code = "misdirected_request" if refusal.status == 421 else "forbidden"
            await send_error(send, refusal.status, code, refusal.message, refusal.field)
            return
        await self.app(scope, receive, send)

    def check(self, scope: Scope) -> None:
        headers: dict[str, str] = {}
        for name, value in scope.get("headers", ()):
            headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
        host_text = headers.get("host", "").strip()
        host = _split_host_port(host_text) if host_text else None
        if self.allowed is not None and (host is None or host[0] not in self.allowed):
            shown = repr(host_text[:80]) if host_text else "missing"
            raise Refused(
                421, f"this server does not answer for Host {shown} (see --allowed-host)", "Host"
            )
        if scope.get("method", "GET").upper() in SAFE_METHODS:
            return
        fetch_site = headers.get("sec-fetch-site")
        if fetch_site is not None and fetch_site.strip().lower() not in ("same-origin", "none"):
            raise Refused(
                403,
                f"a {fetch_site.strip()[:20]} request may not change anything here",
                "Sec-Fetch-Site",
            )
        origin_text = headers.get("origin")
        if origin_text is None:
            return
        scheme = str(scope.get("scheme", "http")).lower()
        own = None
        if host is not None:
            own = (scheme, host[0], host[1] if host[1] is not None else _DEFAULT_PORTS[scheme])
        if own is None or _origin_of(origin_text.strip()) != own:
            hint = ""
            if own is not None and own[0] == "http" and origin_text.strip().startswith("https:"):
                hint = " (behind a TLS proxy? give its address with --trusted-proxy)"
            raise Refused(
                403,
                f"cross-origin request from {origin_text.strip()[:80]!r} refused{hint}",
                "Origin",
            )
