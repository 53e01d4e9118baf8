"""Parties that fall silent during a networked run (issue 13, point 6).

A round goes on without silent silos only where ``min_silos`` allows it and the protocol
declares that its server step may run on the rows that arrived
(``Protocol.dropout_rule``): the release then states the n it used and who dropped, and
equals the simulator run on the remaining silos. Anywhere else the run stops naming the
silent parties and saying why. Server and parties run in threads over real gRPC with
TLS; every wait is bounded (the deployment helper fails a server that hangs).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")

from fedustat.protocols import registry
from fedustat.protocols.base import Message, Protocol, Role
from fedustat.runtime.network.certs import create_deployment, load_credentials
from fedustat.runtime.network.party import run_party, run_service
from fedustat.runtime.network.server import serve
from fedustat.runtime.network.service import NetworkRunError, party_deadline
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, gini_kernel, kendall_tau_kernel
from fedustat.stats.designs import uniform_sample
from network_deployment import run_deployment

SEED = 5
GINI = gini_kernel((0.0, 1.0))


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return create_deployment(tmp_path_factory.mktemp("certs"), 3)


def labelled(n: int, seed: int = 0, integer: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 16, n).astype(float) if integer else rng.random(n)
    return np.column_stack([scores, (rng.random(n) < 0.4).astype(float)])


def silent_in(protocol: Protocol, round_index: int, seconds: float,
              before: Any = None) -> Protocol:
    """``protocol`` whose party step holds its message of round ``round_index`` back for
    ``seconds`` (after ``before()`` if given), as a silo that falls silent would.

    The step is replaced on the instance only: the public configuration, hence the
    fingerprint the server checks, is unchanged.
    """
    step = protocol.party_step
    calls = [0]

    def held(state: Any, inbox: Any, rng: Any) -> Any:
        out = step(state, inbox, rng)
        if calls[0] == round_index:
            if before is not None:
                before()
            time.sleep(seconds)
        calls[0] += 1
        return out

    protocol.party_step = held  # type: ignore[method-assign]
    return protocol


# ------------------------------------------------------------------ continue


ONE_SHOT = [
    ("ldp-quantized", GINI, {"k": 8}, False),
    ("ldp-quantized", auc_kernel(), {"k": 8, "bounds": (0.0, 1.0)}, False),
    ("ldp-tree", auc_kernel(), {"d": 16}, True),
    ("ldp-ghazi", GINI, {"k": 8}, False),
    ("central-laplace", auc_kernel(), {}, False),
]


@pytest.mark.parametrize(("name", "kernel", "params", "integer"), ONE_SHOT,
                         ids=[f"{s[0]}-{s[1].name}" for s in ONE_SHOT])
def test_a_silo_silent_in_the_report_round_is_left_out(certs, name, kernel, params, integer):
    data = labelled(60, integer=integer)
    if kernel is GINI:
        data = data[:, :1]
    silos = np.array_split(data, 3)

    def make() -> Protocol:
        return registry.make(name, kernel, epsilon=1.0, **params)

    timeout = 1.5
    server, parties = run_deployment(
        certs, make, silos, min_silos=2, timeout=timeout,
        party_make=lambda i: silent_in(make(), 0, 3 * timeout) if i == 1 else make())
    assert not isinstance(server, Exception), server
    assert (server.parties, server.dropped, server.absent, server.n_parties) == (
        ["party-0", "party-2"], ["party-1"], [], 40)
    # The release over the silos that answered: the simulator on their rows with the
    # same seed (silo 1's stream is skipped, not reused) gives the same number.
    present = np.concatenate([silos[0], silos[2]])
    expected = simulate(make(), present, rng=SEED, batch_size=[20, 0, 20])
    assert server.estimate.value == expected.value
    assert server.estimate.std_error == expected.std_error
    dropout = server.estimate.diagnostics["dropout"]
    assert (dropout["n_parties"], dropout["silos"], dropout["dropped"]) == (
        40, 2, {"party-1": 0})
    for i in (0, 2):
        assert not isinstance(parties[i], Exception), parties[i]
        assert parties[i].release["value"] == expected.value
        assert (parties[i].release["n_parties"], parties[i].release["silos"],
                parties[i].release["dropped"]) == (40, 2, ["party-1"])
    # The silent silo's late frame finds the server gone or is refused: no release.
    assert isinstance(parties[1], NetworkRunError) and "party-1" in str(parties[1])


def test_a_silo_silent_in_the_check_in_round_is_out_for_good(certs):
    # Without k the parties check in first (k from n, 000 Corollary 1). party-1 sends its
    # check-in only once the others have moved on: the server refuses that late frame,
    # and k and the estimate come from the two silos that answered.
    silos = np.array_split(labelled(60)[:, :1], 3)
    moved_on = threading.Event()

    def make() -> Protocol:
        return registry.make("ldp-quantized", GINI, epsilon=1.0)

    timeout = 3.0

    def party_make(i: int) -> Protocol:
        if i == 1:  # silent until party-0 has the server's round-0 reply, then late
            return silent_in(make(), 0, 0.0, before=lambda: moved_on.wait(4 * timeout))
        if i == 0:  # holds its report back so the run still waits when party-1 is late
            return silent_in(make(), 1, 0.6 * timeout, before=moved_on.set)
        return make()

    server, parties = run_deployment(certs, make, silos, min_silos=2, timeout=timeout,
                                     party_make=party_make)
    assert not isinstance(server, Exception), server
    assert server.dropped == ["party-1"] and server.n_parties == 40
    assert str(parties[1]) == ("party-1, round 0: party-1 dropped out of this run in round "
                               "0 (no answer in time); its rows are not used")
    expected = simulate(make(), np.concatenate([silos[0], silos[2]]), rng=SEED,
                        batch_size=[20, 0, 20])
    assert server.estimate.value == expected.value
    assert server.estimate.diagnostics["k"] == expected.diagnostics["k"]


def deploy(certs: Any, make: Any, plan: list[tuple[int, np.ndarray, Protocol, float, float]],
           *, timeout: float, min_silos: int | None = None, n_silos: int = 3
           ) -> tuple[Any, list[Any]]:
    """Server and parties in threads; ``plan`` holds per party (identity, rows, protocol,
    its own deadline per answer, seconds before it starts). Every thread is bounded."""
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            outcome["server"] = serve(make(), n_silos, load_credentials(certs, "server"),
                                      rng=SEED, timeout=timeout, min_silos=min_silos,
                                      on_ready=lambda p: (port.update(p=p), ready.set()))
        except Exception as exc:  # inspected by the test
            outcome["server"] = exc
            ready.set()

    results: list[Any] = [None] * len(plan)

    def party(i: int) -> None:
        identity, rows, protocol, deadline, delay = plan[i]
        time.sleep(delay)
        try:
            results[i] = run_party(protocol, rows, load_credentials(certs, f"party-{identity}"),
                                   f"127.0.0.1:{port['p']}", rng=SEED, timeout=deadline)
        except Exception as exc:
            results[i] = exc

    thread = threading.Thread(target=server)
    thread.start()
    assert ready.wait(30)
    threads = [threading.Thread(target=party, args=(i,)) for i in range(len(plan))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * timeout)
    thread.join(2 * timeout)
    assert not thread.is_alive(), "the server must never hang"
    return outcome["server"], results


def test_a_closed_connection_does_not_wait_for_the_timeout(certs):
    # party-2 sends its check-in and gives up waiting for the reply (given a 1 s stage
    # timeout, it waits party_deadline(1) = 2.25 s) while party-0 is slow: its call
    # ends, the server marks it gone, and the report round goes on without it at once
    # instead of after the 30 s timeout.
    silos = np.array_split(labelled(60)[:, :1], 3)

    def make() -> Protocol:
        return registry.make("ldp-quantized", GINI, epsilon=1.0)

    timeout = 30.0
    run, results = deploy(certs, make, [(0, silos[0], silent_in(make(), 0, 4.0), timeout, 0),
                                        (1, silos[1], make(), timeout, 0),
                                        (2, silos[2], make(), 1.0, 0)],
                          timeout=timeout, min_silos=2)
    assert not isinstance(run, Exception), run
    assert run.seconds < timeout / 2
    assert run.dropped == ["party-2"] and run.n_parties == 40
    assert f"did not answer within {party_deadline(1.0):g} s" in str(results[2])
    # party-2 checked in (k was chosen with n = 60) but sent no report: the release is
    # the estimator over the 40 reports on that grid, i.e. the simulator with k fixed
    # from n = 60 on the two silos' rows.
    fixed = registry.make("ldp-quantized", GINI, epsilon=1.0, n_parties=60)
    expected = simulate(fixed, np.concatenate(silos[:2]), rng=SEED, batch_size=[20, 20, 0])
    assert run.estimate.value == expected.value
    assert run.estimate.diagnostics["k"] == expected.diagnostics["k"]
    assert [r.release["n_parties"] for r in results[:2]] == [40, 40]


def test_a_party_restarted_before_the_start_takes_its_place(certs):
    # party-1's first process gives up while waiting for party-2 (given a 1 s stage
    # timeout it waits party_deadline(1) = 2.25 s): it had contributed nothing, so its
    # restarted process joins in its place and the release is the full run's, for a
    # secure protocol too.
    data = labelled(45)
    silos = np.array_split(data, 3)

    def make() -> Protocol:
        return registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2)

    run, results = deploy(certs, make, [(0, silos[0], make(), 30.0, 0),
                                        (1, silos[1], make(), 1.0, 0),
                                        (1, silos[1], make(), 30.0, 5.0),
                                        (2, silos[2], make(), 30.0, 6.0)], timeout=30.0)
    assert not isinstance(run, Exception), run
    assert "party-1 could not join" in str(results[1])
    assert (run.parties, run.absent, run.dropped) == (["party-0", "party-1", "party-2"],
                                                      [], [])
    expected = simulate(make(), data, rng=SEED, batch_size=[15, 15, 15])
    assert run.estimate.value == expected.value
    assert run.seconds < 20.0  # the 30 s joining stage was not waited out


def test_a_party_that_left_before_the_start_is_absent_at_once(certs):
    # With min_silos, a silo that joined and left before the start is treated as never
    # joined as soon as everyone else is in: no 30 s wait, and it is named absent.
    data = labelled(45)
    silos = np.array_split(data, 3)

    def make() -> Protocol:
        return registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2)

    # party-1 gives up after party_deadline(1) = 2.25 s, before party-2 arrives.
    run, _ = deploy(certs, make, [(0, silos[0], make(), 30.0, 0),
                                  (1, silos[1], make(), 1.0, 0),
                                  (2, silos[2], make(), 30.0, 5.0)],
                    timeout=30.0, min_silos=2)
    assert not isinstance(run, Exception), run
    assert (run.absent, run.dropped, run.n_parties) == (["party-1"], [], 30)
    expected = simulate(make(), np.concatenate([silos[0], silos[2]]), rng=SEED,
                        batch_size=[15, 0, 15])
    assert run.estimate.value == expected.value
    assert run.seconds < 20.0  # the 30 s joining stage was not waited out


FEDAUC_VARIANTS = ["fedauc-rr", "fedauc-laplace-local", "fedauc-adaptive"]


@pytest.mark.parametrize("name", FEDAUC_VARIANTS)
def test_fedauc_goes_on_without_a_client_silent_in_the_score_round(certs, name):
    # Each silo is one client. party-1 holds its scores back: the server ranks the 40
    # scores of party-0 and party-2 and the run is FedAUC over those two clients,
    # renumbered 0 and 1. The same seed gives the simulator's release over their rows
    # with party-1's batch empty (its random stream skipped, not reused).
    silos = np.array_split(labelled(60, seed=2), 3)

    def make() -> Protocol:
        return registry.make(name, auc_kernel(), epsilon=1.0)

    timeout = 1.5
    server, parties = run_deployment(
        certs, make, silos, min_silos=2, timeout=timeout,
        party_make=lambda i: silent_in(make(), 0, 3 * timeout) if i == 1 else make())
    assert not isinstance(server, Exception), server
    assert (server.parties, server.dropped, server.n_parties) == (
        ["party-0", "party-2"], ["party-1"], 2)
    present = np.concatenate([silos[0], silos[2]])
    client = np.repeat([0, 1], [silos[0].shape[0], silos[2].shape[0]])
    expected = simulate(make(), present, rng=SEED, parties=client, batch_size=[1, 0, 1])
    assert server.estimate.value == expected.value
    assert server.estimate.std_error == expected.std_error
    for key in ("n_samples", "n_clients", "global_sum", "noisy_pos", "noisy_neg"):
        assert server.estimate.diagnostics[key] == expected.diagnostics[key], key
    assert (server.estimate.diagnostics["n_samples"],
            server.estimate.diagnostics["n_clients"]) == (40, 2)
    rule = server.estimate.diagnostics["dropout"]["rule"]
    assert rule.startswith("the server ranks the scores that arrived")
    assert [parties[i].release["value"] for i in (0, 2)] == [expected.value] * 2
    assert isinstance(parties[1], NetworkRunError) and "party-1" in str(parties[1])


def test_fedauc_global_keeps_the_bound_of_the_start_without_a_client(certs):
    # GlobalLaplace's clients calibrate localSum's noise to M - 1 (004 App. N) with the M
    # fixed at the start (60): no message tells them the survivors' M' = 40, and M - 1
    # bounds every rank among the survivors. The server's noise variances use the same
    # bound, so the error bar is that of the noise actually added.
    silos = np.array_split(labelled(60, seed=2), 3)

    def make() -> Protocol:
        return registry.make("fedauc-laplace-global", auc_kernel(), epsilon=1.0)

    timeout = 1.5
    server, _ = run_deployment(
        certs, make, silos, min_silos=2, timeout=timeout,
        party_make=lambda i: silent_in(make(), 0, 3 * timeout) if i == 1 else make())
    assert not isinstance(server, Exception), server
    diagnostics = server.estimate.diagnostics
    assert (diagnostics["n_samples"], diagnostics["n_clients"]) == (40, 2)
    # Two clients, alpha = 1/2: localSum's noise Lap((M - 1) / (eps / 2)), variance 2 b^2.
    assert diagnostics["sum_noise_var"] == pytest.approx(2 * 2 * (59 / 0.5) ** 2)
    assert "M - 1 for the public M fixed at the start" in diagnostics["dropout"]["rule"]


def test_pairs_2pc_goes_on_without_a_party_silent_before_the_sharing(certs):
    # Silo 1 (15 parties) joins but sends nothing in round 0 (joins and public labels):
    # the aggregator draws the permutations and the dealers over the 30 parties that
    # joined, renumbered in id order, and no row is ever addressed to silo 1. The same
    # seed gives the simulator's release over their rows with silo 1's batch empty.
    silos = np.array_split(labelled(45, seed=4), 3)

    def make() -> Protocol:
        return registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2)

    timeout = 3.0
    server, parties = run_deployment(
        certs, make, silos, min_silos=2, timeout=timeout,
        party_make=lambda i: silent_in(make(), 0, 3 * timeout) if i == 1 else make())
    assert not isinstance(server, Exception), server
    assert (server.parties, server.dropped, server.n_parties) == (
        ["party-0", "party-2"], ["party-1"], 30)
    expected = simulate(make(), np.concatenate([silos[0], silos[2]]), rng=SEED,
                        batch_size=[15, 0, 15])
    assert server.estimate.value == expected.value
    assert server.estimate.std_error == expected.std_error
    assert server.estimate.diagnostics["n_pairs"] == expected.diagnostics["n_pairs"] == 30
    assert np.array_equal(server.estimate.diagnostics["design"].tuples,
                          expected.diagnostics["design"].tuples)
    assert server.estimate.diagnostics["dropout"]["rule"].startswith("no share has been")
    assert [parties[i].release["value"] for i in (0, 2)] == [expected.value] * 2
    assert isinstance(parties[1], NetworkRunError) and "party-1" in str(parties[1])


def graded(n: int, seed: int) -> np.ndarray:
    """(x, y, label) on a coarse grid, exact in fixed point, with ties and both labels."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 8, n) / 8
    y = np.clip(x + rng.integers(-2, 3, n) / 8, 0, 1)
    labels = (np.arange(n) % 3 == 0).astype(float)
    return np.column_stack([x, y, labels])


