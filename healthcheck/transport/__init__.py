"""Transports: how a command reaches a host. All return the same ``HostCollection``/``CommandResult``.

    transport = open_transport("ssh", TransportSettings(ssh_config=Path("ssh_config")))
    transport.run(host, "hostname", timeout_s=10)

Each transport is one module registered by name (``transport.registry``); the node side (the framed
script and its framers) and the stream reader are shared by all of them.
"""

from healthcheck.transport.perhost import PerHostTransport
from healthcheck.transport.registry import (
    SSH_CLIENTS,
    TransportError,
    TransportSettings,
    open_transport,
    register,
    registry_name,
    transport_names,
)
from healthcheck.transport.script import Command

__all__ = ["SSH_CLIENTS", "Command", "PerHostTransport", "TransportError", "TransportSettings", "open_transport",
           "register", "registry_name", "transport_names"]
