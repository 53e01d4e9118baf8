"""Networked runs over mutually authenticated gRPC: same numbers as the simulator, and faults.

The server and the parties run in threads of this process here (each with its own TLS
channel over loopback); tests/test_network_processes.py runs them as separate processes.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time

import numpy as np
import pytest

pytest.importorskip("grpc")

from fedustat.privacy.guarantee import PrivacyGuarantee
from fedustat.privacy.noise import SimulationNoise
from fedustat.protocols import registry
from fedustat.protocols.base import Estimate, Message, Protocol, Role
from fedustat.runtime.network.certs import create_deployment, load_credentials
from fedustat.runtime.network.party import run_party
from fedustat.runtime.network.server import serve
from fedustat.runtime.network.service import NetworkRunError, fingerprint
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, duplicate_pair_kernel, gini_kernel, kendall_tau_kernel
from network_deployment import run_deployment

SEED = 5
TIMEOUT = 10.0
# The stage timeout of a run that ends before any stage can time out (it completes, or a
# party's error stops it at once): only a hang guard, long enough for a loaded machine.
HANG_GUARD = 30.0


def labelled(n: int, seed: int = 0, integer: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 16, n).astype(float) if integer else rng.random(n)
    return np.column_stack([scores, (rng.random(n) < 0.4).astype(float)])


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return create_deployment(tmp_path_factory.mktemp("certs"), 4)


GINI = gini_kernel((0.0, 1.0))
STAR = [
    ("central-laplace", auc_kernel(), {}, False),
    ("ldp-quantized", auc_kernel(), {"k": 8, "bounds": (0.0, 1.0)}, False),
    ("ldp-quantized", GINI, {"k": 8}, False),
    ("ldp-tree", auc_kernel(), {"d": 16}, True),
    ("ldp-ghazi", GINI, {"k": 8}, False),
    ("ghazi-shuffle", GINI, {"k": 8}, False),
    ("fedauc-rr", auc_kernel(), {"n_clients": 3}, False),
    ("fedauc-laplace-local", auc_kernel(), {"n_clients": 3}, False),
    ("fedauc-gaussian", auc_kernel(), {"n_clients": 3, "delta": 1e-5}, False),
]


@pytest.mark.parametrize(("name", "kernel", "params", "integer"), STAR,
                         ids=[f"{s[0]}-{s[1].name}" for s in STAR])
def test_networked_release_equals_the_simulation(certs, name, kernel, params, integer):
    data = labelled(60, integer=integer)
    if kernel is GINI:
        data = data[:, :1]

    def make() -> Protocol:
        return registry.make(name, kernel, epsilon=1.0, **params)

    silos = np.array_split(data, 3)
    server, parties = run_deployment(certs, make, silos)
    assert not isinstance(server, Exception), server
    if make().silo_is_one_party:
        owner = np.repeat(np.arange(3), [len(s) for s in silos])
        expected = simulate(make(), data, rng=SEED, parties=owner, batch_size=[1, 1, 1])
    else:
        expected = simulate(make(), data, rng=SEED, batch_size=[len(s) for s in silos])
    np.testing.assert_equal(server.estimate.value, expected.value)
    assert server.estimate.cost == expected.cost
    np.testing.assert_equal([p.release["value"] for p in parties], [expected.value] * 3)
    # The frames carry the counted payload (bit-packed) plus their framing.
    assert server.wire_bytes * 8 >= expected.cost.total_bits
    assert server.framing_overhead >= 1.0


def test_a_party_with_another_configuration_is_refused(certs):
    data = np.array_split(labelled(30), 2)
    server, parties = run_deployment(
        certs, lambda: registry.make("central-laplace", auc_kernel(), epsilon=1.0), data,
        party_make=lambda i: registry.make("central-laplace", auc_kernel(),
                                           epsilon=1.0 if i == 0 else 5.0),
        timeout=2.0)
    # Refused at join, naming the option that differs in words (not two hashes).
    assert isinstance(parties[1], NetworkRunError)
    refusal = ("party-1's protocol configuration differs from the server's: "
               "epsilon = 5.0 (party-1) vs 1.0 (server)")
    assert str(parties[1]) == f"party-1 could not join: {refusal}"
    assert isinstance(server, NetworkRunError)
    assert f"joining: no answer within 2 s from party-1 (refused: {refusal})" in str(server)


def test_a_party_outside_the_run_is_refused_and_the_missing_one_named(certs):
    # Certificates exist for party-0..party-3; this run expects two parties, and
    # party-2 (a valid certificate of the deployment) tries to take the place of party-1.
    silos = np.array_split(labelled(30), 3)
    server, parties = run_deployment(
        certs, lambda: registry.make("central-laplace", auc_kernel(), epsilon=1.0), silos,
        n_silos=2, timeout=HANG_GUARD)
    assert "party-2 is not one of this run's parties" in str(parties[2])
    assert server.parties == ["party-0", "party-1"]
    assert [p.release["value"] for p in parties[:2]] == [server.estimate.value] * 2


def test_a_certificate_from_another_deployment_cannot_connect(certs, tmp_path):
    other = create_deployment(tmp_path / "other", 1)
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            serve(registry.make("central-laplace", auc_kernel(), epsilon=1.0), 1,
                  load_credentials(certs, "server"), rng=1, timeout=2.0,
                  on_ready=lambda p: (port.update(p=p), ready.set()))
        except NetworkRunError as exc:
            outcome["server"] = exc

    thread = threading.Thread(target=server)
    thread.start()
    ready.wait(10)
    # The party is told that the TLS handshake failed and why, at once (not that the
    # server did not answer within its deadline).
    with pytest.raises(NetworkRunError, match="party-0: the TLS handshake with the server "
                       r"at 127\.0\.0\.1:\d+ failed: the server's certificate is not "
                       "signed by this party's CA"):
        run_party(registry.make("central-laplace", auc_kernel(), epsilon=1.0), labelled(10),
                  load_credentials(other, "party-0"), f"127.0.0.1:{port['p']}", rng=1,
                  timeout=1.5)
    thread.join(20)
    assert "joining: no answer within 2 s from party-0" in str(outcome["server"])


def test_a_party_certificate_of_another_ca_is_told_the_server_refused_it(certs, tmp_path):
    # The party trusts this deployment's CA (so it accepts the server) but presents a
    # certificate of another deployment: the server closes every handshake, and the party
    # says so instead of waiting out its deadline.
    other = load_credentials(create_deployment(tmp_path / "other", 1), "party-0")
    mixed = dataclasses.replace(other, ca=load_credentials(certs, "party-0").ca)
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            serve(registry.make("central-laplace", auc_kernel(), epsilon=1.0), 1,
                  load_credentials(certs, "server"), rng=1, timeout=8.0,
                  on_ready=lambda p: (port.update(p=p), ready.set()))
        except NetworkRunError as exc:
            outcome["server"] = exc

    thread = threading.Thread(target=server)
    thread.start()
    assert ready.wait(10)
    with pytest.raises(NetworkRunError, match="party-0: the TLS handshake with the server "
                       r"at 127\.0\.0\.1:\d+ failed: the server closed the connection, "
                       "refusing this party's certificate"):
        run_party(registry.make("central-laplace", auc_kernel(), epsilon=1.0), labelled(10),
                  mixed, f"127.0.0.1:{port['p']}", rng=1, timeout=30.0)
    thread.join(60)  # the server's joining stage ends (nobody joined): a hang guard
    assert "joining: no answer within 8 s from party-0" in str(outcome["server"])


def test_a_server_that_is_not_there_is_named_as_unreachable(certs):
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(NetworkRunError, match=rf"party-0: could not reach the server at "
                       rf"{address} within 1\.625 s \(Connection refused\)"):
        run_party(registry.make("central-laplace", auc_kernel(), epsilon=1.0), labelled(10),
                  load_credentials(certs, "party-0"), address, rng=1, timeout=0.5)


def test_a_silent_party_stops_the_run_with_its_name(certs):
    silos = np.array_split(labelled(30), 3)
    server, parties = run_deployment(
        certs, lambda: registry.make("central-laplace", auc_kernel(), epsilon=1.0),
        silos[:2], n_silos=3, timeout=1.5)
    assert isinstance(server, NetworkRunError)
    assert str(server) == "joining: no answer within 1.5 s from party-2; no release"
    assert all("party-2" in str(p) for p in parties), parties


def test_a_record_outside_the_bounds_is_refused_in_its_own_party(certs):
    silos = np.array_split(labelled(30)[:, :1], 2)
    silos[1][0, 0] = 1000.0

    def make() -> Protocol:
        return registry.make("ldp-quantized", GINI, epsilon=1.0, k=8)

    server, parties = run_deployment(certs, make, silos, timeout=30.0)
    # party-1 sees its own error in full (its value 1000 included) ...
    assert isinstance(parties[1], NetworkRunError) and "max 1000" in str(parties[1])
    # ... the server and party-0 learn only which public check failed, at once (not
    # after the 30 s stage timeout), and nothing of party-1's values.
    told = ("round 0: party-1 failed validation: values outside the declared bounds of "
            "column 'x'; no release")
    assert isinstance(server, NetworkRunError) and str(server) == told
    assert isinstance(parties[0], NetworkRunError) and told in str(parties[0])
    for message in (str(server), str(parties[0])):
        assert "1000" not in message and "min" not in message


def test_a_party_busy_in_its_step_is_told_why_the_run_stopped(certs):
    # party-1's records fail their check at once; party-0 is still inside its own step
    # (4 s) when the run stops: on its next call it is told the reason (from its
    # presence call if the server has gone by then), not that the server vanished.
    silos = np.array_split(labelled(30)[:, :1], 2)
    silos[1][0, 0] = 1000.0

    def make() -> Protocol:
        return registry.make("ldp-quantized", GINI, epsilon=1.0, k=8)

    def busy(i: int) -> Protocol:
        protocol = make()
        if i == 0:
            step = protocol.party_step

            def slow(state, inbox, rng):
                time.sleep(4.0)
                return step(state, inbox, rng)

            protocol.party_step = slow  # instrumentation: not part of the configuration
        return protocol

    server, parties = run_deployment(certs, make, silos, timeout=30.0, party_make=busy)
    told = ("round 0: party-1 failed validation: values outside the declared bounds of "
            "column 'x'; no release")
    assert str(server) == told
    assert str(parties[0]) == f"party-0, round 0: {told}"


class _FailsInItsStep(Protocol):
    """A party step that fails with a message quoting a record (as a bug might), in the
    party whose instance has ``_fails`` set (private: not part of the configuration)."""

    name = "fails"

    def __init__(self) -> None:
        self.inner = registry.make("central-laplace", auc_kernel(), epsilon=1.0)
        self._fails = False

    def encode_parties(self, records, parties):
        return self.inner.init_parties(records, parties)

    def init_server(self, n_parties):
        return self.inner.init_server(n_parties)

    def party_step(self, state, inbox, rng):
        if self._fails:
            raise RuntimeError(f"cannot encode the score {state.records[0, 0]!r}")
        return self.inner.party_step(state, inbox, rng)

    def server_step(self, state, inbox, rng):
        return self.inner.server_step(state, inbox, rng)


def test_a_failing_party_step_tells_the_others_only_its_kind(certs):
    silos = np.array_split(labelled(30), 2)
    def party_make(i: int) -> Protocol:
        protocol = _FailsInItsStep()
        protocol._fails = i == 1
        return protocol

    server, parties = run_deployment(certs, _FailsInItsStep, silos, timeout=30.0,
                                     party_make=party_make)
    score = repr(silos[1][0, 0])
    assert str(server) == ("round 0: party-1 stopped the run: its own step failed "
                           "(RuntimeError; the details stay with that party); no release")
    assert score in str(parties[1])
    assert score not in str(parties[0]) and "party-1 stopped the run" in str(parties[0])


class SpeaksForOthers(Protocol):
    """A party step that claims a row of another party: the server must refuse it."""

    name = "forger"

    def __init__(self) -> None:
        self.inner = registry.make("central-laplace", auc_kernel(), epsilon=1.0)

    def encode_parties(self, records, parties):
        return self.inner.init_parties(records, parties)

    def init_server(self, n_parties):
        return self.inner.init_server(n_parties)

    def party_step(self, state, inbox, rng):
        state, message = self.inner.party_step(state, inbox, rng)
        forged = np.asarray(message.parties).copy()
        forged[0] = 0
        return state, Message(Role.PARTY, Role.SERVER, dict(message.fields),
                              dict(message.bits_per_value), forged)

    def server_step(self, state, inbox, rng):
        return self.inner.server_step(state, inbox, rng)


def test_a_forged_message_is_refused_naming_the_sender_and_field(certs):
    silos = np.array_split(labelled(30), 2)
    server, _parties = run_deployment(certs, SpeaksForOthers, silos, timeout=HANG_GUARD)
    assert isinstance(server, NetworkRunError)
    assert "party 'party-1': parties: speaks for party 0" in str(server)
    assert "no release" in str(server)
    assert fingerprint(SpeaksForOthers()).startswith("forger:")


def test_deployment_randomness_is_the_default(certs):
    # Without a seed, a protocol built with a simulation source is refused before
    # connecting ...
    chosen = registry.make("ldp-quantized", GINI, epsilon=1.0, k=8, noise=SimulationNoise(1))
    with pytest.raises(ValueError, match="pass a seed to ask for simulation randomness"):
        serve(chosen, 2, load_credentials(certs, "server"))
    with pytest.raises(ValueError, match="pass a seed to ask for simulation randomness"):
        run_party(chosen, labelled(5)[:, :1], load_credentials(certs, "party-0"),
                  "127.0.0.1:1")

    # ... and one whose noise is unset (or deployment) releases a deployment-grade value.
    def make() -> Protocol:
        return registry.make("ldp-quantized", GINI, epsilon=1.0, k=8)

    server, parties = run_deployment(certs, make, np.array_split(labelled(40)[:, :1], 2),
                                     rng=None)
    assert server.estimate.noise == "deployment"
    assert np.isfinite(server.estimate.value)
    assert [p.release["noise"] for p in parties] == ["deployment", "deployment"]


# ------------------------------------------------------------------ relay rounds


RING = 1 << 32


class MaskedSum(Protocol):
    """Sum of integer records with pairwise masks, through one relay round.

    Party i draws a uniform mask ``m_i`` in Z_{2^32} and sends it to party ``(i + 1) mod n``
    (a relay round); then it uploads ``x_i + m_i - m_{i-1} mod 2^32``. The masks cancel
    in the sum, so the release is the exact sum whatever the coins, and a party's upload
    alone is uniform.
    """

    name = "masked-sum"

    def __init__(self) -> None:
        self.n = 0

    def configure(self, n_rows: int) -> MaskedSum:
        out = type(self)()
        out.n = n_rows
        return out

    def encode_parties(self, records, parties):
        return {"x": records[:, 0].astype(np.uint64), "ids": np.asarray(parties), "step": 0}

    def init_server(self, n_parties):
        return {"n": n_parties}

    def party_step(self, state, inbox, rng):
        ids = state["ids"]
        if state["step"] == 0:
            state["step"] = 1
            state["mask"] = rng.integers(0, RING, ids.size, dtype=np.uint64)
            return state, Message(Role.PARTY, Role.PARTY,
                                  {"mask": state["mask"], "to": (ids + 1) % self.n},
                                  {"mask": 32, "to": 32}, ids)
        # One mask for each of this batch's parties, from its predecessor.
        assert inbox is not None and inbox.is_peer
        assert np.array_equal(inbox.parties, ids)
        assert np.array_equal(inbox.fields["from"], (ids - 1) % self.n)
        y = (state["x"] + state["mask"] - np.asarray(inbox.fields["mask"], np.uint64)) % RING
        return state, Message(Role.PARTY, Role.SERVER, {"y": y}, {"y": 32}, ids)

    def server_step(self, state, inbox, rng):
        total = int(np.asarray(inbox.fields["y"], dtype=np.uint64).sum() % np.uint64(RING))
        return state, Estimate(float(total), "sum", self.name, PrivacyGuarantee.none())


def integers(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1000, n).astype(float)


@pytest.mark.parametrize("batch_size", [None, 1, 3, [5, 2, 6]])
def test_simulated_relay_round_delivers_rows_and_counts_peer_bits(batch_size):
    x = integers(13)
    est = simulate(MaskedSum(), x, rng=1, batch_size=batch_size)
    assert est.value == x.sum()
    # Each party sends one 32-bit mask to a peer and receives one; the routing field
    # is not payload. Uploads: 32 bits each. One upload round plus one peer round.
    assert est.cost.peer_bits_per_party == 32
    assert est.cost.bits_per_party == est.cost.max_bits_per_party == 64
    assert est.cost.bits_received_per_party == 32
    assert est.cost.total_bits == 13 * 64
    assert (est.cost.rounds, est.cost.peer_rounds) == (2, 1)


class HalfRelay(MaskedSum):
    """Party 0's batch sends its first message to the server, the others to parties."""

    def party_step(self, state, inbox, rng):
        state, message = super().party_step(state, inbox, rng)
        if state["step"] == 1 and 0 in state["ids"]:
            return state, Message(Role.PARTY, Role.SERVER, {"y": message.fields["mask"]},
                                  {"y": 32}, message.parties)
        return state, message


