"""The ssh test hosts' addresses: 127.0.1.1-254, then on into the next /24, never .0 or .255."""

from __future__ import annotations

from tests.sshhosts import _address


def test_addresses_run_on_into_the_next_subnet_past_254():
    assert [_address("127.0.1", n) for n in (1, 2, 254, 255, 256, 508, 509)] == [
        "127.0.1.1", "127.0.1.2", "127.0.1.254", "127.0.2.1", "127.0.2.2", "127.0.2.254", "127.0.3.1"]
    assert _address("127.0.5", 10) == "127.0.5.10"


def test_256_hosts_have_256_distinct_usable_addresses():
    addresses = [_address("127.0.1", n) for n in range(1, 257)]
    assert len(set(addresses)) == 256
    assert not any(a.endswith((".0", ".255")) for a in addresses)
