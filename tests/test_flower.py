"""fedustat inside Flower: the same release as the simulator, and refusals that name the node.

The first tests drive the ServerApp's rounds (``driver.drive``) against the nodes' answers
(``node.answer``) in this process, so every check of the adapter runs in milliseconds.
The last ones start a real Flower deployment — a SuperLink and three SuperNodes with TLS
and SuperNode authentication, each in its own process session — and submit runs with
``flwr run``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedustat
from fedustat import catalogue
from fedustat.protocols.base import Role
from fedustat.runtime import wire
from fedustat.runtime.flower import RunConfig, load_silo, write_app
from fedustat.runtime.flower.config import STATISTICS, NodeConfig
from fedustat.runtime.flower.driver import drive, release_document
from fedustat.runtime.flower.node import answer
from fedustat.runtime.network.certs import create_deployment
from fedustat.runtime.network.service import NetworkRunError
from fedustat.runtime.simulate import simulate
from fedustat.runtime.wire import Envelope, Expectation, decode, encode
from fedustat.stats import auc_kernel

SEED = 5
NODES = [101, 202, 303]


def labelled(n: int, seed: int = 0, integer: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 16, n).astype(float) if integer else rng.random(n)
    return np.column_stack([scores, (rng.random(n) < 0.4).astype(float)])


def write_silos(directory: Path, data: np.ndarray, n_silos: int = 3) -> list[Path]:
    paths = []
    for i, silo in enumerate(np.array_split(data, n_silos)):
        path = directory / f"silo-{i}.csv"
        np.savetxt(path, silo, delimiter=",", header="score,label", comments="")
        paths.append(path)
    return paths


def expected_release(run: dict[str, Any], data: np.ndarray, sizes: list[int]) -> Any:
    """The simulator's release for the same seed with the silos as batches."""
    config = RunConfig.parse(run)
    protocol = config.make_protocol()
    if protocol.silo_is_one_party:
        owner = np.repeat(np.arange(len(sizes)), sizes)
        return simulate(protocol, data, rng=config.seed, parties=owner,
                        batch_size=[1] * len(sizes))
    return simulate(protocol, data, rng=config.seed, batch_size=sizes)


class InProcess:
    """Nodes answering in this process: what Flower would carry, handed over directly.

    ``tamper(action, node, reply)`` may change a node's reply record on its way to the
    server, ``tamper_request(action, node, request)`` a request on its way to a node.
    """

    def __init__(self, run: dict[str, Any], node_configs: dict[int, dict[str, Any]],
                 node_runs: dict[int, dict[str, Any]] | None = None) -> None:
        self.run = run
        self.node_configs = node_configs
        self.node_runs = node_runs or {}
        self.memory: dict[int, Any] = dict.fromkeys(node_configs)
        self.tamper: Callable[[str, int, dict[str, Any]], dict[str, Any]] | None = None
        self.tamper_request: Callable[[str, int, dict[str, Any]], dict[str, Any]] | None = None
        self.silent: set[int] = set()

    def __call__(self, action: str, contents: dict[int, dict[str, Any]], stage: str
                 ) -> dict[int, tuple[Any, str | None]]:
        replies = {}
        for node, content in contents.items():
            if node in self.silent:
                continue
            if self.tamper_request is not None:
                content = self.tamper_request(action, node, dict(content))
            reply, self.memory[node] = answer(
                action, {"fedustat": content}, self.node_runs.get(node, self.run),
                self.node_configs[node], node, self.memory[node])
            if self.tamper is not None:
                reply = self.tamper(action, node, reply)
            replies[node] = ({"fedustat": reply}, None)
        return replies

    def drive(self) -> Any:
        return drive(self, list(self.node_configs), RunConfig.parse(self.run), "run-a")


def in_process(tmp_path: Path, run: dict[str, Any], data: np.ndarray,
               **node_extra: Any) -> InProcess:
    paths = write_silos(tmp_path, data)
    configs = {node: {"data": str(path), "silo": i, **node_extra}
               for i, (node, path) in enumerate(zip(NODES, paths, strict=True))}
    return InProcess(run, configs)


CASES = [
    {"protocol": "ldp-quantized", "params": json.dumps({"k": 8, "bounds": [0, 1]})},
    {"protocol": "fedauc-rr", "params": json.dumps({"n_clients": 3})},
    {"protocol": "fedauc-laplace-local", "params": json.dumps({"n_clients": 3})},
    {"protocol": "central-laplace"},
    {"protocol": "ldp-tree", "params": json.dumps({"d": 16})},
    {"protocol": "central-laplace", "statistic": "mann-whitney"},
]


@pytest.mark.parametrize("case", CASES,
                         ids=[f"{c['protocol']}-{c.get('statistic', 'auc')}" for c in CASES])