def test_a_round_mixing_relay_and_upload_is_refused():
    with pytest.raises(ValueError, match=r"the batch of parties 3\.\.5 sent its message to "
                                         r"parties and the batch of parties 0\.\.2 to the "
                                         r"server"):
        simulate(HalfRelay(), integers(6), rng=1, batch_size=3)


def test_peer_messages_need_a_destination_per_row():
    with pytest.raises(ValueError, match="exactly one of the reserved fields"):
        Message(Role.PARTY, Role.PARTY, {"mask": np.zeros(2)}, {"mask": 8}, np.arange(2))
    with pytest.raises(ValueError, match="field 'to' must hold one non-negative integer"):
        Message(Role.PARTY, Role.PARTY, {"to": np.array([-1, 0])}, {"to": 8}, np.arange(2))


def test_networked_relay_round_equals_the_simulation(certs):
    x = integers(40, seed=3)
    silos = np.array_split(x, 3)
    server, parties = run_deployment(certs, MaskedSum, silos)
    assert not isinstance(server, Exception), server
    expected = simulate(MaskedSum(), x, rng=SEED, batch_size=[len(s) for s in silos])
    assert server.estimate.value == expected.value == x.sum()
    assert server.estimate.cost == expected.cost
    assert [p.release["value"] for p in parties] == [x.sum()] * 3


