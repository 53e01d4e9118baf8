"""Secure sums that go on without parties silent before their contribution (issue 26).

ghazi-shuffle (each party adds a 1/h share of the discrete-Laplace noise) continues when
at least h = ``min_honest`` parties' messages arrived; ecdf-pointwise-secagg and ecdf-fss
(computing parties 0..m-1, distributed noise from contributors 0..K-1) continue when a
data party fell silent in the sharing round, if every computing party and at least
``min_honest`` contributors took part. Anywhere else the run stops saying which. The
simulator's ``dropouts=`` is checked against exact values (epsilon = inf) and against the
stated noise; networked runs (threads over gRPC with TLS, every wait bounded) equal the
simulator with the same dropouts.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import pytest

from fedustat.protocols import registry
from fedustat.protocols.base import Message, Protocol
from fedustat.protocols.ecdf.fss import FssECDF
from fedustat.protocols.ecdf.secagg import PointwiseECDF
from fedustat.protocols.ecdf.shared_noise import SUMMED, distributed_tree_noise
from fedustat.runtime.simulate import simulate, simulate_run
from fedustat.stats import gini_kernel

SEED = 5
GINI = gini_kernel((0.0, 1.0))
GRID = np.linspace(0.05, 0.95, 16)


def values(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(n)


def ghazi(**params: Any) -> Protocol:
    return registry.make("ghazi-shuffle", GINI, **{"epsilon": 1.0, "k": 8, **params})


# ------------------------------------------------------------------ ghazi-shuffle


@pytest.mark.parametrize("params", [{}, {"n_parties": 40}, {"shuffler": "service"}],
                         ids=["check-in", "n-given", "shuffler-service"])
def test_ghazi_shuffle_releases_over_the_parties_whose_messages_arrived(params):
    # Without noise the release is the U-statistic of the messages that arrived: the
    # same number as a run over the survivors' records alone (same grid, r from h).
    x = values(40)[:, None]
    silent = [3, 7, 11]
    sharing = 0 if "n_parties" in params else 1
    keep = np.setdiff1d(np.arange(40), silent)
    exact = dict(params, epsilon=math.inf, min_honest=30)
    got = simulate(ghazi(**exact), x, rng=SEED, batch_size=1, dropouts={sharing: silent})
    alone = {k: v for k, v in exact.items() if k != "n_parties"}
    assert got.value == pytest.approx(simulate(ghazi(**alone), x[keep], rng=SEED).value,
                                      abs=1e-12)
    # With noise: n' = 37 in the estimator, the noise's total Polya shape 37/30 (its
    # variance scales with it), the delta and h of the start, stated in the guarantee.
    noisy = dict(params, min_honest=30)
    full = simulate(ghazi(**noisy), x, rng=SEED, batch_size=1)
    run = simulate(ghazi(**noisy), x, rng=SEED, batch_size=1, dropouts={sharing: silent})
    assert run.diagnostics["noise_variance_vector"] == pytest.approx(
        full.diagnostics["noise_variance_vector"] * 37 / 40, rel=1e-12)
    assert run.privacy.delta == full.privacy.delta
    assert "at least 30 of the 37 noise contributors keep their noise secret" in str(
        run.privacy)
    assert run.diagnostics["min_honest"] == 30


def test_ghazi_shuffle_check_in_dropouts_set_n_and_keep_the_shuffler_id():
    # Two parties silent at the check-in: n = 38 for the grid, r and the noise; with a
    # shuffler service its id stays 40 (after the parties of the start), sent with the
    # setup only in that case.
    x = values(40)[:, None]
    for shuffler in ("server", "service"):
        run = simulate(ghazi(epsilon=math.inf, shuffler=shuffler), x, rng=SEED, batch_size=1,
                       dropouts={0: [3, 7]})
        keep = np.setdiff1d(np.arange(40), [3, 7])
        assert run.value == pytest.approx(
            simulate(ghazi(epsilon=math.inf), x[keep], rng=SEED).value, abs=1e-12)


def test_ghazi_shuffle_refusals_say_why():
    x = values(40)[:, None]
    with pytest.raises(ValueError, match=r"^only 29 of the 40 parties sent their messages, "
                                         r"fewer than min_honest = 30: each party adds a "
                                         r"1/30 share"):
        simulate(ghazi(min_honest=30), x, rng=SEED, batch_size=1,
                 dropouts={1: list(range(11))})
    with pytest.raises(ValueError, match=r"^round 1: parties \[3\] fell silent; ghazi-shuffle "
                                         r"cannot go on without them: each party adds a 1/n "
                                         r"share .* set min_honest below n"):
        simulate(ghazi(), x, rng=SEED, batch_size=1, dropouts={1: [3]})
    with pytest.raises(ValueError, match=r"^round 2: .* already in the shuffler's multiset"):
        simulate(ghazi(min_honest=30, shuffler="service"), x, rng=SEED, batch_size=1,
                 dropouts={2: [3]})
    with pytest.raises(ValueError, match=r"^only 28 parties checked in, fewer than "
                                         r"min_honest = 30"):
        simulate(ghazi(min_honest=30), x, rng=SEED, batch_size=1,
                 dropouts={0: list(range(12))})


def test_ghazi_shuffle_declares_its_rounds():
    p = ghazi(min_honest=30)
    state = p.init_server(40)
    assert [p.dropout_rule(state, r).proceed for r in range(3)] == [True, True, False]
    fixed = ghazi(min_honest=30, n_parties=40)
    assert [fixed.dropout_rule(fixed.init_server(40), r).proceed for r in range(2)] == [
        True, False]
    assert not ghazi().dropout_rule(state, 1).proceed


# ------------------------------------------------------------------ federated ECDFs

ECDFS = [PointwiseECDF, FssECDF]


def ecdf(cls: type, **params: Any) -> Protocol:
    return cls(GRID, **{"epsilon": 1.0, "randomness": "simulation", **params})


def exact_mean(x: np.ndarray, points: np.ndarray) -> float:
    return float(np.mean([(x <= t).mean() for t in GRID[points]]))


@pytest.mark.parametrize("cls", ECDFS, ids=["secagg", "fss"])
@pytest.mark.parametrize("query", [None, [2, 5, 9]], ids=["hierarchical", "003-tree"])
def test_ecdf_sums_the_rows_that_arrived(cls, query):
    x = values(30)
    silent = [3, 7, 11]
    keep = np.setdiff1d(np.arange(30), silent)
    points = np.arange(GRID.size) if query is None else np.asarray(query)
    run = simulate(ecdf(cls, query=query, epsilon=math.inf), x, rng=SEED, batch_size=1,
                   dropouts={0: silent})
    assert run.value == pytest.approx(exact_mean(x[keep], points), abs=1e-12)
    assert run.diagnostics["parties_summed"] == 27
    # Distributed noise from 6 contributors (h = 2): contributor 3 is silent, so the
    # noise law and the guarantee count the 5 that took part.
    noisy = simulate(ecdf(cls, query=query, contributors=6, min_honest=2), x, rng=SEED,
                     batch_size=1, dropouts={0: silent})
    curve = noisy.diagnostics["curve"]
    assert curve.n == 27
    assert noisy.diagnostics["noise_contributors"] == 5
    assert "at least 2 of the 5 noise contributors keep their noise secret" in str(
        noisy.privacy)
    full = simulate(ecdf(cls, query=query, contributors=6, min_honest=2), x, rng=SEED,
                    batch_size=1)
    assert full.diagnostics["noise_contributors"] == 6
    # Node variance: total Polya shape K'/h = 5/2 against 6/2.
    assert curve.node_variance == pytest.approx(
        full.diagnostics["curve"].node_variance * 5 / 6, rel=1e-12)
    # Without a dropout nothing changes: no mask travels, the bits are those of before.
    assert "parties_summed" not in full.diagnostics


@pytest.mark.parametrize("cls", ECDFS, ids=["secagg", "fss"])
def test_ecdf_refusals_say_which(cls):
    x = values(30)
    with pytest.raises(ValueError, match=r"^computing party 1 fell silent: it holds a share "
                                         r"of every count, which the others cannot open "
                                         r"without it$"):
        simulate(ecdf(cls), x, rng=SEED, batch_size=1, dropouts={0: [1]})
    with pytest.raises(ValueError, match=r"^only 2 of the 6 noise contributors \(parties "
                                         r"0\.\.5\) took part, fewer than min_honest = 3: "
                                         r"their noise is less than the guarantee needs; the "
                                         r"computing parties withheld their sums"):
        simulate(ecdf(cls, contributors=6, min_honest=3), x, rng=SEED, batch_size=1,
                 dropouts={0: [2, 3, 4, 5]})
    with pytest.raises(ValueError, match=r"^round 1: parties \[9\] fell silent; "
                                         rf"{cls.name} cannot go on without them: after the"):
        simulate(ecdf(cls), x, rng=SEED, batch_size=1, dropouts={1: [9]})
    held = distributed_tree_noise(GRID.size, 1.0, rng=1)
    rule = ecdf(cls, query=[2, 5], noise=held).dropout_rule(None, 0)
    assert not rule.proceed and "same parties only" in rule.reason


@pytest.mark.parametrize("cls", ECDFS, ids=["secagg", "fss"])
def test_withheld_sums_reveal_nothing(cls):
    # Too few contributors: the computing parties upload zeros (and the mask), so the
    # querier, who refuses, holds nothing it could open.
    uploads: list[Message] = []

    def spy(message: Message) -> Message:
        if SUMMED in message.fields and len(message.parties):
            uploads.append(message)
        return message

    with pytest.raises(ValueError, match="withheld"):
        simulate_run(ecdf(cls, contributors=6, min_honest=3), values(30), rng=SEED,
                     batch_size=1, dropouts={0: [2, 3, 4, 5]}, relay=spy)
    assert [int(np.asarray(m.parties)[0]) for m in uploads] == [0, 1]
    for m in uploads:
        assert not np.any(np.asarray(m.fields["sums"]))
        assert np.asarray(m.fields[SUMMED]).sum() == 26


@pytest.mark.parametrize("cls", ECDFS, ids=["secagg", "fss"])
def test_survivors_noise_is_unbiased_with_the_variance_of_k_prime_parts(cls):
    # K = 3 contributors (parties 0..2), h = 1; contributor 2 falls silent in the sharing
    # round, so each node's noise is K' = 2 parts Polya(1, t) - Polya(1, t), each a
    # discrete Laplace t^|k| (c = 0, t = exp(-1/b)), and a point sums L + 1 nodes.
    x = np.floor(values(12, seed=4) * 16) / 16
    point = 7
    keep = np.setdiff1d(np.arange(12), [2])
    exact = float(np.sum(x[keep] <= GRID[point]))
    protocol = ecdf(cls, query=[point], contributors=3)
    runs = 400
    curves = [simulate(protocol, x, rng=s, batch_size=4, dropouts={0: [2]})
              .diagnostics["curve"] for s in range(runs)]
    errors = np.array([c.counts[0] - exact for c in curves])
    first = curves[0]
    assert first.n == 11
    t = math.exp(-1.0 / first.scale)
    k = np.arange(-4000, 4001, dtype=np.float64)
    pmf = t ** np.abs(k) * (1 - t) / (1 + t)
    s2, m4 = float(np.sum(pmf * k**2)), float(np.sum(pmf * k**4))
    parts, nodes = 2, first.tree.n_levels
    assert first.node_variance == pytest.approx(parts * s2, rel=1e-9)
    # Moments of sums of i.i.d. zero-mean terms: E S^4 = k m4 + 3 k (k - 1) sigma^4.
    v_node, m4_node = parts * s2, parts * m4 + 3 * parts * (parts - 1) * s2**2
    var = nodes * v_node
    mu4 = nodes * m4_node + 3 * nodes * (nodes - 1) * v_node**2
    # Mean within 5 standard errors; the sample variance within 5 of its standard errors.
    assert abs(errors.mean()) < 5 * math.sqrt(var / runs)
    assert abs(errors.var(ddof=1) - var) < 5 * math.sqrt((mu4 - var**2) / runs)
    # Three parts (no dropout) would be 3/2 of it: the test tells them apart.
    assert 3 * nodes * s2 - var > 5 * math.sqrt((mu4 - var**2) / runs)


# ------------------------------------------------------------------ networked

grpc = pytest.importorskip("grpc")

from fedustat.runtime.network.certs import create_deployment, load_credentials  # noqa: E402
from fedustat.runtime.network.party import run_party, run_service  # noqa: E402
from fedustat.runtime.network.server import serve  # noqa: E402
from fedustat.runtime.network.service import NetworkRunError  # noqa: E402


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return create_deployment(tmp_path_factory.mktemp("certs"), 3, extra_roles=("shuffler",))


def silent_in(protocol: Protocol, round_index: int, seconds: float) -> Protocol:
    """``protocol`` whose party step holds its message of round ``round_index`` back for
    ``seconds``, as a silo that falls silent would (configuration unchanged).

    Attributes of the instance only (the class is part of the configuration). The ECDF
    protocols' ``configure`` copies the protocol for the run's n: the copy is held too.
    """
    calls = [0]

    def hold(target: Protocol) -> Protocol:
        step = type(target).party_step

        def held(state: Any, inbox: Any, rng: Any) -> Any:
            out = step(target, state, inbox, rng)
            if calls[0] == round_index:
                threading.Event().wait(seconds)
            calls[0] += 1
            return out

        target.party_step = held  # type: ignore[method-assign]
        return target

    configure = type(protocol).configure
    protocol.configure = lambda n_rows: hold(configure(protocol, n_rows))  # type: ignore
    return hold(protocol)


def deployment(certs: Any, make: Any, silos: list[np.ndarray], *, silent: int,
               round_index: int, timeout: float, services: tuple[str, ...] = ()
               ) -> tuple[Any, list[Any]]:
    """Server (``min_silos = 2``), silos and services in threads; silo ``silent`` holds
    back its round ``round_index``. Every wait is bounded."""
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            outcome["server"] = serve(make(), len(silos), load_credentials(certs, "server"),
                                      rng=SEED, timeout=timeout, min_silos=2,
                                      on_ready=lambda p: (port.update(p=p), ready.set()))
        except Exception as exc:  # the test inspects it
            outcome["server"] = exc
            ready.set()

    results: list[Any] = [None] * (len(silos) + len(services))

    def party(i: int) -> None:
        protocol = silent_in(make(), round_index, 3 * timeout) if i == silent else make()
        try:
            results[i] = run_party(protocol, silos[i], load_credentials(certs, f"party-{i}"),
                                   f"127.0.0.1:{port['p']}", rng=SEED, timeout=timeout)
        except Exception as exc:
            results[i] = exc

    def service(j: int, role: str) -> None:
        try:
            results[len(silos) + j] = run_service(make(), role, load_credentials(certs, role),
                                                  f"127.0.0.1:{port['p']}", rng=SEED,
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
        t.join(8 * timeout)
    main.join(4 * timeout)
    assert not main.is_alive(), "the server must never hang"
    return outcome["server"], results


@pytest.mark.parametrize("shuffler", ["server", "service"])
def test_networked_ghazi_shuffle_goes_on_without_a_silo_silent_in_the_sharing(
        certs, shuffler):
    x = values(36)[:, None]
    silos = np.array_split(x, 3)

    def make() -> Protocol:
        return ghazi(min_honest=20, shuffler=shuffler)

    services = ("shuffler",) if shuffler == "service" else ()
    server, results = deployment(certs, make, silos, silent=1, round_index=1, timeout=1.5,
                                 services=services)
    assert not isinstance(server, Exception), server
    assert (server.dropped, server.n_parties) == (["party-1"], 24)
    expected = simulate(make(), x, rng=SEED, batch_size=[12, 12, 12],
                        dropouts={1: list(range(12, 24))})
    assert server.estimate.value == expected.value
    assert server.estimate.std_error == expected.std_error
    assert str(server.estimate.privacy) == str(expected.privacy)
    assert "at least 20 of the 24 noise contributors" in str(server.estimate.privacy)
    assert server.estimate.diagnostics["dropout"]["rule"].startswith("each party adds a 1/h")
    assert [results[i].release["value"] for i in (0, 2)] == [expected.value] * 2


def test_networked_ghazi_shuffle_stops_below_min_honest(certs):
    silos = np.array_split(values(36)[:, None], 3)
    server, _ = deployment(certs, lambda: ghazi(min_honest=30), silos, silent=1,
                           round_index=1, timeout=1.5)
    assert isinstance(server, NetworkRunError)
    assert str(server) == (
        "round 1: the server step refused the parties' messages: only 24 of the 36 parties "
        "sent their messages, fewer than min_honest = 30: each party adds a 1/30 share of "
        "the discrete-Laplace noise, so the survivors' noise would be less than the "
        "guarantee needs; no release")


@pytest.mark.parametrize("cls", ECDFS, ids=["secagg", "fss"])
def test_networked_ecdf_goes_on_without_a_data_silo_silent_in_the_sharing(certs, cls):
    x = values(24)
    silos = np.array_split(x, 3)

    def make() -> Protocol:
        return ecdf(cls, contributors=10, min_honest=2, randomness=None)

    server, results = deployment(certs, make, silos, silent=1, round_index=0, timeout=1.5)
    assert not isinstance(server, Exception), server
    assert (server.dropped, server.n_parties) == (["party-1"], 16)
    expected = simulate(make(), x, rng=SEED, batch_size=[8, 8, 8],
                        dropouts={0: list(range(8, 16))})
    assert server.estimate.value == expected.value
    assert server.estimate.std_error == expected.std_error
    assert server.estimate.diagnostics["parties_summed"] == 16
    assert "at least 2 of the 8 noise contributors" in str(server.estimate.privacy)
    assert [results[i].release["value"] for i in (0, 2)] == [expected.value] * 2


@pytest.mark.parametrize("cls", ECDFS, ids=["secagg", "fss"])
def test_networked_ecdf_stops_without_its_computing_parties(certs, cls):
    silos = np.array_split(values(24), 3)
    server, _ = deployment(certs, lambda: ecdf(cls, randomness=None), silos, silent=0,
                           round_index=0, timeout=1.5)
    assert isinstance(server, NetworkRunError)
    # The default is the hierarchical tree with the contributors' noise round (round 1):
    # the upload is round 2.
    assert str(server) == (
        "round 2: the server step refused the parties' messages: computing party 0, 1 fell "
        "silent: it holds a share of every count, which the others cannot open without it; "
        "no release")
