"""What server and parties agree on: the gRPC methods, reply framing, public configuration.

The standalone transport is gRPC over mutually authenticated TLS (docs/network.md says why
gRPC: a measured 0.35 ms per exchange against seconds for Flower's per-message process).
It uses no generated code: the two methods carry raw bytes,

* ``Join``: a party's JSON hello (rows held, protocol fingerprint); the reply, once every
  expected party has joined, is its assignment (run id, its party ids, the public n).
* ``Round``: a party's wire frame (:mod:`fedustat.runtime.wire`) for one round; the reply,
  once every party's frame of that round is in and the server step has run, is either the
  server's frame for this party or the release.
* ``Relay``: a party's sealed rows to other parties in a relay round
  (:mod:`fedustat.runtime.network.relay`); the reply, once every party's rows of that
  round are in, is the rows sealed for this party. No server step runs.
* ``Pass``: a service role (a shuffler, a dealer) with nothing to send this round; the
  reply is what was addressed to it (relayed rows, its part of the server's message, or
  the release).
* ``Abort``: a party that refuses what it received (a relayed payload that fails
  authentication) says why; the server stops the run with that reason, naming the party.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np

from fedustat.privacy.guarantee import PrivacyModel
from fedustat.protocols.base import Estimate, Protocol
from fedustat.stats.kernels import Kernel

SERVICE = "fedustat.Exchange"
JOIN = f"/{SERVICE}/Join"
ROUND = f"/{SERVICE}/Round"
RELAY = f"/{SERVICE}/Relay"
ABORT = f"/{SERVICE}/Abort"
PASS = f"/{SERVICE}/Pass"
# Every silo's certificate, fetched once by a party before its first relay round (the
# join reply stays small: star protocols never need them).
PEERS = f"/{SERVICE}/Peers"
#: Longest reason a party may give when it stops a run (bytes of UTF-8).
MAX_ABORT_REASON = 1000

# First byte of a Round reply.
REPLY_MESSAGE = b"M"
REPLY_RELEASE = b"R"
REPLY_RELAYED = b"P"

# gRPC refuses messages above 4 MiB by default; a silo's frame may be larger.
MAX_MESSAGE_BYTES = 1 << 30
CHANNEL_OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]


class NetworkRunError(RuntimeError):
    """A networked run that stopped without a release (names the parties at fault)."""


def _public(value: Any) -> Any:
    if isinstance(value, Kernel):
        return {"kernel": value.name, "degree": value.degree}
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return "inf" if math.isinf(value) else float(value)
    if isinstance(value, tuple | list):
        parts = [_public(v) for v in value]
        return None if any(p is _SKIP for p in parts) else parts
    return _SKIP


_SKIP = object()


def public_configuration(protocol: Protocol) -> dict[str, Any]:
    """The protocol's name and its plain public settings (numbers, strings, the kernel)."""
    settings = {"protocol": protocol.name, "class": type(protocol).__name__}
    for key, value in sorted(vars(protocol).items()):
        if key.startswith("_"):
            continue
        public = _public(value)
        if public is not _SKIP:
            settings[key] = public
    return settings


def fingerprint(protocol: Protocol) -> str:
    """A short hash of :func:`public_configuration`: parties and server must agree on it."""
    text = json.dumps(public_configuration(protocol), sort_keys=True)
    return f"{protocol.name}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def check_randomness(protocol: Protocol, rng: Any) -> str:
    """The noise grade of a networked run; refuses private draws from a non-CSPRNG source.

    Networked runs use deployment randomness unless a seed asks for simulation randomness
    explicitly (to compare with the simulator): without a seed, a protocol that draws
    private values must hold a deployment noise source (``noise=DeploymentNoise()``).
    """
    kind = getattr(getattr(protocol, "noise", None), "kind", None)
    if getattr(protocol, "randomness", None) == "os":
        # The federated ECDF releases name their source this way (shares, masks, noise).
        kind = "deployment"
    guarantee = getattr(protocol, "guarantee", None)
    private = guarantee is None or guarantee.model is not PrivacyModel.NONE
    if rng is None and private and kind != "deployment":
        raise ValueError(f"protocol {protocol.name!r} would draw its private values from a "
                         "simulation generator: build it with "
                         "noise=fedustat.privacy.DeploymentNoise() for a networked run, or "
                         "pass a seed to ask for simulation randomness explicitly")
    if not private:
        return "none"
    return "deployment" if kind == "deployment" else "simulation"


def release_summary(estimate: Estimate, level: float = 0.95) -> dict[str, Any]:
    """What the server tells each party at the end: the DP value, its interval and budget.

    Built from the release's published fields only (value, error bar, guarantee). The
    value is in the statistic's range (the protocol's server step clips it); the raw
    value before clipping goes with it. No interval without an error bar (None).
    """
    interval = (list(map(float, estimate.confidence_interval(level)))
                if estimate.std_error is not None else None)
    guarantee = estimate.privacy
    return {"value": float(estimate.value), "raw_value": float(estimate.raw_value),
            "clip_range": None if estimate.clip_range is None else list(estimate.clip_range),
            "std_error": None if estimate.std_error is None else float(estimate.std_error),
            "interval": interval, "level": level,
            "epsilon": None if guarantee is None else _public(float(guarantee.epsilon)),
            "delta": None if guarantee is None else float(guarantee.delta),
            "noise": estimate.noise}