def test_driven_rounds_give_the_simulators_release(tmp_path, case):
    data = labelled(60, integer=case["protocol"] == "ldp-tree")
    run = {**case, "seed": str(SEED)}
    nodes = in_process(tmp_path, run, data)
    result = nodes.drive()
    expected = expected_release(run, data, [20, 20, 20])
    np.testing.assert_equal(result.estimate.value, expected.value)
    assert result.estimate.cost == expected.cost
    assert result.rows == [20, 20, 20]
    # Join, then one exchange per party round (the release summary comes after).
    assert len(result.exchange_seconds) == 1 + (expected.cost.rounds + 1) // 2


# ------------------------------------------------------------------ relay rounds

RELAYED = [
    {"protocol": "pairs-2pc", "params": json.dumps({"P": 2})},
    {"protocol": "umpc", "params": json.dumps({"bounds": {"score": [0, 1]}})},
]


@pytest.fixture(scope="module")
def party_certs(tmp_path_factory) -> Path:
    """A deployment CA and the certificates of party-0 .. party-2 (one per silo)."""
    return create_deployment(tmp_path_factory.mktemp("certs"), 3)


def relaying(tmp_path: Path, run: dict[str, Any], data: np.ndarray, certs: Path
             ) -> InProcess:
    return in_process(tmp_path, run, data, certs=str(certs))


@pytest.mark.parametrize("case", RELAYED, ids=[c["protocol"] for c in RELAYED])
def test_relay_rounds_give_the_simulators_release(tmp_path, party_certs, case):
    # The parties' rows to each other travel sealed through the ServerApp's routing.
    data = labelled(60, seed=3)
    run = {**case, "seed": str(SEED)}
    result = relaying(tmp_path, run, data, party_certs).drive()
    expected = expected_release(run, data, [20, 20, 20])
    np.testing.assert_equal(result.estimate.value, expected.value)
    assert result.estimate.cost == expected.cost
    peer = expected.cost.peer_rounds
    assert peer >= 2
    # Join, then one exchange per relay round and per message to the server.
    assert result.rounds == (expected.cost.rounds - peer + 1) // 2 + peer
    assert len(result.exchange_seconds) == 1 + result.rounds


CURVES = [
    {"protocol": "ecdf-secagg",
     "params": json.dumps({"bounds": [0, 15], "precision": 1.0, "contributors": 3})},
    {"protocol": "ecdf-fss",
     "params": json.dumps({"bounds": [0, 15], "precision": 1.0, "query": [0, 4, 9, 15]})},
]


@pytest.mark.parametrize("case", CURVES, ids=[c["protocol"] for c in CURVES])
def test_federated_ecdf_by_name_gives_the_simulators_curve(tmp_path, party_certs, case):
    # The curve releases take the score column only (node config columns = "0").
    data = labelled(60, seed=4, integer=True)
    run = {**case, "seed": str(SEED)}
    nodes = relaying(tmp_path, run, data, party_certs)
    for config in nodes.node_configs.values():
        config["columns"] = "0"
    result = nodes.drive()
    released = result.estimate
    expected = simulate(RunConfig.parse(run).make_protocol(), data[:, :1], rng=SEED,
                        batch_size=[20, 20, 20])
    np.testing.assert_array_equal(released.diagnostics["curve"].values,
                                  expected.diagnostics["curve"].values)
    assert released.cost == expected.cost and expected.cost.peer_rounds >= 1
    document = release_document(RunConfig.parse(run), result)
    assert document["values"] == expected.diagnostics["curve"].values.tolist()
    assert document["thresholds"] == expected.diagnostics["curve"].thresholds.tolist()


def test_unseeded_relay_rounds_replay_the_nodes_deployment_draws(tmp_path, party_certs):
    # Every message starts a new ClientApp process that replays the party's steps: its
    # shares and noise must be the very ones it sent before, or the release is garbage.
    # All pairs at epsilon 1000: the release is the exact AUC up to its own noise.
    data = labelled(60, seed=3)
    run = {"protocol": "pairs-2pc", "params": json.dumps({"all_pairs": True}),
           "epsilon": 1000.0}
    released = relaying(tmp_path, run, data, party_certs).drive().estimate
    exact = fedustat.estimate(auc_kernel(), data, epsilon=math.inf, protocol="exact").value
    assert released.noise == "deployment"
    assert abs(released.value - exact) <= 6 * released.std_error


def test_an_unseeded_federated_ecdf_replays_the_nodes_shares_and_noise(tmp_path,
                                                                      party_certs):
    # Deployment randomness (shares and the contributors' noise from the nodes' CSPRNG):
    # at epsilon 1000 the curve is the exact ECDF up to its own noise.
    from fedustat.stats.ecdf import ecdf_counts

    data = labelled(60, seed=4, integer=True)
    run = {**CURVES[1], "epsilon": 1000.0}
    nodes = relaying(tmp_path, run, data, party_certs)
    for config in nodes.node_configs.values():
        config["columns"] = "0"
    released = nodes.drive().estimate
    curve = released.diagnostics["curve"]
    exact = ecdf_counts(data[:, 0], curve.grid)[curve.indices] / data.shape[0]
    assert released.noise == "deployment"
    assert np.all(np.abs(curve.values - exact) <= 6 * math.sqrt(curve.variance))


