"""The embedded servers' forced ports: never where the kernel hands out clients' local ports."""

from pathlib import Path

import pytest

from shared.core import embedded

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@pytest.mark.parametrize("service", sorted(embedded.FORCED_PORTS))
def test_forced_ports_lie_outside_the_ephemeral_range(service: str) -> None:
    """A client connection's local port is drawn from the ephemeral range: a default there could be taken by any
    open connection (it was, once, in the test suite). Linux's range where the kernel says it, else its default."""
    low, high = (int(v) for v in RANGE.read_text().split()) if RANGE.exists() else (32768, 60999)
    _var, port = embedded.FORCED_PORTS[service]
    assert not low <= port <= high, f"{service}'s forced port {port} lies in {low}-{high}"
    assert 1024 < port < 65536