def test_a_tampered_relayed_payload_is_refused_naming_its_sender(certs, monkeypatch):
    from dataclasses import replace

    from fedustat.runtime.network import server as server_module

    def tamper(payload):
        # The server flips one bit of the payload party-0 sealed for party-1.
        if (payload.sender, payload.receiver) != (0, 1):
            return payload
        flipped = bytearray(payload.sealed)
        flipped[len(flipped) // 2] ^= 1
        return replace(payload, sealed=bytes(flipped))

    monkeypatch.setattr(server_module, "_forward", tamper)
    silos = np.array_split(integers(12), 2)
    server, parties = run_deployment(certs, MaskedSum, silos, timeout=HANG_GUARD)
    assert isinstance(parties[1], NetworkRunError)
    assert ("party-1, round 0: message from party 'party-0': relayed payload: fails "
            "authentication in round 0") in str(parties[1])
    # The receiver tells the server, which stops the run with the cause.
    assert isinstance(server, NetworkRunError)
    assert str(server).startswith("round 1: party-1 stopped the run: message from party "
                                  "'party-0': relayed payload: fails authentication")
    assert str(server).endswith("; no release")
    assert isinstance(parties[0], NetworkRunError) and "party-1 stopped the run" \
        in str(parties[0])


def test_a_payload_replayed_from_another_run_is_refused(certs, monkeypatch):
    from dataclasses import replace

    from fedustat.runtime.network import server as server_module

    recorded = {}

    def record(payload):
        recorded[(payload.sender, payload.receiver)] = payload
        return payload

    monkeypatch.setattr(server_module, "_forward", record)
    silos = np.array_split(integers(12), 2)
    first, _ = run_deployment(certs, MaskedSum, silos)
    assert first.estimate.value == integers(12).sum()
    old = recorded[(0, 1)]

    def replay(payload):
        # Same rows, same round, same parties: only the run differs.
        return replace(payload, sealed=old.sealed) if (payload.sender, payload.receiver) \
            == (0, 1) else payload

    monkeypatch.setattr(server_module, "_forward", replay)
    server, parties = run_deployment(certs, MaskedSum, silos, timeout=HANG_GUARD)
    assert "message from party 'party-0': relayed payload: fails authentication" \
        in str(parties[1])
    assert isinstance(server, NetworkRunError) and "party-1 stopped the run" in str(server)


def test_pairwise_keys_bind_round_direction_and_declared_rows(certs):
    from fedustat.runtime.network.e2e import PeerKeys, verify_party_certificates
    from fedustat.runtime.wire import WireError

    ca = (certs / "ca.pem").read_bytes()
    public = verify_party_certificates(ca, [(certs / f"party-{i}.pem").read_bytes()
                                            for i in range(3)])
    keys = [PeerKeys(i, (certs / f"party-{i}.key").read_bytes(), public, "p:1", "run-a")
            for i in range(3)]
    rows = (np.array([0, 0]), np.array([5, 6]), np.array([32, 32]))
    sealed = keys[0].seal(4, 1, 0, b"secret shares", *rows)
    assert b"secret shares" not in sealed
    assert keys[1].open(4, 0, 0, sealed, *rows) == b"secret shares"
    refusals = {
        "another round": lambda: keys[1].open(5, 0, 0, sealed, *rows),
        "another counter": lambda: keys[1].open(4, 0, 1, sealed, *rows),
        "another declared row": lambda: keys[1].open(4, 0, 0, sealed, rows[0], rows[1],
                                                     np.array([32, 33])),
        "the wrong receiver": lambda: keys[2].open(4, 0, 0, sealed, *rows),
        "a claimed sender that did not seal it": lambda: keys[1].open(4, 2, 0, sealed, *rows),
        "another run": lambda: PeerKeys(1, (certs / "party-1.key").read_bytes(), public,
                                        "p:1", "run-b").open(4, 0, 0, sealed, *rows),
    }
    for what, attempt in refusals.items():
        with pytest.raises(WireError, match="relayed payload: fails authentication"):
            attempt()
            pytest.fail(f"a payload with {what} was accepted")


def test_party_certificates_are_checked_against_the_deployment_ca(certs, tmp_path):
    from fedustat.runtime.network.e2e import verify_party_certificates

    ca = (certs / "ca.pem").read_bytes()
    mine = [(certs / f"party-{i}.pem").read_bytes() for i in range(2)]
    with pytest.raises(ValueError, match="the certificate given for party-0 names 'party-1'"):
        verify_party_certificates(ca, mine[::-1])
    other = create_deployment(tmp_path / "other", 2)
    with pytest.raises(ValueError, match="the certificate given for party-1 is not issued by "
                                         "this deployment's CA"):
        verify_party_certificates(ca, [mine[0], (other / "party-1.pem").read_bytes()])
    with pytest.raises(ValueError, match="the certificate given for party-0 names 'server'"):
        verify_party_certificates(ca, [(certs / "server.pem").read_bytes()])


def test_a_party_directory_checks_each_certificate_before_its_key_is_used(certs, tmp_path):
    """A party of a large run checks only the certificates of the parties it exchanges
    with, each before the first payload sealed for it or opened from it."""
    from fedustat.runtime.network.e2e import PartyDirectory, PeerKeys

    ca = (certs / "ca.pem").read_bytes()
    other = create_deployment(tmp_path / "other", 3)
    listed = [(certs / "party-0.pem").read_bytes(), (certs / "party-1.pem").read_bytes(),
              (other / "party-2.pem").read_bytes()]
    directory = PartyDirectory(ca, listed)
    keys = PeerKeys(0, (certs / "party-0.key").read_bytes(), directory, "p:1", "run-a")
    origins, targets, bits = np.array([0]), np.array([1]), np.array([8])
    sealed = keys.seal(0, 1, 0, b"x", origins, targets, bits)  # party-2 is never checked
    assert sealed and len(directory) == 3
    with pytest.raises(ValueError, match="the certificate given for party-2 is not issued "
                                         "by this deployment's CA"):
        keys.seal(0, 2, 0, b"x", origins, np.array([2]), bits)


def _ratings(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(1, 7, n)
    return np.column_stack([x, np.clip(x + rng.integers(-1, 2, n), 1, 6)]).astype(float)


PAIRS = [
    ("kendall-P2", kendall_tau_kernel("a"), {"P": 2}, lambda: _ratings(21, 1)),
    ("auc", auc_kernel(), {}, lambda: labelled(21, integer=True)),
    ("gini-all-pairs-split", GINI, {"all_pairs": True, "noise_split": "split"},
     lambda: labelled(12)[:, :1]),
    ("duplicate", duplicate_pair_kernel(), {"P": 2}, lambda: labelled(21, integer=True)[:, :1]),
    ("kendall-circuit", kendall_tau_kernel("a"), {"P": 2, "comparison": "circuit"},
     lambda: _ratings(21, 2)),
]


@pytest.mark.parametrize(("kernel", "params", "make_data"), [p[1:] for p in PAIRS],
                         ids=[p[0] for p in PAIRS])
def test_networked_pairs_2pc_equals_the_simulation(certs, kernel, params, make_data):
    data = make_data()

    def make() -> Protocol:
        return registry.make("pairs-2pc", kernel, epsilon=1.0, **params)

    # Silos of unequal sizes: most pairs and their dealers sit in different processes.
    silos = np.split(data, [len(data) // 3, len(data) // 3 + 2])
    server, parties = run_deployment(certs, make, silos)
    assert not isinstance(server, Exception), server
    assert not any(isinstance(p, Exception) for p in parties), parties
    expected = simulate(make(), data, rng=SEED, batch_size=[len(s) for s in silos])
    np.testing.assert_equal(server.estimate.value, expected.value)
    assert server.estimate.cost == expected.cost
    assert server.estimate.cost.peer_rounds >= 2
    np.testing.assert_equal([p.release["value"] for p in parties], [expected.value] * 3)


def test_unseeded_networked_pairs_2pc_computes_its_design_exactly(certs):
    # Without a seed every coin (design, dealers, shares, keys) comes from the OS; with
    # epsilon = inf the release is the exact statistic of the design the server drew.
    from fedustat.stats import incomplete_ustatistic

    kernel = kendall_tau_kernel("a")
    data = _ratings(17, 4)

    def make() -> Protocol:
        return registry.make("pairs-2pc", kernel, epsilon=math.inf, P=2)

    server, parties = run_deployment(certs, make, np.array_split(data, 3), rng=None)
    assert not isinstance(server, Exception), server
    design = server.estimate.diagnostics["design"]
    assert server.estimate.diagnostics["u_statistic"] == pytest.approx(
        incomplete_ustatistic(kernel, data, design), rel=1e-15, abs=1e-15)
    assert [p.release["value"] for p in parties] == [server.estimate.value] * 3


def test_a_networked_round_mixing_relay_and_upload_stops_the_run(certs):
    silos = np.array_split(integers(12), 3)
    server, parties = run_deployment(certs, HalfRelay, silos, timeout=HANG_GUARD)
    assert isinstance(server, NetworkRunError)
    assert str(server) == ("round 0: party-1 sent rows to parties and party-0 a message to "
                           "the server; every party of a round must do the same; no release")
    assert all("every party of a round must do the same" in str(p) for p in parties)


class Stranger(MaskedSum):
    """Addresses its masks to a party outside the run."""

    def party_step(self, state, inbox, rng):
        state, message = super().party_step(state, inbox, rng)
        if message.is_peer:
            fields = dict(message.fields)
            fields["to"] = fields["to"] + self.n
            return state, Message(Role.PARTY, Role.PARTY, fields, message.bits_per_value,
                                  message.parties)
        return state, message


def test_rows_addressed_outside_the_run_are_refused():
    with pytest.raises(ValueError, match=r"a relayed row names receiver party 6, but the run "
                                         r"has parties 0\.\.4"):
        simulate(Stranger(), integers(5), rng=1)


@pytest.mark.parametrize("bits", [2, 33, 62, 63])
def test_signed_fields_of_any_width_survive_a_relayed_frame(certs, bits):
    # Sealed payloads are wire frames: a packed signed field must come back exactly, at
    # every width below 64 (63 bits once overflowed on unpacking).
    from fedustat.runtime.network.e2e import PeerKeys, verify_party_certificates
    from fedustat.runtime.network.relay import open_reply, parse_request, reply_for, seal_rows
    from fedustat.runtime.wire import Expectation

    ca = (certs / "ca.pem").read_bytes()
    public = verify_party_certificates(ca, [(certs / f"party-{i}.pem").read_bytes()
                                            for i in range(2)])
    keys = [PeerKeys(i, (certs / f"party-{i}.key").read_bytes(), public, "p:1", "run-a")
            for i in range(2)]
    bounds = np.array([0, 2, 4])
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    values = np.array([low, high, -1, 0], dtype=np.int64)
    message = Message(Role.PARTY, Role.PARTY, {"v": values, "to": np.array([2, 3, 3, 2])},
                      {"v": bits, "to": 32}, np.array([0, 0, 1, 1]))
    request = seal_rows(message, keys[0], bounds, protocol="p:1", run="run-a", round_=0,
                        identity="party-0")
    *_, payloads = parse_request(request, Expectation("p:1", "run-a", 0, "party", "party-0",
                                                      Role.SERVER, party_ids=np.arange(2)),
                                 0, bounds)
    reply = reply_for(payloads, protocol="p:1", run="run-a", round_=0)
    delivered = open_reply(reply, keys[1], bounds, 1, message, protocol="p:1", run="run-a",
                           round_=0)
    # Delivered by recipient, then origin: rows to party 2 (from 0, then 1), then party 3.
    np.testing.assert_array_equal(delivered.parties, [2, 2, 3, 3])
    np.testing.assert_array_equal(delivered.fields["from"], [0, 1, 0, 1])
    np.testing.assert_array_equal(delivered.fields["v"], values[[0, 3, 1, 2]])


# ------------------------------------------------------------------ dropouts and restarts


def ldp_gini() -> Protocol:
    return registry.make("ldp-quantized", GINI, epsilon=1.0, k=8)


def test_the_run_goes_on_without_silos_that_never_joined(certs):
    data = labelled(60)[:, :1]
    silos = np.array_split(data, 3)
    # party-1 never starts; two of three suffice.
    server, parties = run_deployment(certs, ldp_gini, [silos[0], silos[2]], n_silos=3,
                                     identities=[0, 2], min_silos=2, timeout=1.5)
    assert not isinstance(server, Exception), server
    assert (server.parties, server.absent, server.n_parties) == (["party-0", "party-2"],
                                                               ["party-1"], 40)
    # The release over the parties that took part; silo 1's stream is skipped, not reused.
    present = np.concatenate([silos[0], silos[2]])
    expected = simulate(ldp_gini(), present, rng=SEED, batch_size=[20, 0, 20])
    assert server.estimate.value == expected.value
    assert server.estimate.cost == expected.cost
    assert [p.release["n_parties"] for p in parties] == [40, 40]
    assert [p.release["absent"] for p in parties] == [["party-1"]] * 2
    assert [p.release["silos"] for p in parties] == [2, 2]


def test_too_few_silos_stop_the_run_naming_the_missing(certs):
    silos = np.array_split(labelled(30)[:, :1], 3)
    server, _ = run_deployment(certs, ldp_gini, silos[:1], n_silos=3, min_silos=2,
                               timeout=1.5)
    assert str(server) == "joining: no answer within 1.5 s from party-1, party-2; no release"


def test_a_late_silo_is_refused_and_does_not_change_the_release(certs):
    silos = np.array_split(labelled(60)[:, :1], 3)
    server, parties = run_deployment(certs, ldp_gini, silos, min_silos=2, timeout=1.5,
                                     start_after={1: 4.0})
    assert server.absent == ["party-1"]
    # Refused ("joined too late") if the server still runs, else it finds no server.
    assert isinstance(parties[1], NetworkRunError) and "party-1" in str(parties[1])
    expected = simulate(ldp_gini(), np.concatenate([silos[0], silos[2]]), rng=SEED,
                        batch_size=[20, 0, 20])
    assert server.estimate.value == expected.value


def test_a_restarted_party_cannot_take_part_twice(certs):
    # party-1 "restarts" (a second process with its certificate) while the run waits for
    # party-2: the newcomer is refused and the release is that of the first three.
    silos = np.array_split(labelled(60)[:, :1], 3)
    server, parties = run_deployment(certs, ldp_gini, [*silos, silos[1]], n_silos=3,
                                     identities=[0, 1, 2, 1], start_after={2: 1.0, 3: 0.3})
    assert "party-1 has already joined this run" in str(parties[3])
    expected = simulate(ldp_gini(), np.concatenate(silos), rng=SEED, batch_size=[20, 20, 20])
    assert server.estimate.value == expected.value


def test_relay_rounds_go_on_without_a_silo_that_never_joined(certs):
    # pairs-2pc relays sealed rows between silos; the absent silo has no key and no rows.
    data = labelled(45)
    silos = np.array_split(data, 3)

    def make() -> Protocol:
        return registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2)

    server, _ = run_deployment(certs, make, [silos[0], silos[2]], n_silos=3,
                               identities=[0, 2], min_silos=2, timeout=2.0)
    assert not isinstance(server, Exception), server
    present = np.concatenate([silos[0], silos[2]])
    expected = simulate(make(), present, rng=SEED, batch_size=[15, 0, 15])
    assert server.estimate.value == expected.value
    assert server.estimate.cost == expected.cost


def test_relayed_rows_are_sealed_once_per_destination_silo_with_their_layout(certs):
    # One AEAD per destination silo and round: its payload is the rows' packed fields
    # and the tag; the layout travels once, bound into every seal, so a server that
    # alters it, or hands a payload to another silo, is caught naming the sender.
    from dataclasses import replace

    from fedustat.runtime.network.e2e import PeerKeys, verify_party_certificates
    from fedustat.runtime.network.relay import open_reply, parse_request, reply_for, seal_rows
    from fedustat.runtime.wire import Expectation, RowLayout, WireError

    ca = (certs / "ca.pem").read_bytes()
    public = verify_party_certificates(ca, [(certs / f"party-{i}.pem").read_bytes()
                                            for i in range(3)])
    keys = [PeerKeys(i, (certs / f"party-{i}.key").read_bytes(), public, "p:1", "run-a")
            for i in range(3)]
    bounds = np.array([0, 2, 4, 6])
    message = Message(Role.PARTY, Role.PARTY,
                      {"share": np.arange(6, dtype=np.uint64) * 1000,
                       "to": np.array([2, 4, 3, 5, 2, 4])},
                      {"share": 23, "to": 8}, np.array([0, 0, 0, 1, 1, 1]))
    request = seal_rows(message, keys[0], bounds, protocol="p:1", run="run-a", round_=3,
                        identity="party-0")
    expect = Expectation("p:1", "run-a", 3, "party", "party-0", Role.SERVER,
                         party_ids=np.arange(2))
    origins, targets, bits, payloads = parse_request(request, expect, 0, bounds)
    np.testing.assert_array_equal(origins, [0, 0, 1, 0, 1, 1])  # by destination silo
    np.testing.assert_array_equal(targets, [2, 3, 2, 4, 5, 4])
    assert [(p.receiver, p.origins.size) for p in payloads] == [(1, 3), (2, 3)]
    # Three 23-bit shares: 9 bytes, and the 16-byte tag.
    assert [len(p.sealed) for p in payloads] == [9 + 16, 9 + 16]
    np.testing.assert_array_equal(bits, [23] * 6)
    layout = RowLayout.from_bytes(payloads[0].layout, "test")
    assert layout.names == ("share", "to") and layout.row_bits() == 23

    def opened_by(silo, forwarded):
        reply = reply_for(forwarded, protocol="p:1", run="run-a", round_=3)
        return open_reply(reply, keys[silo], bounds, silo, None, protocol="p:1",
                          run="run-a", round_=3)

    delivered = opened_by(1, [payloads[0]])
    np.testing.assert_array_equal(delivered.parties, [2, 2, 3])
    np.testing.assert_array_equal(delivered.fields["from"], [0, 1, 0])
    np.testing.assert_array_equal(delivered.fields["share"], [0, 4000, 2000])
    assert delivered.bits_per_value == {"share": 23, "from": 8}

    wider = RowLayout(layout.names, ({**layout.descriptions[0], "bits": 24},
                                     layout.descriptions[1])).to_bytes()
    with pytest.raises(WireError, match="party 'party-0': relayed payload: fails "
                                        "authentication in round 3"):
        opened_by(1, [replace(payloads[0], layout=wider, bits=np.full(3, 24))])
    redirected = replace(payloads[0], receiver=2, targets=payloads[1].targets)
    with pytest.raises(WireError, match="party 'party-0': relayed payload: fails "
                                        "authentication"):
        opened_by(2, [redirected])
    with pytest.raises(WireError, match="party 'party-0': relayed payload: fails "
                                        "authentication"):
        opened_by(1, [replace(payloads[0], sealed=payloads[0].sealed[:-1] + b"\x00")])


def test_a_malformed_relay_request_is_refused_naming_the_sender_and_part(certs):
    import struct

    from fedustat.runtime.network.e2e import PeerKeys, verify_party_certificates
    from fedustat.runtime.network.relay import parse_request, seal_rows
    from fedustat.runtime.wire import Expectation, WireError

    ca = (certs / "ca.pem").read_bytes()
    public = verify_party_certificates(ca, [(certs / f"party-{i}.pem").read_bytes()
                                            for i in range(2)])
    keys = PeerKeys(0, (certs / "party-0.key").read_bytes(), public, "p:1", "run-a")
    bounds = np.array([0, 1, 2])
    message = Message(Role.PARTY, Role.PARTY, {"v": np.array([5]), "to": np.array([1])},
                      {"v": 3, "to": 8}, np.array([0]))
    good = seal_rows(message, keys, bounds, protocol="p:1", run="run-a", round_=0,
                     identity="party-0")
    meta_len, layout_len, dir_len = struct.unpack_from(">III", good, 4)
    at = 16 + meta_len

    def with_layout(layout: bytes) -> bytes:
        return good[:4] + struct.pack(">III", meta_len, len(layout), dir_len) + \
            good[16:at] + layout + good[at + layout_len:]

    expect = Expectation("p:1", "run-a", 0, "party", "party-0", Role.SERVER,
                         party_ids=np.arange(1))
    cases = {
        "to: the layout ends inside it": with_layout(good[at:at + layout_len - 1]),
        "layout: 1 bytes beyond its fields": with_layout(good[at:at + layout_len] + b"\0"),
        "layout: relayed rows need exactly one of the fields": with_layout(b"\x00"),
        "directory: ends inside a number": good[:12] + struct.pack(">I", dir_len + 1)
        + good[16:at + layout_len + dir_len] + b"\x80" + good[at + layout_len + dir_len:],
        "body: payload sizes do not add up": good + b"\x00",
    }
    for reason, request in cases.items():
        with pytest.raises(WireError, match=f"party 'party-0': {reason}"):
            parse_request(request, expect, 0, bounds)
