"""Which strings can be host names: a host's name names its folder in the run directory and reaches ssh.

    host_name_problem("gpu001")        # None
    host_name_problem("../etc")        # "host name '../etc' is not usable (...)"

Every source of host names (inventories, hostlists, bundles, node spools) checks them here.
"""

from __future__ import annotations

from typing import Any

MAX_NAME_LEN = 253  # a DNS name; it also names the host's folder in the run directory (255 bytes at most)


def host_name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a host name (it names a folder in the run directory and reaches ssh),
    or None when it is fine."""
    if not isinstance(name, str) or not name:
        return f"host name {name!r} is not a non-empty string"
    if len(name) > MAX_NAME_LEN or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_LEN:
        return f"host name {name[:40]!r}... is {len(name)} characters long (at most {MAX_NAME_LEN})"
    if name.startswith((".", "-", "_")) or "/" in name or any(c.isspace() or ord(c) < 32 or ord(c) == 127
                                                             for c in name):
        return (f"host name {name!r} is not usable (no '/', whitespace, control characters, "
                "or leading '.', '-' or '_')")
    return None