def test_a_tampered_relayed_payload_is_refused_naming_its_sender(tmp_path, party_certs):
    nodes = relaying(tmp_path, {**RELAYED[0], "seed": str(SEED)}, labelled(60),
                     party_certs)

    relayed: list[int] = []

    def flip(action: str, node: int, request: dict[str, Any]) -> dict[str, Any]:
        # The first frame that is not the server's (b"FDST..."): the rows relayed to
        # silo 0. Its last bytes are the last sender's payload, sealed for silo 0.
        frame = request.get("frame", b"")
        if action == "fedustat_round" and node == 101 and frame[:4] not in (b"", b"FDST") \
                and not relayed:
            relayed.append(request["round"])
            request["frame"] = frame[:-1] + bytes([frame[-1] ^ 1])
        return request

    nodes.tamper_request = flip
    with pytest.raises(NetworkRunError, match=r"node-101 refused: message from party "
                                              r"'party-2': relayed payload: fails "
                                              r"authentication in round \d") as refused:
        nodes.drive()
    assert str(refused.value).startswith(f"round {relayed[0]}: ")
    assert f"authentication in round {relayed[0] - 1}:" in str(refused.value)


@pytest.mark.parametrize(("swap", "message"), [
    ("relay", r"node-202: message from party 'party-1': sender_id: expected 'party-1', "
              r"the frame says 'party-0'; no release"),
    ("server", r"node-101 sent rows to parties and node-202 a message to the server; every "
               r"node of a round must do the same; no release"),
], ids=["another-silos-relay-frame", "mixed-round"])
def test_a_relay_frame_that_does_not_fit_its_node_is_refused(tmp_path, party_certs, swap,
                                                             message):
    # In the first relay round node-202 answers with node-101's relay frame (speaking for
    # party-0), or with its own previous frame to the server.
    nodes = relaying(tmp_path, {**RELAYED[0], "seed": str(SEED)}, labelled(60),
                     party_certs)
    frames: dict[int, bytes] = {}

    def replace_frame(action: str, node: int, reply: dict[str, Any]) -> dict[str, Any]:
        if action != "fedustat_round" or "frame" not in reply:
            return reply
        if node == 202 and reply["frame"][:4] == b"FDRL":
            return {"frame": frames[101] if swap == "relay" else frames[202]}
        frames[node] = reply["frame"]
        return reply

    nodes.tamper = replace_frame
    with pytest.raises(NetworkRunError, match=r"round \d: " + message):
        nodes.drive()


def test_a_certificate_substituted_by_the_server_is_refused(tmp_path, party_certs):
    # A ServerApp that hands out a key of its own for silo 2 (a certificate from another
    # CA) is refused by the node, which checks every certificate against its own CA.
    other = create_deployment(tmp_path / "other", 3)
    forged = (other / "party-2.pem").read_text()
    nodes = relaying(tmp_path, {**RELAYED[0], "seed": str(SEED)}, labelled(60),
                     party_certs)

    def substitute(action: str, node: int, request: dict[str, Any]) -> dict[str, Any]:
        if action == "fedustat_round" and node == 101:
            assignment = json.loads(request["assignment"])
            assignment["certificates"][2] = forged
            request["assignment"] = json.dumps(assignment)
        return request

    nodes.tamper_request = substitute
    with pytest.raises(NetworkRunError, match=r"round \d: node-101 refused: the ServerApp's "
                                              r"list of parties is refused: the certificate "
                                              r"given for party-2 is not issued by this "
                                              r"deployment's CA"):
        nodes.drive()


def test_a_node_without_credentials_refuses_a_relay_protocol(tmp_path):
    nodes = in_process(tmp_path, {**RELAYED[0], "seed": str(SEED)}, labelled(60))
    with pytest.raises(NetworkRunError, match=r"round \d: node-101 refused: protocol "
                                              r"'pairs-2pc' sends rows between parties, "
                                              r"relayed sealed end to end: the node config "
                                              r"needs certs=DIR"):
        nodes.drive()


def test_a_replay_that_would_send_another_message_is_refused(tmp_path):
    # The node's kept digest of its round-0 frame no longer matches what the replay
    # sends (as when a step draws from outside the node's streams): it refuses.
    nodes = in_process(tmp_path, {**CASES[1], "seed": str(SEED)}, labelled(60))

    def forget(action: str, node: int, request: dict[str, Any]) -> dict[str, Any]:
        if action == "fedustat_round" and request["round"] == 1 and node == 202:
            nodes.memory[202]["sent"] = ["0" * 64]
        return request

    nodes.tamper_request = forget
    with pytest.raises(NetworkRunError, match=r"round 1: node-202 refused: replaying round 0 "
                                              r"gives another message than the one this "
                                              r"node sent"):
        nodes.drive()


