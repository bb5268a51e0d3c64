"""The address a server is known by (:class:`AdvertisedAddressSettings`), declared once for every process
that tells others where to reach it: a broker (in lookups and redirects) and a bookie (the host part of its
bookie id).

Unset, a process is known by the address it listens on (its ``bind_address``), unless that is a wildcard
(``0.0.0.0``, ``::``), which nobody can connect to: then by the machine's host name
(:func:`advertised_host_for`).
"""

from __future__ import annotations

import ipaddress
import socket

from pydantic import BaseModel, ConfigDict


class AdvertisedAddressSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    advertised_address: str | None = None
    """Host others are told to use (a broker's lookups and redirects, a bookie's id ``host:port``); default:
    the bind address unless it is a wildcard, else the hostname."""


def advertised_host_for(advertised_address: str | None, bind_address: str) -> str:
    """The host a process listening on ``bind_address`` is known by (see the module's docstring)."""
    if advertised_address:
        return advertised_address
    try:
        if ipaddress.ip_address(bind_address).is_unspecified:
            return socket.gethostname()
    except ValueError:
        pass  # a host name
    return bind_address
