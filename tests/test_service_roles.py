"""Record-less service roles (Protocol.service_roles): the contract, the simulator's
treatment (ids, seed streams, cost), and ghazi-shuffle's shuffler service."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fedustat.privacy.guarantee import PrivacyGuarantee, Trust
from fedustat.protocols.base import (
    PEER_TO,
    Cost,
    Estimate,
    Message,
    Protocol,
    Role,
    service_id,
)
from fedustat.protocols.local import ghazi_shuffle as gs
from fedustat.runtime.simulate import MessageLog, service_seed, simulate, simulate_run
from fedustat.stats import gini_kernel

GINI = gini_kernel((0, 1))


class _Beacon(Protocol):
    """Toy protocol: each party relays its value to a 'beacon' service, which adds one
    uniform coin of its own and sends the total to the server (the release)."""

    name = "beacon"

    def __init__(self, forge: int | None = None) -> None:
        self.forge = forge

    def service_roles(self) -> tuple[str, ...]:
        return ("beacon",)

    def encode_parties(self, records: np.ndarray, parties: np.ndarray) -> Any:
        return {"x": records[:, 0], "ids": parties, "n": None, "sent": False}

    def init_server(self, n_parties: int) -> Any:
        return n_parties

    def init_service(self, role: str, n_parties: int) -> Any:
        return service_id(n_parties, self.service_roles(), role)

    def party_step(self, state: Any, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[Any, Message]:
        if state["sent"]:
            return state, Message(Role.PARTY, Role.SERVER, {"total": np.zeros(0)},
                                  {"total": 64}, np.zeros(0, dtype=np.int64))
        n_total = state["n_total"]
        to = np.full(state["ids"].size, n_total, dtype=np.int64)
        state = {**state, "sent": True}
        return state, Message(Role.PARTY, Role.PARTY, {"x": state["x"], PEER_TO: to},
                              {"x": 64, PEER_TO: 64}, state["ids"])

    def service_step(self, role: str, state: Any, inbox: Message | None,
                     rng: np.random.Generator) -> tuple[Any, Message | None]:
        if inbox is None or not inbox.is_peer:
            return state, None
        total = float(np.sum(inbox.fields["x"])) + rng.random()
        own = state if self.forge is None else self.forge
        return state, Message(Role.PARTY, Role.SERVER, {"total": np.array([total])},
                              {"total": 64}, np.array([own], dtype=np.int64))

    def server_step(self, state: Any, inbox: Message,
                    rng: np.random.Generator) -> tuple[Any, Estimate]:
        value = float(np.asarray(inbox.fields["total"])[0])
        return state, Estimate(value, "sum", self.name, PrivacyGuarantee.none(),
                               cost=Cost())


def _beacon(n: int, forge: int | None = None) -> _Beacon:
    proto = _Beacon(forge)
    original = proto.encode_parties

    def encode(records: np.ndarray, parties: np.ndarray) -> Any:
        return {**original(records, parties), "n_total": n}

    proto.encode_parties = encode  # type: ignore[method-assign]
    return proto


def test_service_ids_follow_the_parties_and_unknown_roles_are_named() -> None:
    assert service_id(10, ("dealer", "shuffler"), "dealer") == 10
    assert service_id(10, ("dealer", "shuffler"), "shuffler") == 11
    with pytest.raises(ValueError, match=r"unknown service role 'mixer'.*'dealer'"):
        service_id(10, ("dealer",), "mixer")
    with pytest.raises(ValueError, match=r"unknown service role 'dealer'.*are none"):
        gs.GhaziShuffle(GINI, 1.0, k=4).init_service("dealer", 10)


@pytest.mark.parametrize("batch_size", [None, 3, [2, 5]])
def test_service_draws_from_its_own_stream(batch_size: Any) -> None:
    data = np.arange(7, dtype=float)
    est = simulate(_beacon(7), data, rng=11, batch_size=batch_size)
    coin = np.random.default_rng(service_seed(np.random.SeedSequence(11), 0)).random()
    assert est.value == 21.0 + coin
    # Every bit counted: 7 x 64 relayed to the service, 64 from the service to the server.
    assert est.cost.total_bits == 8 * 64
    assert est.cost.peer_bits_per_party == 64.0
    assert est.cost.bits_per_party == 64.0
    assert est.cost.peer_rounds == 1 and est.cost.rounds == 2


def test_service_seed_streams_are_apart_from_the_runs_streams() -> None:
    root = np.random.SeedSequence(3)
    ours = service_seed(root, 0).generate_state(4).tolist()
    theirs = [s.generate_state(4).tolist() for s in root.spawn(4)]
    assert ours not in theirs
    assert service_seed(root, 1).generate_state(4).tolist() != ours


def test_a_service_cannot_speak_for_another_id() -> None:
    with pytest.raises(ValueError, match="service 'beacon' \\(id 5\\) may send only rows"):
        simulate(_beacon(5, forge=2), np.arange(5, dtype=float), rng=1)


def test_rows_of_one_round_must_share_their_fields() -> None:
    from fedustat.runtime.simulate import merge_round
    party = Message(Role.PARTY, Role.SERVER, {"a": np.zeros(2)}, {"a": 8}, np.array([0, 1]))
    service = Message(Role.PARTY, Role.SERVER, {"b": np.zeros(1)}, {"b": 8}, np.array([2]))
    with pytest.raises(ValueError, match=r"must carry the same fields; got \[\('a',\), "
                                         r"\('b',\)\]"):
        merge_round([party], [service])
    waiting = Message(Role.PARTY, Role.SERVER, {"a": np.zeros(0)}, {"a": 8},
                      np.zeros(0, dtype=np.int64))
    merged = merge_round([waiting], [service])
    assert merged.parties.tolist() == [2] and set(merged.fields) == {"b"}


def test_message_log_counts_service_rows_apart() -> None:
    log = MessageLog(3, 1)
    log.record_peer_rows(np.array([0, 1, 2]), np.array([3, 3, 3]), np.array([8, 8, 8]))
    log.record(Message(Role.PARTY, Role.SERVER, {"m": np.zeros((1, 4))}, {"m": 16},
                       np.array([3])))
    assert log.service_received.tolist() == [24]
    assert log.service_sent.tolist() == [64]
    cost = log.cost()
    assert cost.total_bits == 24 + 64 and cost.bits_per_party == 8.0
    with pytest.raises(ValueError, match=r"names receiver party 4, but the run has parties "
                                         r"0\.\.2 and services 3\.\.3"):
        log.record_peer_rows(np.array([0]), np.array([4]), np.array([8]))


# ------------------------------------------------------------------ ghazi-shuffle shuffler
@pytest.mark.parametrize("n_parties", [None, 60])
@pytest.mark.parametrize("batch_size", [None, [20, 40]])
def test_shuffler_service_releases_the_in_server_value(n_parties: Any, batch_size: Any
                                                       ) -> None:
    data = np.random.default_rng(0).uniform(0, 1, 60)
    kw = {"k": 6, "n_parties": n_parties}
    inside = simulate(gs.GhaziShuffle(GINI, 1.0, **kw), data, rng=3, batch_size=batch_size)
    apart = simulate(gs.GhaziShuffle(GINI, 1.0, shuffler="service", **kw), data, rng=3,
                     batch_size=batch_size)
    # The analyzer's sums do not depend on the order of the messages.
    assert apart.value == inside.value and apart.std_error == inside.std_error
    r, m = apart.diagnostics["n_messages"], apart.diagnostics["n_coordinates"]
    upload = r * m * 64
    # The parties' messages now go to the shuffler (peer bits), which sends them on.
    assert apart.cost.peer_bits_per_party == upload == inside.cost.bits_per_party - (
        0 if n_parties else 1)
    assert apart.cost.total_bits == inside.cost.total_bits + 60 * upload \
        + (64 if n_parties is None else 0)
    assert apart.cost.rounds == inside.cost.rounds + 1
    assert apart.diagnostics["shuffler"] == "service"


def test_shuffler_service_trust_assumption_names_it() -> None:
    data = np.random.default_rng(1).uniform(0, 1, 30)
    apart = simulate(gs.GhaziShuffle(GINI, 1.0, k=4, shuffler="service"), data, rng=1)
    inside = simulate(gs.GhaziShuffle(GINI, 1.0, k=4), data, rng=1)
    (a,) = [x for x in apart.privacy.assumptions if x.kind is Trust.SHUFFLER]
    (b,) = [x for x in inside.privacy.assumptions if x.kind is Trust.SHUFFLER]
    assert "shuffler service" in a.detail and "does not collude with the aggregator" in a.detail
    assert "the aggregator runs the shuffler" in b.detail


def test_the_analyzer_sees_only_a_permuted_multiset() -> None:
    data = np.random.default_rng(2).uniform(0, 1, 40)
    proto = gs.GhaziShuffle(GINI, 1.0, k=4, n_parties=40, shuffler="service")
    run = simulate_run(proto, data, rng=4)
    assert run.estimate.value == simulate(gs.GhaziShuffle(GINI, 1.0, k=4, n_parties=40),
                                          data, rng=4).value
    # The shuffler's step, called directly: each column permuted within itself.
    shares = np.arange(40 * 3 * 5, dtype=np.int64).reshape(40, 3, 5)
    inbox = Message(Role.PARTY, Role.PARTY, {"shares": shares, "from": np.arange(40)},
                    {"shares": 64, "from": 64}, np.full(40, 40))
    sid = proto.init_service("shuffler", 40)
    _, out = proto.service_step("shuffler", sid, inbox, np.random.default_rng(0))
    assert out is not None and out.parties.tolist() == [40]
    mixed = out.fields["messages"][0]
    flat = shares.reshape(-1, 5)
    for col in range(5):
        assert sorted(mixed[:, col]) == sorted(flat[:, col])
    # 120 distinct messages per column: staying in order has probability 1/120!.
    assert not np.array_equal(mixed, flat)
    _, nothing = proto.service_step("shuffler", sid, None, np.random.default_rng(0))
    assert nothing is None


def test_bad_shuffler_choice_is_named() -> None:
    with pytest.raises(ValueError, match="shuffler must be one of \\('server', 'service'\\), "
                                         "got 'cloud'"):
        gs.GhaziShuffle(GINI, 1.0, k=4, shuffler="cloud")


def test_server_refuses_a_malformed_shuffled_multiset() -> None:
    proto = gs.GhaziShuffle(GINI, 1.0, k=4, n_parties=10, shuffler="service")
    state = proto.init_server(10)
    bad = Message(Role.PARTY, Role.SERVER, {"messages": np.zeros((1, 3, 2), np.int64)},
                  {"messages": 64}, np.array([10]))
    with pytest.raises(ValueError, match="the shuffler's message must be one integer row of "
                                         "shape"):
        proto.server_step(state, bad, np.random.default_rng(0))


def test_registry_passes_the_shuffler_option() -> None:
    from fedustat.protocols import registry
    proto = registry.make("ghazi-shuffle", GINI, epsilon=1.0, k=4, shuffler="service")
    assert proto.service_roles() == ("shuffler",)
    assert registry.make("ghazi-shuffle", GINI, epsilon=1.0, k=4).service_roles() == ()
    assert math.isfinite(simulate(proto, np.linspace(0, 1, 12), rng=0).value)


# ------------------------------------------------------------------ networked (threads)
grpc = pytest.importorskip("grpc")

from fedustat.runtime.network import (  # noqa: E402
    NetworkRunError,
    create_deployment,
    load_credentials,
    run_party,
    run_service,
    serve,
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: Any) -> Any:
    return create_deployment(tmp_path_factory.mktemp("certs"), 3,
                             extra_roles=("shuffler", "dealer"))


def _deployment(certs: Any, make: Any, silos: list[np.ndarray], *, rng: Any = 5,
                services: tuple[str, ...] = (), timeout: float = 10.0,
                service_identity: dict[str, str] | None = None) -> tuple[Any, list, list]:
    """Server, silos and services in threads; (server outcome, parties', services')."""
    import threading
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            outcome["server"] = serve(make(), len(silos), load_credentials(certs, "server"),
                                      rng=rng, timeout=timeout,
                                      on_ready=lambda p: (port.update(p=p), ready.set()))
        except Exception as exc:  # the test inspects it
            outcome["server"] = exc
            ready.set()

    results: list[Any] = [None] * (len(silos) + len(services))

    def party(i: int) -> None:
        try:
            results[i] = run_party(make(), silos[i], load_credentials(certs, f"party-{i}"),
                                   f"127.0.0.1:{port['p']}", rng=rng, timeout=timeout)
        except Exception as exc:
            results[i] = exc

    def service(j: int, role: str) -> None:
        name = (service_identity or {}).get(role, role)
        try:
            results[len(silos) + j] = run_service(make(), role, load_credentials(certs, name),
                                                  f"127.0.0.1:{port['p']}", rng=rng,
                                                  timeout=timeout)
        except Exception as exc:
            results[len(silos) + j] = exc

    main = threading.Thread(target=server)
    main.start()
    assert ready.wait(30)
    threads = [threading.Thread(target=party, args=(i,)) for i in range(len(silos))]
    threads += [threading.Thread(target=service, args=(j, r)) for j, r in enumerate(services)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(6 * timeout)
    main.join(4 * timeout)
    assert not main.is_alive(), "the server must never hang"
    return outcome["server"], results[:len(silos)], results[len(silos):]


@pytest.mark.parametrize("n_parties", [None, 24])
def test_networked_shuffler_equals_the_simulator(certs: Any, n_parties: Any) -> None:
    data = np.random.default_rng(7).uniform(0, 1, 24)
    silos = [data[:5], data[5:14], data[14:]]

    def make() -> gs.GhaziShuffle:
        return gs.GhaziShuffle(GINI, 1.0, k=4, n_parties=n_parties, shuffler="service")

    run, parties, services = _deployment(certs, make, silos, services=("shuffler",))
    assert not isinstance(run, Exception), run
    sim = simulate(make(), data, rng=5, batch_size=[5, 9, 10])
    assert run.estimate.value == sim.value
    assert run.estimate.cost == sim.cost
    assert all(p.release["value"] == sim.value for p in parties)
    assert run.services == ["shuffler"]
    (shuffler,) = services
    assert shuffler.role == "shuffler" and shuffler.service_id == 24
    assert shuffler.release["value"] == sim.value


def test_missing_shuffler_stops_the_run_naming_it(certs: Any) -> None:
    data = np.random.default_rng(8).uniform(0, 1, 12)

    def make() -> gs.GhaziShuffle:
        return gs.GhaziShuffle(GINI, 1.0, k=4, n_parties=12, shuffler="service")

    run, parties, _ = _deployment(certs, make, [data[:4], data[4:8], data[8:]], timeout=4.0)
    assert isinstance(run, NetworkRunError)
    assert "joining: no answer within 4 s from shuffler; no release" in str(run)
    assert all(isinstance(p, NetworkRunError) for p in parties)


def test_a_service_with_another_roles_certificate_is_refused(certs: Any) -> None:
    proto = gs.GhaziShuffle(GINI, 1.0, k=4, n_parties=12, shuffler="service")
    with pytest.raises(ValueError, match="the shuffler service needs the certificate named "
                                         "'shuffler', got 'dealer'"):
        run_service(proto, "shuffler", load_credentials(certs, "dealer"), "127.0.0.1:1",
                    rng=1)
    with pytest.raises(ValueError, match="has no service role 'dealer'; its service roles "
                                         "are \\['shuffler'\\]"):
        run_service(proto, "dealer", load_credentials(certs, "dealer"), "127.0.0.1:1", rng=1)


def test_server_refuses_a_service_the_protocol_does_not_have(certs: Any) -> None:
    # The in-server shuffler has no service role: a 'shuffler' certificate is a stranger.
    data = np.random.default_rng(9).uniform(0, 1, 12)
    with_service = gs.GhaziShuffle(GINI, 1.0, k=4, n_parties=12, shuffler="service")
    without = gs.GhaziShuffle(GINI, 1.0, k=4, n_parties=12)
    import threading
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            outcome["server"] = serve(without, 1, load_credentials(certs, "server"), rng=1,
                                      timeout=1.5,
                                      on_ready=lambda p: (port.update(p=p), ready.set()))
        except Exception as exc:
            outcome["server"] = exc

    thread = threading.Thread(target=server)
    thread.start()
    assert ready.wait(30)
    with pytest.raises(NetworkRunError, match="shuffler is not one of this run's parties"):
        run_service(with_service, "shuffler", load_credentials(certs, "shuffler"),
                    f"127.0.0.1:{port['p']}", rng=1, timeout=5)
    thread.join(20)
    assert isinstance(outcome["server"], NetworkRunError)
    del data


# ------------------------------------------------------------------ pairs-2pc dealer service
from fedustat.protocols import registry  # noqa: E402
from fedustat.stats import auc_kernel  # noqa: E402


def _auc_data(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.random(n), (np.arange(n) % 3 == 0).astype(float)])


@pytest.mark.parametrize("options", [{"P": 2}, {"P": 2, "comparison": "circuit"},
                                     {"all_pairs": True, "delta": 1e-5}],
                         ids=["fss", "circuit", "all-pairs"])
def test_pairs_dealer_service_computes_the_same_pairs(options: dict) -> None:
    data = _auc_data(30, 1)
    by_party = simulate(registry.make("pairs-2pc", auc_kernel(), epsilon=math.inf, **options),
                        data, rng=3, batch_size=[10, 20])
    by_service = simulate(registry.make("pairs-2pc", auc_kernel(), epsilon=math.inf,
                                        dealer="service", **options),
                          data, rng=3, batch_size=[10, 20])
    # Noise-free, both compute every pair's exact kernel value (other masks, same result).
    assert by_service.value == by_party.value
    # The dealing moves from parties to the service: the parties send less, the members
    # receive the same packages; the whole run sends the same bits (all pairs: plus the
    # assignment broadcast the dealer downloads too).
    assert by_service.cost.bits_per_party < by_party.cost.bits_per_party
    if options.get("all_pairs"):
        assert by_service.cost.bits_received_per_party == \
            by_party.cost.bits_received_per_party
    else:
        # The assignment rows naming a pair's members now go to the dealer service.
        assert by_service.cost.bits_received_per_party < \
            by_party.cost.bits_received_per_party
    extra = 0 if not options.get("all_pairs") else by_service.cost.total_bits \
        - by_party.cost.total_bits
    assert extra == 0 or 0 < extra <= 32 + 30  # n (32 bits) and 30 one-bit labels
    assert by_service.cost.total_bits == by_party.cost.total_bits + extra


def test_pairs_dealer_service_keeps_the_seeded_release_and_names_itself() -> None:
    data = _auc_data(24, 2)
    make = lambda: registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2,  # noqa: E731
                                 dealer="service")
    first = simulate(make(), data, rng=5, batch_size=[7, 17])
    # The members' coins and noise keep their streams, and the dealt masks cancel: the
    # seeded release equals the one with dealing parties.
    by_party = simulate(registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2), data,
                        rng=5, batch_size=[7, 17])
    assert first.value == by_party.value
    (dealer,) = [a for a in first.privacy.assumptions if a.kind is Trust.DEALER]
    assert "as the dealer service" in dealer.detail
    assert "dealer service" in first.diagnostics["dealer"]
    assert "the dealer service knows every pair's masks" in first.diagnostics["threat_model"]
    with pytest.raises(ValueError, match="dealer must be one of 'party', 'service', got 'me'"):
        registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, dealer="me")


def test_networked_pairs_dealer_service_equals_the_simulator(certs: Any) -> None:
    data = _auc_data(24, 3)
    silos = [data[:6], data[6:15], data[15:]]

    def make() -> Any:
        return registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2, dealer="service")

    run, parties, services = _deployment(certs, make, silos, services=("dealer",), rng=8)
    assert not isinstance(run, Exception), run
    sim = simulate(make(), data, rng=8, batch_size=[6, 9, 9])
    assert run.estimate.value == sim.value
    assert run.estimate.cost == sim.cost
    assert all(not isinstance(p, Exception) for p in parties), parties
    (dealer,) = services
    assert dealer.role == "dealer" and dealer.service_id == 24


# ------------------------------------------------------------------ umpc dealer service
def _umpc(dealer: str, epsilon: float = 1.0, **options: Any) -> Any:
    return registry.make("umpc", auc_kernel(), epsilon=epsilon,
                         bounds={"score": (0.0, 1.0)}, dealer=dealer, **options)


@pytest.mark.parametrize("options", [{}, {"comparison": "circuit"}], ids=["fss", "circuit"])
def test_umpc_dealer_service_keeps_the_seeded_release(options: dict) -> None:
    data = _auc_data(30, 4)
    by_party = simulate(_umpc("party", **options), data, rng=3, batch_size=[10, 20])
    by_service = simulate(_umpc("service", **options), data, rng=3, batch_size=[10, 20])
    # The coin's dealer stream is drawn alike (Z unchanged), the parties' streams are
    # untouched and the dealt masks cancel: the same release for the seed.
    assert by_service.value == by_party.value
    assert by_service.std_error == by_party.std_error
    # Same traffic, except round 1: with the dealer service every party (and the dealer)
    # gets all n labels in one broadcast instead of its addressed row of labels; both
    # downloads are the protocol's expected ones. The dealing moves from the parties'
    # sent bits to the service's.
    n = 30
    download = {mode: est.diagnostics["expected_download_bits"]
                for mode, est in (("party", by_party), ("service", by_service))}
    assert download["service"] == n * (64 + 128 + 64 + n)   # n, coin, active, n labels
    assert by_service.cost.bits_received_per_party - by_party.cost.bits_received_per_party \
        == pytest.approx((download["service"] - download["party"]) / n, abs=1e-9)
    assert by_service.cost.bits_per_party < by_party.cost.bits_per_party
    (dealer,) = [a for a in by_service.privacy.assumptions if a.kind is Trust.DEALER]
    assert "as the dealer service" in dealer.detail
    assert "dealer service" in by_service.diagnostics["secrecy"]


def test_umpc_dealer_service_runs_with_few_parties_and_checks_its_choice() -> None:
    data = _auc_data(3, 5)
    with pytest.raises(ValueError, match=r"with n=2 parties there is none .* or use "
                                         "dealer='service'"):
        simulate(_umpc("party", math.inf, edges=1), data[:2], rng=1)
    assert math.isfinite(simulate(_umpc("service", math.inf, edges=1), data[:2],
                                  rng=1).value)
    with pytest.raises(ValueError, match=r"dealer must be one of \('party', 'service'\), "
                                         "got 'server'"):
        _umpc("server")


def test_networked_umpc_dealer_service_equals_the_simulator(certs: Any) -> None:
    data = _auc_data(18, 6)
    silos = [data[:5], data[5:11], data[11:]]
    run, parties, services = _deployment(certs, lambda: _umpc("service"), silos,
                                         services=("dealer",), rng=2)
    assert not isinstance(run, Exception), run
    sim = simulate(_umpc("service"), data, rng=2, batch_size=[5, 6, 7])
    assert run.estimate.value == sim.value
    assert run.estimate.cost == sim.cost
    assert all(not isinstance(p, Exception) for p in parties), parties
    (dealer,) = services
    assert not isinstance(dealer, Exception), dealer
    assert dealer.service_id == 18 and dealer.release["value"] == sim.value


def test_missing_dealer_stops_the_run_naming_it(certs: Any) -> None:
    data = _auc_data(12, 7)
    run, parties, _ = _deployment(certs, lambda: _umpc("service"),
                                  [data[:4], data[4:8], data[8:]], timeout=4.0)
    assert isinstance(run, NetworkRunError)
    assert "joining: no answer within 4 s from dealer; no release" in str(run)
    assert all(isinstance(p, NetworkRunError) for p in parties)


def test_a_service_with_another_configuration_is_refused_and_named(certs: Any) -> None:
    data = _auc_data(12, 8)
    silos = [data[:4], data[4:8], data[8:]]
    import threading
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            outcome["server"] = serve(_umpc("service"), 3, load_credentials(certs, "server"),
                                      rng=1, timeout=5.0,
                                      on_ready=lambda p: (port.update(p=p), ready.set()))
        except Exception as exc:
            outcome["server"] = exc

    thread = threading.Thread(target=server)
    thread.start()
    assert ready.wait(30)
    address = f"127.0.0.1:{port['p']}"
    errors: list[Any] = []
    workers = [threading.Thread(target=lambda i=i: errors.append(_try(lambda: run_party(
        _umpc("service"), silos[i], load_credentials(certs, f"party-{i}"), address, rng=1,
        timeout=10)))) for i in range(3)]
    for w in workers:
        w.start()
    # The dealer runs another epsilon: refused at Join, naming the option that differs.
    with pytest.raises(NetworkRunError, match=r"dealer could not join: dealer's protocol "
                       r"configuration differs from the server's: epsilon = 2\.0 \(dealer\) "
                       r"vs 1\.0 \(server\)$"):
        run_service(_umpc("service", epsilon=2.0), "dealer",
                    load_credentials(certs, "dealer"), address, rng=1, timeout=10)
    for w in workers:
        w.join(30)
    thread.join(30)
    assert isinstance(outcome["server"], NetworkRunError)
    assert "dealer (refused: dealer's protocol configuration differs from the server's: " \
        "epsilon = 2.0 (dealer) vs 1.0 (server))" in str(outcome["server"])


def _try(call: Any) -> Any:
    try:
        return call()
    except Exception as exc:
        return exc


def test_deployment_shuffler_permutes_with_the_os_csprng() -> None:
    from fedustat.privacy.noise import DeploymentNoise
    proto = gs.GhaziShuffle(GINI, 1.0, k=4, n_parties=40, shuffler="service",
                            noise=DeploymentNoise())
    shares = np.arange(40 * 3 * 5, dtype=np.int64).reshape(40, 3, 5)
    inbox = Message(Role.PARTY, Role.PARTY, {"shares": shares, "from": np.arange(40)},
                    {"shares": 64, "from": 64}, np.full(40, 40))
    sid = proto.init_service("shuffler", 40)
    # The same seeded generator each time: were it used, both orders would be equal.
    outs = [proto.service_step("shuffler", sid, inbox, np.random.default_rng(0))[1]
            for _ in range(2)]
    flat = shares.reshape(-1, 5)
    mixed = [o.fields["messages"][0] for o in outs]
    for m in mixed:
        for col in range(5):
            assert sorted(m[:, col]) == sorted(flat[:, col])
    # Two independent orders of 120 messages agree with probability 1/120! per column.
    assert not np.array_equal(mixed[0], mixed[1])
    # Columns are permuted independently: the same order in all five columns would have
    # probability (1/120!)^4.
    ranks = np.argsort(mixed[0], axis=0)
    assert not all(np.array_equal(ranks[:, 0], ranks[:, c]) for c in range(1, 5))


@pytest.mark.parametrize("which", ["shuffler", "dealer"])
def test_unseeded_networked_services_use_deployment_randomness(certs: Any, which: str
                                                                ) -> None:
    from fedustat.privacy.noise import DeploymentNoise
    if which == "shuffler":
        data = np.random.default_rng(10).uniform(0, 1, 15)
        make = lambda: gs.GhaziShuffle(GINI, math.inf, k=4, n_parties=15,  # noqa: E731
                                       shuffler="service", noise=DeploymentNoise())
        exact = simulate(make(), data, rng=0).value
    else:
        data = _auc_data(15, 10)
        make = lambda: registry.make("pairs-2pc", auc_kernel(), epsilon=math.inf,  # noqa: E731
                                     all_pairs=True, dealer="service",
                                     noise=DeploymentNoise())
        exact = simulate(make(), data, rng=0).value
    run, parties, services = _deployment(certs, make, [data[:5], data[5:9], data[9:]],
                                         services=(which,), rng=None)
    assert not isinstance(run, Exception), run
    assert all(not isinstance(r, Exception) for r in [*parties, *services])
    # Noise-free: the OS-drawn shares, masks and shuffles change no number.
    assert run.estimate.value == exact


class _Crashing(gs.GhaziShuffle):
    """A shuffler that dies when the parties' messages reach it."""

    def service_step(self, role: str, state: Any, inbox: Message | None,
                     rng: np.random.Generator) -> tuple[Any, Message | None]:
        if inbox is not None and inbox.is_peer:
            raise RuntimeError("the shuffler's machine went down")
        return super().service_step(role, state, inbox, rng)


def test_a_service_that_stops_mid_run_is_named(certs: Any) -> None:
    data = np.random.default_rng(11).uniform(0, 1, 12)
    make = lambda: _Crashing(GINI, 1.0, k=4, n_parties=12, shuffler="service")  # noqa: E731
    run, parties, services = _deployment(certs, make, [data[:4], data[4:8], data[8:]],
                                         services=("shuffler",), timeout=30.0)
    assert isinstance(run, NetworkRunError)
    # Round 0 relayed the messages; the shuffler died in round 1: its connection dropped,
    # which stops the run at once (the reason is not the 30 s stage timeout).
    assert str(run) == ("round 1: the connection of shuffler dropped (its process ended "
                        "or its network failed); no release")
    assert isinstance(services[0], RuntimeError)
    assert all(isinstance(p, NetworkRunError) for p in parties)