def test_the_replayable_source_repeats_itself_and_only_inside_its_block():
    from fedustat.privacy import samplers
    from fedustat.secure.ring import SystemRandomness

    key, other = bytes(range(32)), bytes(range(1, 33))

    def draws(k: bytes) -> tuple[np.ndarray, np.ndarray]:
        with samplers.replayable_source(k):
            return samplers.random_words(4), SystemRandomness().integers(
                0, 1 << 64, size=3, dtype=np.uint64)

    first, again = draws(key), draws(key)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    # Another key, or the OS outside the block: other words (2^-256 chance of a clash).
    assert not np.array_equal(draws(other)[0], first[0])
    assert not np.array_equal(samplers.random_words(4), first[0])
    with pytest.raises(ValueError, match="needs a 32-byte key"), \
            samplers.replayable_source(b"short"):
        pass


def test_silo_order_follows_the_declared_silo_index_not_the_node_id(tmp_path):
    data = labelled(60)
    run = {**CASES[0], "seed": str(SEED)}
    nodes = in_process(tmp_path, run, data)
    # Node 303 holds silo 0 now: its rows come first, as batch 0 of the simulation.
    swapped = {303: nodes.node_configs[101], 202: nodes.node_configs[202],
               101: nodes.node_configs[303]}
    result = InProcess(run, swapped).drive()
    assert result.nodes == [303, 202, 101]
    np.testing.assert_equal(result.estimate.value,
                            expected_release(run, data, [20, 20, 20]).value)


def test_without_a_seed_the_randomness_is_fresh_on_every_run(tmp_path):
    data = labelled(60)
    run = dict(CASES[1])  # fedauc-rr: nodes replay two rounds from their kept entropy
    values = {in_process(tmp_path, run, data).drive().estimate.raw_value for _ in range(3)}
    # Three runs on OS randomness: label flips differ, so the debiased AUCs differ (the
    # raw releases: a clipped value may sit at the range's end twice).
    assert len(values) == 3


def test_a_node_over_its_epsilon_limit_refuses_by_name(tmp_path):
    nodes = in_process(tmp_path, {**CASES[0], "epsilon": 2.0}, labelled(30))
    nodes.node_configs[202]["max-epsilon"] = 1.0
    with pytest.raises(NetworkRunError,
                       match=r"joining: node-202 refused: epsilon 2 exceeds this node's "
                             r"max-epsilon 1; no release"):
        nodes.drive()


def test_a_node_with_another_configuration_refuses(tmp_path):
    nodes = in_process(tmp_path, CASES[0], labelled(30))
    nodes.node_runs[303] = {**CASES[0], "epsilon": 5.0}
    # Refused at join, naming the option that differs (not two hashes).
    with pytest.raises(NetworkRunError, match=r"^joining: node-303 refused: the server's "
                                              r"protocol configuration differs from this "
                                              r"node's: epsilon = 1\.0 \(server\) vs 5\.0 "
                                              r"\(this node\); no release$"):
        nodes.drive()


def test_a_node_whose_records_fail_validation_tells_only_the_public_check(tmp_path, caplog):
    # node-202 holds a score of 7.25 outside the declared bounds [0, 1]: its own log has
    # the full error, the ServerApp (and through it everyone) only the check's name.
    data = labelled(60)
    data[25, 0] = 7.25
    nodes = in_process(tmp_path, CASES[0], data)
    with caplog.at_level("WARNING", logger="fedustat.runtime.flower.node"), \
            pytest.raises(NetworkRunError) as stopped:
        nodes.drive()
    assert str(stopped.value) == ("round 0: node-202 refused: failed validation: values "
                                  "outside the declared bounds of column 'score'; no release")
    assert "7.25" in caplog.text  # the node's own log
    assert "7.25" not in str(stopped.value) and "max" not in str(stopped.value)


def test_deployment_noise_is_released_as_such_and_must_agree(tmp_path):
    # The server's mechanism draws from the OS (central-laplace reports it) ...
    central = in_process(tmp_path, {**CASES[3], "noise": "deployment"}, labelled(60))
    released = central.drive().estimate
    assert released.diagnostics["noise_source"] == "deployment"
    assert released.noise == "deployment"
    # ... and so do the parties' randomizers (ldp-quantized reports it in its diagnostics).
    run = {**CASES[0], "noise": "deployment"}
    local = in_process(tmp_path, run, labelled(60)).drive().estimate
    assert local.diagnostics["party_noise"] == "deployment"
    # A node configured for simulation noise refuses the server's deployment-noise run.
    nodes = in_process(tmp_path, run, labelled(60))
    nodes.node_runs[202] = {**CASES[0], "noise": "simulation"}
    with pytest.raises(NetworkRunError, match=r"node-202 refused: the server's protocol "
                                              r"configuration differs from this node's: "
                                              r"settings.noise = \"deployment\" \(server\) vs none "
                                              r"\(this node\)"):
        nodes.drive()