UMPC_CASES = [
    # Public labels addressed party by party (each row with the mask of who is present).
    ("auc", {"threat_model": "dis"}),
    # A broadcast of the coin; M_HF noise from a subgroup Z drawn over those present.
    ("kendall", {"threat_model": "hf", "f_honest": 0.8}),
]


@pytest.mark.parametrize(("statistic", "params"), UMPC_CASES, ids=[c[0] for c in UMPC_CASES])
def test_umpc_goes_on_without_a_party_silent_before_the_sharing(certs, statistic, params):
    # Silo 1 (6 parties) checks in late: the aggregator draws the public coin over the
    # 12 parties present, renumbered, and tells them who is present; design, dealers and
    # Z follow from the coin over them. The same seed gives the simulator's release over
    # their rows with silo 1's batch empty.
    rows = graded(18, seed=6)
    data = rows[:, [0, 2]] if statistic == "auc" else rows[:, :2]
    kernel = auc_kernel() if statistic == "auc" else kendall_tau_kernel("a")
    silos = np.array_split(data, 3)

    def make() -> Protocol:
        return registry.make("umpc", kernel, epsilon=1.0, comparison="fss",
                             bounds=(0.0, 4.0), precision=1 / 8, **params)

    timeout = 4.0
    server, parties = run_deployment(
        certs, make, silos, min_silos=2, timeout=timeout,
        party_make=lambda i: silent_in(make(), 0, 3 * timeout) if i == 1 else make())
    assert not isinstance(server, Exception), server
    assert (server.parties, server.dropped, server.n_parties) == (
        ["party-0", "party-2"], ["party-1"], 12)
    expected = simulate(make(), np.concatenate([silos[0], silos[2]]), rng=SEED,
                        batch_size=[6, 0, 6])
    assert server.estimate.value == expected.value
    assert server.estimate.std_error == expected.std_error
    assert server.estimate.diagnostics["public_coin"] == expected.diagnostics["public_coin"]
    assert server.estimate.diagnostics["dropout"]["rule"].startswith("no share has been")
    assert [parties[i].release["value"] for i in (0, 2)] == [expected.value] * 2