def test_a_frame_speaking_for_another_silos_parties_is_refused(tmp_path):
    nodes = in_process(tmp_path, {**CASES[0], "seed": str(SEED)}, labelled(60))
    config = RunConfig.parse({**CASES[0], "seed": str(SEED)})
    mark = config.mark(config.make_protocol().configure(60))

    def forge(action: str, node: int, reply: dict[str, Any]) -> dict[str, Any]:
        if action != "fedustat_round" or node != 202:
            return reply
        # node-202 (parties 20..39) re-labels its reports as parties 0..19 (silo 0's).
        envelope = decode(reply["frame"], _lenient(mark, node))
        message = envelope.message
        forged = type(message)(message.sender, message.receiver, message.fields,
                               message.bits_per_value, np.asarray(message.parties) - 20)
        return {"frame": encode(Envelope(mark, "run-a", 0, "party", "node-202", forged))}

    nodes.tamper = forge
    with pytest.raises(NetworkRunError, match=r"round 0: message from party 'node-202': "
                                              r"parties: .*no release"):
        nodes.drive()


def _lenient(mark: str, node: int) -> Expectation:
    """What the server accepts from ``node`` in round 0, without the party-id check."""
    return Expectation(mark, "run-a", 0, "party", f"node-{node}", Role.SERVER)


def test_a_frame_under_another_nodes_name_is_refused(tmp_path):
    nodes = in_process(tmp_path, {**CASES[0], "seed": str(SEED)}, labelled(60))
    replies: dict[int, bytes] = {}

    def swap(action: str, node: int, reply: dict[str, Any]) -> dict[str, Any]:
        if action == "fedustat_round":
            replies[node] = reply["frame"]
            if node == 202:  # node-202 replays node-101's frame
                return {"frame": replies[101]}
        return reply

    nodes.tamper = swap
    with pytest.raises(NetworkRunError, match=r"round 0: message from party 'node-202': "
                                              r"sender_id: expected 'node-202', the frame "
                                              r"says 'node-101'; no release"):
        nodes.drive()


def test_a_node_refuses_a_server_frame_of_another_round(tmp_path):
    # fedauc-rr has two party rounds: the server's frame between them is checked by the node.
    nodes = in_process(tmp_path, {**CASES[1], "seed": str(SEED)}, labelled(60))

    def replay_round(action: str, node: int, request: dict[str, Any]) -> dict[str, Any]:
        if action == "fedustat_round" and request["round"] == 1 and node == 101:
            frame = request["frame"]
            # Same frame, header round 0 -> 7 (the server's frame after round 0 says 0).
            length = struct.unpack_from(">I", frame, 6)[0]
            header = wire._unpack_header(frame[10:10 + length], "test")
            assert header["round"] == 0
            raw = wire._pack_header({**header, "round": 7})
            request["frame"] = frame[:6] + struct.pack(">I", len(raw)) + raw \
                + frame[10 + length:]
        return request

    nodes.tamper_request = replay_round
    with pytest.raises(NetworkRunError, match=r"round 1: node-101 refused: message from "
                                              r"server 'server': round: expected 0, the "
                                              r"frame says 7; no release"):
        nodes.drive()


def test_a_silent_node_is_named(tmp_path):
    nodes = in_process(tmp_path, {**CASES[0], "timeout": 3.0}, labelled(30))
    nodes.silent.add(303)
    with pytest.raises(NetworkRunError, match="joining: no answer within 3 s from node-303; "
                                              "no release"):
        nodes.drive()


def test_silo_indices_must_be_distinct(tmp_path):
    nodes = in_process(tmp_path, CASES[0], labelled(30))
    nodes.node_configs[303]["silo"] = 0
    with pytest.raises(NetworkRunError, match=r"silo indices \[0, 0, 1\] must be 0..2, each "
                                              r"once"):
        nodes.drive()


def test_a_reply_with_unexpected_keys_is_refused(tmp_path):
    nodes = in_process(tmp_path, CASES[0], labelled(30))
    nodes.tamper = lambda action, node, reply: {**reply, "extra": 1}
    with pytest.raises(NetworkRunError, match=r"joining: message from node-101: record keys "
                                              r"must be \['certificate', 'fingerprint', 'rows', "
                                              r"'silo'\]"):
        nodes.drive()