def test_umpc_stops_when_a_party_falls_silent_in_the_circuit(certs):
    # party-2 holds back its rows of the sharing round (round 2): its co-members need
    # them, so the run stops naming the round and why.
    data = graded(18, seed=6)[:, :2]
    silos = np.array_split(data, 3)

    def make() -> Protocol:
        return registry.make("umpc", kendall_tau_kernel("a"), epsilon=1.0,
                             comparison="fss", bounds=(0.0, 4.0), precision=1 / 8,
                             threat_model="hf", f_honest=0.8)

    server, _ = run_deployment(
        certs, make, silos, min_silos=2, timeout=1.5,
        party_make=lambda i: silent_in(make(), 2, 4.5) if i == 2 else make())
    assert isinstance(server, NetworkRunError)
    assert str(server).startswith("round 2: no answer within 1.5 s from party-2; umpc cannot "
                                  "go on without it: the secure phases are under way (002 "
                                  "Protocol 3.1"), server
    assert str(server).endswith("so without the silent party there is no unbiased release; "
                                "no release")


@pytest.fixture(scope="module")
def dealer_certs(tmp_path_factory):
    return create_deployment(tmp_path_factory.mktemp("dealer-certs"), 3,
                             extra_roles=("dealer",))


def with_dealer_service(certs: Any, make: Any, silos: list[np.ndarray], silent: int,
                        timeout: float) -> tuple[Any, list[Any]]:
    """Server, silos and a dealer service in threads; silo ``silent`` holds its round-0
    message back past the stage. Every thread is bounded."""
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            outcome["server"] = serve(make(), len(silos), load_credentials(certs, "server"),
                                      rng=SEED, timeout=timeout, min_silos=len(silos) - 1,
                                      on_ready=lambda p: (port.update(p=p), ready.set()))
        except Exception as exc:  # inspected by the test
            outcome["server"] = exc
            ready.set()

    results: list[Any] = [None] * (len(silos) + 1)

    def party(i: int) -> None:
        protocol = silent_in(make(), 0, 3 * timeout) if i == silent else make()
        try:
            results[i] = run_party(protocol, silos[i], load_credentials(certs, f"party-{i}"),
                                   f"127.0.0.1:{port['p']}", rng=SEED, timeout=timeout)
        except Exception as exc:
            results[i] = exc

    def dealer() -> None:
        try:
            results[-1] = run_service(make(), "dealer", load_credentials(certs, "dealer"),
                                      f"127.0.0.1:{port['p']}", rng=SEED, timeout=timeout)
        except Exception as exc:
            results[-1] = exc

    main = threading.Thread(target=server)
    main.start()
    assert ready.wait(30)
    threads = [threading.Thread(target=party, args=(i,)) for i in range(len(silos))]
    threads.append(threading.Thread(target=dealer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(6 * timeout)
    main.join(4 * timeout)
    assert not main.is_alive(), "the server must never hang"
    return outcome["server"], results


DEALER_SERVICE = [
    ("pairs-2pc", {"P": 2}),
    ("umpc", {"comparison": "fss", "bounds": (0.0, 1.0), "precision": 1 / 8,
              "threat_model": "hf", "f_honest": 0.8}),
]


@pytest.mark.parametrize(("name", "params"), DEALER_SERVICE, ids=[c[0] for c in DEALER_SERVICE])
def test_a_dealer_service_serves_the_parties_present(dealer_certs, name, params):
    # The dealer service's id follows the 3 silos' 18 parties of the start (18) while the
    # run goes on over 12: the protocol translates between the two, and the release is
    # the simulator's over the 12 with the silent silo's batch empty.
    rows = graded(18, seed=7)
    data = rows[:, [0, 2]]
    silos = np.array_split(data, 3)

    def make() -> Protocol:
        return registry.make(name, auc_kernel(), epsilon=1.0, dealer="service", **params)

    server, results = with_dealer_service(dealer_certs, make, silos, silent=1, timeout=4.0)
    assert not isinstance(server, Exception), server
    assert (server.dropped, server.n_parties) == (["party-1"], 12)
    expected = simulate(make(), np.concatenate([silos[0], silos[2]]), rng=SEED,
                        batch_size=[6, 0, 6])
    assert server.estimate.value == expected.value
    assert server.estimate.std_error == expected.std_error
    assert results[-1].service_id == 18


# ------------------------------------------------------------------ stop


def test_fedauc_stops_when_a_client_drops_after_the_ranking(certs):
    silos = np.array_split(labelled(60), 3)

    def make() -> Protocol:
        return registry.make("fedauc-rr", auc_kernel(), epsilon=1.0, n_clients=3)

    server, parties = run_deployment(
        certs, make, silos, min_silos=2, timeout=1.5,
        party_make=lambda i: silent_in(make(), 1, 4.5) if i == 1 else make())
    assert isinstance(server, NetworkRunError)
    assert str(server) == (
        "round 1: no answer within 1.5 s from party-1; fedauc-rr cannot go on without it: "
        "the ranks include the silent client's scores, so the other clients' rank sums "
        "would give a biased AUC; no release")
    assert all(isinstance(p, NetworkRunError) for p in parties)
    assert "party-1" in str(parties[0]) and "party-1" in str(parties[2])


PAIRS_STOPS = [
    # party-2's first peer rows are its deals (round 1): the pairs it deals for and its
    # own pairs need them.
    (1, "round 1: no answer within 1.5 s from party-2; pairs-2pc cannot go on without it: "
        "round 1 deals each pair's correlated randomness: the silent party's packages (as "
        "a dealer) and its own pairs are needed by both members of each pair it is in, "
        "and the design drawn for the others names it; no release"),
    # Its second are its first openings (round 2), inside the pairwise 2PC.
    (2, "round 2: no answer within 1.5 s from party-2; pairs-2pc cannot go on without it: "
        "the pairwise 2PC is under way: each of the silent party's pairs needs both "
        "members' shares (every opening and the two output shares that sum to the noisy "
        "value), and releasing without its pairs would not be the design's estimate; no "
        "release"),
]


@pytest.mark.parametrize(("late", "reason"), PAIRS_STOPS, ids=["dealing", "openings"])
def test_a_secure_relay_round_stops_naming_the_silent_party(certs, late, reason):
    silos = np.array_split(labelled(45), 3)

    def make() -> Protocol:
        return registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2)

    def relaying_late(protocol: Protocol) -> Protocol:
        step = protocol.party_step
        peer_messages = [0]

        def held(state: Any, inbox: Any, rng: Any) -> Any:
            out = step(state, inbox, rng)
            if out[1].is_peer:
                peer_messages[0] += 1
                if peer_messages[0] == late:
                    time.sleep(4.5)
            return out

        protocol.party_step = held  # type: ignore[method-assign]
        return protocol

    server, _ = run_deployment(
        certs, make, silos, min_silos=2, timeout=1.5,
        party_make=lambda i: relaying_late(make()) if i == 2 else make())
    assert isinstance(server, NetworkRunError)
    assert str(server) == reason, server


def test_too_few_answers_stop_the_round_naming_the_silent(certs):
    silos = np.array_split(labelled(60)[:, :1], 3)

    def make() -> Protocol:
        return registry.make("ldp-quantized", GINI, epsilon=1.0, k=8)

    server, _ = run_deployment(
        certs, make, silos, min_silos=2, timeout=1.5,
        party_make=lambda i: silent_in(make(), 0, 4.5) if i else make())
    assert str(server) == ("round 0: no answer within 1.5 s from party-1, party-2; 1 of 3 "
                           "silos answered, fewer than min_silos = 2; no release")


def test_without_min_silos_a_silent_silo_stops_the_run_as_before(certs):
    silos = np.array_split(labelled(60)[:, :1], 3)

    def make() -> Protocol:
        return registry.make("ldp-quantized", GINI, epsilon=1.0, k=8)

    server, _ = run_deployment(
        certs, make, silos, timeout=1.5,
        party_make=lambda i: silent_in(make(), 0, 4.5) if i == 1 else make())
    assert str(server) == "round 0: no answer within 1.5 s from party-1; no release"


# ------------------------------------------------------------------ declarations


def _first_state(name: str, kernel: Any, **params: Any) -> tuple[Protocol, Any]:
    epsilon = math.inf if name == "exact" else 1.0
    protocol = registry.make(name, kernel, epsilon=epsilon, **params)
    return protocol, protocol.init_server(60)


@pytest.mark.parametrize(("name", "kernel", "params", "proceed"), [
    ("ldp-quantized", GINI, {"k": 8}, True),
    ("ldp-quantized", GINI, {}, True),
    ("ldp-tree", auc_kernel(), {"d": 16}, True),
    ("ldp-ghazi", GINI, {"k": 8}, True),
    ("central-laplace", auc_kernel(), {}, True),
    ("exact", auc_kernel(), {}, True),
    ("ghazi-shuffle", GINI, {"k": 8}, True),
    ("ghazi-shuffle", GINI, {"k": 8, "n_parties": 60}, False),
    ("ghazi-shuffle", GINI, {"k": 8, "n_parties": 60, "min_honest": 40}, True),
    ("fedauc-rr", auc_kernel(), {}, True),
    ("fedauc-laplace-local", auc_kernel(), {}, True),
    ("fedauc-laplace-global", auc_kernel(), {}, True),
    ("fedauc-gaussian", auc_kernel(), {"delta": 1e-6}, True),
    ("fedauc-adaptive", auc_kernel(), {}, True),
    ("pairs-2pc", auc_kernel(), {"P": 2}, True),
    ("pairs-2pc", auc_kernel(), {"all_pairs": True}, False),
    ("umpc", GINI, {}, True),
])
def test_each_protocol_declares_its_first_round(name, kernel, params, proceed):
    protocol, state = _first_state(name, kernel, **params)
    rule = protocol.dropout_rule(state, 0)
    assert rule.proceed is proceed, rule
    assert rule.reason


def test_later_rounds_declare_from_the_server_state():
    # ldp-quantized after the check-in (k fixed): the reports round may go on; FedAUC
    # after the ranking may not (the ranks include the silent client's scores).
    protocol = registry.make("ldp-quantized", GINI, epsilon=1.0)
    state = protocol.init_server(60)
    reply = protocol.server_step(state, Message(Role.PARTY, Role.SERVER,
                                                {"join": np.ones(60, dtype=np.uint8)},
                                                {"join": 1}, np.arange(60)),
                                 np.random.default_rng(0))
    after, _ = reply
    assert protocol.dropout_rule(state, 0).reason.startswith("check-in round")
    assert protocol.dropout_rule(after, 1) == (True, "one-shot epsilon-LDP reports; the "
                                                     "estimator's n is the number of "
                                                     "reports received")
    fedauc = registry.make("fedauc-rr", auc_kernel(), epsilon=1.0)
    ranked = dataclasses.replace(fedauc.init_server(3), phase=1)
    rule = fedauc.dropout_rule(ranked, 1)
    assert not rule.proceed and "biased AUC" in rule.reason


def test_central_laplace_with_a_fixed_design_refuses():
    design = uniform_sample(30, 2, 60, rng=1)
    protocol = registry.make("central-laplace", auc_kernel(), epsilon=1.0, design=design)
    rule = protocol.dropout_rule(protocol.init_server(60), 0)
    assert not rule.proceed
    assert rule.reason == "its tuple design was fixed for 60 parties before the round"


# ------------------------------------------------------------------ a killed process

FEDUSTAT = [sys.executable, "-m", "fedustat.cli"]


def connected(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds an established TCP connection to ``port`` (Linux)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                cols = line.split()
                remote_port = int(cols[2].rsplit(":", 1)[1], 16)
                if cols[3] == "01" and remote_port == port and cols[9] in inodes:
                    return True
    return False


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's /proc")
def test_a_killed_party_process_is_left_out_without_waiting(tmp_path):
    # Server and parties as processes started from the command line. party-2 joins and is
    # killed while it waits for the others: its connection closes, so once party-0 and
    # party-1 are in, the run starts without it at once (not after the 60 s timeout),
    # and the release is the simulator's over the other two silos.
    subprocess.run([*FEDUSTAT, "certs", "--out", str(tmp_path / "certs"), "--parties", "3"],
                   check=True, capture_output=True, timeout=60)
    data = labelled(60, seed=3)
    files = []
    for i, rows in enumerate(np.array_split(data, 3)):
        files.append(tmp_path / f"party-{i}.csv")
        np.savetxt(files[-1], rows, delimiter=",", header="score,label", comments="")
    common = ["--statistic", "auc", "--epsilon", "1", "--seed", "3", "--protocol",
              "ldp-quantized", "--param", "k=8", "--column-bounds", "score=0,1",
              "--certs", str(tmp_path / "certs")]
    running: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen([*FEDUSTAT, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        running.append(proc)
        return proc

    def party(i: int, address: str) -> subprocess.Popen:
        return start("party", *common, "--server", address, "--identity", f"party-{i}",
                     "--file", str(files[i]), "--columns", "score,label", "--timeout", "60")

    try:
        server = start("serve", *common, "--parties", "3", "--min-parties", "2",
                       "--listen", "127.0.0.1:0", "--timeout", "60")
        match = re.search(r"listening on port (\d+)", server.stdout.readline())
        assert match, server.stderr.read()
        address = f"127.0.0.1:{match.group(1)}"
        killed = party(2, address)
        waiting = party(1, address)
        # party-2 has connected (its Join follows at once) and waits for party-0.
        port = int(match.group(1))

        def wait_connected(proc: subprocess.Popen, may_finish: bool = False) -> None:
            # Bounded, and generous: a process start takes minutes on a loaded machine.
            deadline = time.monotonic() + 240.0
            while not connected(proc.pid, port):
                if proc.poll() is not None:
                    # Done already: it joined, and the run ended, between two looks.
                    assert may_finish and proc.returncode == 0, proc.communicate(timeout=10)
                    return
                assert time.monotonic() < deadline, "a party did not connect"
                time.sleep(0.2)

        wait_connected(killed)
        time.sleep(1.0)
        os.killpg(killed.pid, signal.SIGKILL)
        wait_connected(party(0, address), may_finish=True)
        # From party-0's join (progress) the stalled path would wait the 60 s timeout.
        started = time.monotonic()
        out, err = server.communicate(timeout=240)
        elapsed = time.monotonic() - started
        assert server.returncode == 0, err
        release = json.loads(out[out.index("{"):])
        assert (release["absent"], release["dropped"], release["parties"],
                release["n_parties"]) == (["party-2"], [], ["party-0", "party-1"], 40)
        assert elapsed < 30.0  # well under the 60 s timeout
        expected = simulate(registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=8,
                                          bounds={"score": (0.0, 1.0)}),
                            np.concatenate(np.array_split(data, 3)[:2]), rng=3,
                            batch_size=[20, 20, 0])
        assert release["value"] == expected.value
        assert waiting.wait(timeout=120) == 0
    finally:
        for proc in running:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