@pytest.mark.parametrize(("config", "message"), [
    ({"epsilon": 0.0}, "epsilon must be > 0, got 0.0"),
    ({"epsilon": "1"}, "epsilon must be a finite number, got '1'"),
    ({"params": "[1]"}, "params must be a JSON object, got '[1]'"),
    ({"params": "{k: 8}"}, "params must be a JSON object, got '{k: 8}'"),
    ({"seed": "abc"}, "seed must be an integer or \"\""),
    ({"seed": "-3"}, "seed must be >= 0, got -3"),
    ({"nodes": -1}, "nodes must be an integer >= 0"),
    ({"statistic": "mode"}, "statistic 'mode' is unknown; choose one of ['auc', "
                            "'mann-whitney', 'kendall', 'kendall-b', 'gini'"),
    ({"statistic": "median"}, "statistic 'median' is a curve the Flower app does not "
                              "release: its curve protocols (ecdf-fss, ecdf-secagg) release "
                              "the ECDF (statistic \"ecdf\")"),
    ({"statistic": "ecdf"}, "statistic 'ecdf' is released by the curve protocols ecdf-fss, "
                            "ecdf-secagg, not by 'ldp-quantized'"),
    ({"statistic": "kendall-b", "protocol": "central-laplace"},
     "kernel 'kendall_tau_b' maps U to its statistic with private data"),
    ({"statistic": "gini"}, "statistic 'gini' needs statistic-bounds"),
    ({"statistic": "gini", "statistic-bounds": "1"}, "statistic-bounds must be \"LO,HI\""),
    ({"epsilons": 1.0}, "unknown run config keys ['epsilons']"),
    ({"protocol": "nope"}, "unknown protocol 'nope'"),
    ({"noise": "os"}, "noise must be \"auto\", \"simulation\" or \"deployment\", got 'os'"),
    ({"noise": "deployment", "seed": "3"}, "it cannot be seeded (set seed = \"\")"),
    ({"params": "{\"noise\": 1}"}, "params must not set noise; use the run config key noise"),
])
def test_bad_run_config_is_refused_with_the_key_named(config, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        RunConfig.parse(config).make_protocol()


def test_bounded_statistics_take_their_public_bounds_from_the_run_config():
    config = RunConfig.parse({"statistic": "gini", "statistic-bounds": "0,2",
                              "protocol": "central-laplace"})
    assert config.kernel().output_range == (0.0, 2.0)


def test_the_run_config_takes_the_catalogues_u_statistics():
    assert list(STATISTICS) == catalogue.names("u-statistic")
    for name in catalogue.names("u-statistic"):
        stat = catalogue.get(name)
        bounds = "0,1" if stat.needs_bounds else ""
        config = RunConfig.parse({"statistic": name, "statistic-bounds": bounds})
        assert config.statistic == name
        assert config.kernel().name == stat.kernel((0.0, 1.0)).name


@pytest.mark.parametrize(("old", "new", "kernel"), [("kendall-a", "kendall", "kendall_tau_a"),
                                                    ("rand-index", "rand", "rand_index")])
def test_old_statistic_names_stand_for_the_catalogues(tmp_path, old, new, kernel):
    assert RunConfig.parse({"statistic": old}).statistic == new
    # A server on the old name and nodes on the new one run the same configuration, and
    # release what the simulator releases for the catalogue's name.
    rng = np.random.default_rng(3)
    data = rng.integers(0, 3, size=(60, 2)).astype(float)
    server = {"protocol": "central-laplace", "statistic": old, "seed": str(SEED)}
    nodes = in_process(tmp_path, server, data)
    nodes.node_runs = {node: {**server, "statistic": new} for node in NODES}
    result = nodes.drive()
    expected = expected_release({**server, "statistic": new}, data, [20, 20, 20])
    assert RunConfig.parse(server).kernel().name == kernel
    np.testing.assert_equal(result.estimate.value, expected.value)


def test_the_curve_protocols_take_the_ecdf_by_name():
    params = json.dumps({"bounds": [0, 15], "precision": 1})
    for statistic in ("ecdf", "auc"):  # a U-statistic name is ignored, as before
        config = RunConfig.parse({"protocol": "ecdf-fss", "statistic": statistic,
                                  "params": params})
        assert config.statistic == statistic and config.make_protocol().name == "ecdf-fss"
    with pytest.raises(ValueError, match=r"statistic 'roc' is a curve the Flower app does "
                                         r"not release"):
        RunConfig.parse({"protocol": "ecdf-fss", "statistic": "roc", "params": params})


def test_node_data_from_csv_with_header_npy_and_selected_columns(tmp_path):
    data = labelled(9)
    (tmp_path / "a.csv").write_text("score,label\n" + "\n".join(
        f"{float(s)!r},{float(y)!r}" for s, y in data))
    np.save(tmp_path / "b.npy", data[:, ::-1])
    np.testing.assert_array_equal(load_silo(NodeConfig.parse({"data": str(tmp_path / "a.csv")})),
                                  data)
    np.testing.assert_array_equal(
        load_silo(NodeConfig.parse({"data": str(tmp_path / "b.npy"), "columns": "1,0"})), data)
    with pytest.raises(ValueError, match=r"columns \[2\] are outside the 2 columns of a.csv"):
        load_silo(NodeConfig.parse({"data": str(tmp_path / "a.csv"), "columns": "2"}))
    with pytest.raises(FileNotFoundError, match=r"node data .*missing\.csv' does not exist"):
        load_silo(NodeConfig.parse({"data": str(tmp_path / "missing.csv")}))
    with pytest.raises(ValueError, match="node config needs data="):
        NodeConfig.parse({})


def test_the_app_declares_every_run_config_key_and_fedustats_components(tmp_path):
    project = tomllib.loads((write_app(tmp_path / "app") / "pyproject.toml").read_text())
    app = project["tool"]["flwr"]["app"]
    assert app["components"] == {"serverapp": "fedustat.runtime.flower.server_app:app",
                                 "clientapp": "fedustat.runtime.flower.client_app:app"}
    assert RunConfig.parse(app["config"]) == RunConfig.parse({})


def test_the_module_writes_the_app_directory(tmp_path, capsys):
    from fedustat.runtime.flower.__main__ import main
    assert main([str(tmp_path / "app"), "--name", "my-stats"]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'app' / 'pyproject.toml'}\n"
    project = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())
    assert project["project"]["name"] == "my-stats"


# ---------------------------------------------------------------- a real deployment
def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _node_key(stem: Path) -> Path:
    """A SuperNode's EC key (OpenSSH format, as Flower reads it); returns the private key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    private = stem.with_suffix(".key")
    private.touch(mode=0o600)
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    stem.with_suffix(".pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    return private


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (Linux /proc), so none is left behind."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(children)
            todo.extend(children)
    return found


class Deployment:
    """A SuperLink and SuperNodes with TLS and node authentication, each in its own session.

    ``start_link``, then ``submit`` (``flwr run`` for every config at once; the ServerApps
    wait for their nodes), then ``start_nodes``, then ``releases``: submitting while the
    nodes register and start saves the seconds ``flwr run`` takes.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: list[subprocess.Popen[bytes]] = []
        self.node_releases: list[Path] = []
        self.submissions: list[subprocess.Popen[bytes]] = []
        self.release_paths: list[Path] = []

    def start_link(self) -> None:
        root = self.root
        bin_dir = Path(sys.executable).parent
        source = Path(fedustat.__file__).resolve().parents[1]
        self.env = {**os.environ,
                    "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                    "PYTHONPATH": str(source), "FLWR_HOME": str(root / "flwr-home"),
                    # SuperExec's poll for new ClientApp/ServerApp tasks (default 1 s).
                    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1"}
        # The SuperLink's TLS certificate, and one party certificate per silo for the
        # end-to-end sealing of relay rounds.
        self.certs = create_deployment(root / "certs", 3)
        self.port = _free_port()
        home = root / "flwr-home"
        home.mkdir()
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "test"\n\n[superlink.test]\n'
            f'address = "127.0.0.1:{self.port}"\n'
            f'root-certificates = "{self.certs / "ca.pem"}"\n')
        self.app = write_app(root / "app")
        self._start("superlink", [
            "flower-superlink", "--ssl-certfile", str(self.certs / "server.pem"),
            "--ssl-keyfile", str(self.certs / "server.key"), "--ssl-ca-certfile",
            str(self.certs / "ca.pem"), "--port", str(self.port), "--enable-supernode-auth",
            "--disable-runtime-dependency-installation"])
        self._wait_for_port()

    def start_nodes(self, silos: list[Path]) -> None:
        """SuperNode authentication: each node signs with its own key, registered with the
        SuperLink beforehand; a fourth node with an unregistered key must stay out (the
        runs ask for exactly 3 nodes and fail when more are connected)."""
        root = self.root
        keys = [_node_key(root / f"node-{i}") for i in range(len(silos) + 1)]
        registrations = [self._run_flwr(["supernode", "register",
                                         str(key.with_suffix(".pub")), "test"])
                         for key in keys[:-1]]
        for registration in registrations:
            output = registration.communicate(timeout=120)[0].decode()
            assert registration.returncode == 0, output
        for i, key in enumerate(keys):
            path = silos[i % len(silos)]
            release = root / f"node-{i}-release.json"
            if i < len(silos):
                self.node_releases.append(release)
            self._start(f"supernode-{i}", [
                "flower-supernode", "--root-certificates", str(self.certs / "ca.pem"),
                "--superlink", f"127.0.0.1:{self.port}", "--port", str(_free_port()),
                "--auth-supernode-private-key", str(key),
                "--node-config",
                f'data="{path}" silo={i} release="{release}" certs="{self.certs}"'])

    def _wait_for_port(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            assert time.monotonic() < deadline, f"the SuperLink did not listen\n{self.logs()}"
            time.sleep(0.1)

    def _start(self, name: str, command: list[str]) -> None:
        log = (self.root / f"{name}.log").open("wb")
        self.processes.append(subprocess.Popen(command, env=self.env, stdout=log,
                                               stderr=subprocess.STDOUT, cwd=self.root,
                                               start_new_session=True))

    def _run_flwr(self, arguments: list[str]) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(["flwr", *arguments], env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, cwd=self.root,
                                   start_new_session=True)
        self.processes.append(process)
        return process

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                         for p in sorted(self.root.glob("*.log")))

    def submit(self, configs: list[dict[str, Any]]) -> None:
        """``flwr run`` for every config at once.

        The runs share the SuperNodes: a node answers one run's message while the other
        run's waits, instead of idling between exchanges (about 45 s for both runs on a
        loaded 2-core machine, against 80 s one after the other).
        """
        for i, config in enumerate(configs):
            self.release_paths.append(self.root / f"release-{i}.json")
            overrides = {**config, "release": str(self.release_paths[-1]), "nodes": 3,
                         "timeout": 120.0}
            toml = self.root / f"run-config-{i}.toml"
            toml.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in overrides.items()))
            self.submissions.append(self._run_flwr(
                ["run", str(self.app), "test", "--run-config", str(toml)]))

    def releases(self, timeout: float = 300.0) -> list[dict[str, Any]]:
        """The ServerApps' release files, once every node has logged every release.

        ``timeout`` bounds each wait far above the usual minute (with a full test suite
        running beside it, exchanges took 20-30 s), so only a run that does not finish
        fails the test.
        """
        for submission in self.submissions:
            output = submission.communicate(timeout=timeout)[0].decode()
            assert submission.returncode == 0, output
        self._wait(lambda: all(path.exists() for path in self.release_paths), timeout,
                   "no release")
        documents = [json.loads(path.read_text()) for path in self.release_paths]
        runs = {document["run"] for document in documents}
        self._wait(lambda: all(runs <= set(self._logged(p)) for p in self.node_releases),
                   timeout, "the nodes did not all log every release")
        return documents

    @staticmethod
    def _logged(path: Path) -> list[str]:
        if not path.exists():
            return []
        return [json.loads(line)["run"] for line in path.read_text().splitlines()]

    def _wait(self, ready: Callable[[], bool], timeout: float, failure: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            assert time.monotonic() < deadline, f"{failure} after {timeout} s\n{self.logs()}"
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every process group (and any process they left), then reap them."""
        below = {pid: _command(pid) for p in self.processes for pid in _descendants(p.pid)}
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        for pid, command in below.items():
            # e.g. the SuperLink's SuperExec runs in a session of its own; the same
            # command line guards against a reused process id.
            if command and _command(pid) == command:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _command(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


DEPLOYMENT_DATA = labelled(60, seed=3)
# ldp-quantized (one party round) and pairs-2pc (server rounds and relay rounds, each
# replayed by a new ClientApp process); fedauc-rr's two rounds run in process above.
DEPLOYED = [CASES[0], RELAYED[0]]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> Iterator[tuple[list[dict[str, Any]], list[list[dict]]]]:
    """The ServerApps' releases of the DEPLOYED runs, and every node's release log."""
    pytest.importorskip("flwr")
    if shutil.which("flower-superlink", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("flwr is installed but flower-superlink is not beside this Python")
    root = tmp_path_factory.mktemp("flower")
    deployment = Deployment(root)
    try:
        deployment.start_link()
        deployment.submit([{**case, "seed": str(SEED)} for case in DEPLOYED])
        deployment.start_nodes(write_silos(root, DEPLOYMENT_DATA))
        releases = deployment.releases()
        logs = [[json.loads(line) for line in path.read_text().splitlines()]
                for path in deployment.node_releases]
        yield releases, logs
    finally:
        deployment.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("index", range(len(DEPLOYED)), ids=[c["protocol"] for c in DEPLOYED])
def test_a_flower_deployment_releases_the_simulators_numbers(deployed, index):
    releases, node_logs = deployed
    release = releases[index]
    expected = expected_release({**DEPLOYED[index], "seed": str(SEED)}, DEPLOYMENT_DATA,
                                [20, 20, 20])
    assert release["protocol"] == DEPLOYED[index]["protocol"]
    assert release["value"] == expected.value
    assert release["cost"] == dataclasses.asdict(expected.cost)
    assert release["epsilon"] == 1.0 and release["noise"] == expected.noise
    assert [s["rows"] for s in release["silos"]] == [20, 20, 20]
    # Join, then one exchange per party round: relay rounds, and one per server message.
    peer = expected.cost.peer_rounds
    assert release["rounds"] == (expected.cost.rounds - peer + 1) // 2 + peer
    assert len(release["exchange_seconds"]) == 1 + release["rounds"]
    # Every node received this run's summary.
    for log in node_logs:
        assert [entry["value"] for entry in log if entry["run"] == release["run"]] \
            == [expected.value]
