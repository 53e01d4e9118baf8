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
* ``Pass``: a service role (a shuffler, a dealer) with nothing to send this round; its
  request names the run and the round (``{"run", "round"}``, JSON), so a pass resent to a
  restarted server counts once; the reply is what was addressed to it (relayed rows, its
  part of the server's message, or the release).
* ``Abort``: a party that refuses what it received (a relayed payload that fails
  authentication), or whose own records fail a public check, says why (for its records,
  only the name of the check); the server stops the run with that reason, naming the party.
* ``Presence``: held open by every member for the whole run. When a member's connection
  drops, gRPC ends the call and the server learns it at once; the reply, when the run
  ends, is why it stopped (empty after a release).

Timeouts come from one number, the stage timeout ``T`` that server and parties are given:
the server ends a stage (joining, each round) after ``T`` seconds, and a party waits for
each answer up to :func:`party_deadline` ``(T) = 1.25 T + 1 s``. The margin covers the
server's step after the last frame, its watchdog's polling and the reply's way back, so
the server always decides first and names who was silent; an honest party never gives up
before the server has answered it.
"""

from __future__ import annotations

import contextvars
import ctypes
import ctypes.util
import dataclasses
import enum
import functools
import hashlib
import json
import math
import types
from typing import Any

import numpy as np

from fedustat.protocols.base import Estimate, Protocol

SERVICE = "fedustat.Exchange"
JOIN = f"/{SERVICE}/Join"
ROUND = f"/{SERVICE}/Round"
RELAY = f"/{SERVICE}/Relay"
ABORT = f"/{SERVICE}/Abort"
PASS = f"/{SERVICE}/Pass"
# Every silo's certificate, fetched once by a party before its first relay round (the
# join reply stays small: star protocols never need them).
PEERS = f"/{SERVICE}/Peers"
PRESENCE = f"/{SERVICE}/Presence"
# A detached member's second call for an answer its first call did not wait for (a join's
# assignment, a round's reply): the device reconnects when it is online again.
FETCH = f"/{SERVICE}/Fetch"
#: gRPC metadata key of a detached member's call: the seconds the server may hold the call
#: before answering "not yet" (REPLY_PENDING), so the member need not keep a connection
#: open while the others catch up.
HOLD_METADATA = "fedustat-hold"
# Answered at once: lets a party tell a channel that reaches the server from one that
# fails, with gRPC's reason for the failure.
PING = f"/{SERVICE}/Ping"
#: Longest reason a party may give when it stops a run (bytes of UTF-8).
MAX_ABORT_REASON = 1000
#: Longest join hello (its public configuration included).
MAX_HELLO_BYTES = 1 << 20
#: How a party's abort reason starts when its own records failed a public check.
VALIDATION_FAILED = "failed validation: "

# First byte of a Round reply.
REPLY_MESSAGE = b"M"
REPLY_RELEASE = b"R"
REPLY_RELAYED = b"P"
#: The answer is not ready within the call's hold: ask again with Fetch.
REPLY_PENDING = b"W"

# gRPC refuses messages above 4 MiB by default; a silo's frame may be larger.
MAX_MESSAGE_BYTES = 1 << 30
CHANNEL_OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
#: The server also pings idle connections (HTTP/2 keepalive, gRPC's doc/keepalive.md): a
#: member whose machine vanished without closing its socket is dropped within 30 s, which
#: ends its presence call as a killed process's closed socket does at once.
#: gRPC core refuses or cancels calls that wait for the server's loop to pick them up
#: beyond its pending-request limits (default 1000 soft, with random early drops, and 3000
#: hard) and beyond 30 s unrequested: a burst of thousands of devices (every member's
#: round frame arrives when the round before ends) would lose calls with CANCELLED or
#: RESOURCE_EXHAUSTED. One process holds at most its open-files limit of connections,
#: each with two calls.
PENDING_REQUESTS = 1 << 17
SERVER_OPTIONS = [*CHANNEL_OPTIONS,
                  ("grpc.keepalive_time_ms", 20_000),
                  ("grpc.keepalive_timeout_ms", 10_000),
                  ("grpc.keepalive_permit_without_calls", 1),
                  ("grpc.http2.max_pings_without_data", 0),
                  ("grpc.server.max_pending_requests", PENDING_REQUESTS),
                  ("grpc.server.max_pending_requests_hard_limit", PENDING_REQUESTS),
                  ("grpc.server_max_unrequested_time_in_server", 3600),
                  # gRPC binds with SO_REUSEPORT by default: a second server on the same
                  # port would then silently take half of the connections (a stale server
                  # beside its restart). Off, the second one fails to listen instead.
                  ("grpc.so_reuseport", 0)]
#: A device's channel: its own TLS connection (its own identity), never shared with
#: another identity's channel (gRPC shares subchannels between channels otherwise); a
#: refused connection is retried within 5 s, not gRPC's default backoff of up to 2 minutes.
DEVICE_CHANNEL_OPTIONS = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1),
                          ("grpc.initial_reconnect_backoff_ms", 250),
                          ("grpc.max_reconnect_backoff_ms", 5000)]


#: glibc's mallopt parameter for the number of malloc arenas (M_ARENA_MAX).
_M_ARENA_MAX = -8
#: Arenas a server process keeps (measured on ldp-quantized's collection of 10^4 devices:
#: peak 213 MiB with glibc's default of 8 per core, 172 MiB with 2, and no slower).
HEAP_ARENAS = 2


def listen(server: Any, address: str, credentials: Any) -> int:
    """Bind ``server`` to ``address`` with TLS ``credentials``; the port, or an OSError
    that says why (the address is not this machine's, or another process holds the
    port: servers do not share ports, ``grpc.so_reuseport`` is off)."""
    try:
        port = server.add_secure_port(address, credentials)
    except RuntimeError:  # grpc.aio's refusal to bind
        port = 0
    if port == 0:
        raise OSError(f"cannot listen on {address}: give a HOST:PORT of this machine whose "
                      "port no other process holds (port 0 picks a free one)")
    return port


def limit_heap_arenas(arenas: int = HEAP_ARENAS) -> bool:
    """Cap glibc's malloc arenas in this process before a server starts; True if done.

    gRPC core's threads each allocate in their own arena; the buffers every TLS handshake
    and connection free stay there, fragmented, so a server's resident size grew with
    the number of devices it had served although nothing stayed alive (under 2 MiB of
    live Python objects after 10^4 devices). With two arenas they are reused. Returning
    them with ``malloc_trim`` every few seconds also kept it flat but cost a fifth of the
    throughput. Elsewhere than glibc this does nothing.
    """
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, int(arenas)))


def load_grpc(purpose: str) -> Any:
    """gRPC with its asyncio API, imported when ``purpose`` first needs it (an optional
    dependency: the error says which extra installs it)."""
    try:
        import grpc
        import grpc.aio
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(f"{purpose} need gRPC: install fedustat's network extra (pip "
                          "install '.[network]' in the fedustat checkout)") from exc
    return grpc


def party_deadline(stage_timeout: float) -> float:
    """How long a party waits for each answer when the stage timeout is ``stage_timeout``:
    ``1.25 T + 1`` seconds, longer than any stage the server waits out (see the module
    docstring), so the server's verdict always reaches the party first."""
    return 1.25 * float(stage_timeout) + 1.0


def tls_failure(details: str) -> str | None:
    """What a failed connection's gRPC details say about the TLS handshake, in words, or
    ``None`` when it is not a TLS failure (the server not up yet, a refused port)."""
    text = details.lower()
    if "hostname verification" in text or "peer name" in text \
            or "no match found for server name" in text:
        return ("the server's certificate does not name the host this party connects to "
                "(check --server against the host names given to `fedustat certs --host`)")
    if "handshake" in text or "certificate" in text or "ssl" in text or "tls" in text:
        return ("the server's certificate is not signed by this party's CA (ca.pem from "
                "another deployment?)")
    return None


def public_reason(error: BaseException) -> str:
    """What a party may tell the server and the others about its own step's failure: the
    public check its records failed, never the values (``RecordCheckError.check``), or
    only the kind of error for anything else (its message may quote the records)."""
    check = getattr(error, "check", None)
    if isinstance(check, str):
        return f"{VALIDATION_FAILED}{check}"
    return (f"its own step failed ({type(error).__name__}; the details stay with that "
            "party)")


class NetworkRunError(RuntimeError):
    """A networked run that stopped without a release (names the parties at fault)."""


#: Arrays with at most this many elements are listed in a configuration; longer ones are
#: described by shape, dtype and a SHA-256 digest of their bytes (a grid of 2^20 points
#: must not make the join hello megabytes long).
LISTED_ELEMENTS = 16


class UndescribedError(TypeError):
    """A protocol holds a setting that cannot be described as public plain data."""


#: Set while the derived settings are described: two machines computing the same setting
#: from the same arguments may differ in the last bits (vectorized exp and log differ
#: between CPUs), so derived numbers are compared to 12 significant digits and derived
#: float arrays by their float32 bytes. The arguments are compared exactly.
_DERIVED: contextvars.ContextVar[bool] = contextvars.ContextVar("derived", default=False)


def _float(value: float) -> Any:
    # JSON has no infinities or NaN; their names are unambiguous.
    if not math.isfinite(value):
        return str(float(value))
    return float(f"{value:.12g}") if _DERIVED.get() else float(value)


def _callable_name(value: Any) -> str:
    module = getattr(value, "__module__", None) or ""
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) \
        or type(value).__qualname__
    return f"{module}.{name}" if module else name


def describe(value: Any, where: str = "value", depth: int = 0) -> Any:
    """``value`` as public plain data (JSON: numbers, strings, lists, objects).

    Numbers, strings, booleans and ``None`` stand for themselves (infinities by name);
    tuples, lists, sets and dicts element by element; arrays as lists, or by shape, dtype
    and digest beyond :data:`LISTED_ELEMENTS` elements; a protocol nested in another by
    its :func:`public_configuration`; functions by their qualified name
    (a ``functools.partial`` with its bound arguments, a closure with the values it
    closes over); an object with a ``public_description()`` method by what that returns
    (how kernels, noise sources and protocols describe themselves); a dataclass by its
    constructor fields, except those whose name starts with ``_``. Anything else raises
    :class:`UndescribedError` naming where it sits: a setting that changes what is
    computed must never be left out of what server and parties compare.
    """
    if depth > 24:
        raise UndescribedError(f"public configuration: {where} nests too deeply (a cycle?)")
    deeper = depth + 1
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return _float(float(value))
    if isinstance(value, enum.Enum):
        return describe(value.value, where, deeper)
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf" and value.size > LISTED_ELEMENTS:
            kind = np.float32 if value.dtype.kind == "f" and _DERIVED.get() else value.dtype
            data = np.ascontiguousarray(value, dtype=np.dtype(kind).newbyteorder("<"))
            return {"shape": list(value.shape), "dtype": data.dtype.str,
                    "sha256": hashlib.sha256(data.tobytes()).hexdigest()}
        if value.dtype.kind not in "biufUS" and value.size > LISTED_ELEMENTS:
            raise UndescribedError(f"public configuration: {where} is an array of "
                                   f"{value.dtype} with {value.size} elements")
        return describe(value.tolist(), where, deeper)
    if isinstance(value, tuple | list):
        return [describe(v, f"{where}[{i}]", deeper) for i, v in enumerate(value)]
    if isinstance(value, set | frozenset):
        return sorted((describe(v, where, deeper) for v in value), key=json.dumps)
    if isinstance(value, dict):
        return {str(k): describe(v, f"{where}.{k}", deeper) for k, v in value.items()}
    if isinstance(value, Protocol):
        # A protocol built on another (a wrapper) carries the inner one's settings.
        return public_configuration(value)
    own = getattr(value, "public_description", None)
    if callable(own) and not isinstance(value, type):
        return describe(own(), where, deeper)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)
                  if f.init and not f.name.startswith("_")}
        return {"type": type(value).__qualname__,
                **{k: describe(v, f"{where}.{k}", deeper) for k, v in fields.items()}}
    if isinstance(value, functools.partial):
        bound = {"function": _callable_name(value.func)}
        if value.args:
            bound["args"] = describe(list(value.args), f"{where}.args", deeper)
        bound.update({k: describe(v, f"{where}.{k}", deeper)
                      for k, v in value.keywords.items()})
        return bound
    if isinstance(value, types.FunctionType):
        cells = value.__closure__ or ()
        if not cells:
            return _callable_name(value)
        return {"function": _callable_name(value),
                "closure": {name: describe(cell.cell_contents, f"{where}.{name}", deeper)
                            for name, cell in zip(value.__code__.co_freevars, cells,
                                                  strict=True)}}
    if isinstance(value, types.BuiltinFunctionType | np.ufunc | type):
        return _callable_name(value)
    raise UndescribedError(
        f"public configuration: {where} is a {type(value).__qualname__}, which does not "
        "describe itself; give its class a public_description() method returning plain "
        "data (or make it a dataclass of public fields), or keep it out of the "
        "configuration with a name starting with '_'")


#: Constructor arguments that only name where the private draws come from.
SOURCE_ARGUMENTS = ("noise", "randomness")


def _settings(protocol: Protocol) -> dict[str, Any]:
    """What a protocol is configured with: its attributes, except private ones (``_name``)
    and instance-level replacements of its methods (instrumentation, not settings), plus
    what its ``public_settings()`` adds (public settings it keeps under private names)."""
    cls = type(protocol)
    settings = {key: value for key, value in vars(protocol).items()
                if not key.startswith("_") and not callable(getattr(cls, key, None))}
    extra = getattr(protocol, "public_settings", None)
    if callable(extra):
        settings.update(extra())
    return settings


def public_configuration(protocol: Protocol) -> dict[str, Any]:
    """Everything that fixes what ``protocol`` computes and what it guarantees, as plain
    data: its name and class; ``arguments``, what it was built with
    (:attr:`~fedustat.protocols.base.Protocol.public_arguments`: ``k``, ``bounds``, the
    kernel with its columns and bounds, ``epsilon``...); and ``settings``, every public
    attribute it derived from them (quantization plans, fixed-point formats, designs,
    grids, the noise source's kind), nested objects described by themselves
    (:func:`describe`).

    Server and parties compare it key by key at join (:func:`configuration_differences`);
    a setting that cannot be described raises :class:`UndescribedError`.
    """
    # The source of the private draws is compared as the run resolved it (settings:
    # ``noise``/``randomness``), not as it was passed: a party built with noise unset and
    # a server given DeploymentNoise() run the same deployment-grade protocol.
    arguments = {key: describe(value, key)
                 for key, value in sorted(protocol.public_arguments.items())
                 if key not in SOURCE_ARGUMENTS}
    derived = _DERIVED.set(True)
    try:
        settings = {key: describe(value, key)
                    for key, value in sorted(_settings(protocol).items())}
    finally:
        _DERIVED.reset(derived)
    return {"protocol": protocol.name, "class": type(protocol).__qualname__,
            "arguments": arguments, "settings": settings}


def fingerprint(protocol: Protocol) -> str:
    """A short hash of :func:`public_configuration` (logs, wire frames, key derivation)."""
    return configuration_hash(protocol.name, public_configuration(protocol))


def configuration_hash(name: str, configuration: dict[str, Any]) -> str:
    """``name:<16 hex digits>``, the SHA-256 of the configuration's canonical JSON."""
    text = json.dumps(configuration, sort_keys=True)
    return f"{name}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def _differing(a: Any, b: Any, path: str, out: list[tuple[str, Any, Any]]) -> None:
    """Where two described values differ, as ``(a.b[0].c, mine, theirs)``: nested
    objects key by key, lists of objects entry by entry, anything else whole (a list of
    numbers reads ``bounds = [0.0, 1.0]``, a value missing on one side ``(not set)``)."""
    if isinstance(a, dict) and isinstance(b, dict) and not _is_digest(a) \
            and not _is_digest(b):
        for key in list(a) + [k for k in b if k not in a]:
            _differing(a.get(key, _ABSENT), b.get(key, _ABSENT),
                       f"{path}.{key}" if path else str(key), out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b) \
            and any(isinstance(v, dict | list) for v in [*a, *b]):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _differing(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append((path, a, b))


def _is_digest(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"shape", "dtype", "sha256"}


def _shown(value: Any) -> str:
    if value is _ABSENT:
        return "(not set)"
    if value is None:
        return "none"
    if _is_digest(value):
        size = math.prod(value["shape"])
        return f"{size} values (sha256 {value['sha256'][:12]})"
    if isinstance(value, list) and len(value) > 8:
        head = ", ".join(json.dumps(v) for v in value[:3])
        return f"[{head}, ... {json.dumps(value[-1])}] ({len(value)} values)"
    text = json.dumps(value)
    return text if len(text) <= 120 else text[:117] + "..."


_ABSENT = object()


def configuration_differences(mine: dict[str, Any], theirs: dict[str, Any], *,
                              me: str = "party", them: str = "server") -> list[str]:
    """Each option on which two public configurations differ, in words:
    ``"k = 4 (party) vs 8 (server)"``; empty when they agree.

    The protocol's name and the arguments it was built with come first, by their own
    names (``k``, ``kernel.bounds``); the derived settings are listed only when the
    arguments agree (they follow from them otherwise), as ``settings.<path>``.
    """
    found: list[tuple[str, Any, Any]] = []
    _differing(mine, theirs, "", found)
    found.sort(key=lambda entry: _order(entry[0]))
    if any(not path.startswith("settings.") for path, _, _ in found):
        found = [entry for entry in found if not entry[0].startswith("settings.")]
    return [f"{path.removeprefix('arguments.')} = {_shown(a)} ({me}) vs {_shown(b)} ({them})"
            for path, a, b in found]


def _order(key: str) -> tuple[int, int, str]:
    # The protocol's name first, then what it was built with, then what it derived;
    # within each, shallow options before nested ones.
    group = 0 if key in ("protocol", "class") else 2 if key.startswith("settings.") else 1
    return (group, key.count("."), key)


def resolve_randomness(protocol: Protocol, rng: Any) -> tuple[Protocol, str]:
    """The protocol a networked role runs and the noise grade of the run.

    Networked runs use deployment randomness unless a seed asks for simulation randomness
    explicitly (to compare with the simulator): without a seed, a protocol whose source is
    undecided draws from the OS CSPRNG (:meth:`Protocol.for_run`), and one built with a
    simulation source is refused (its private draws would come from a non-CSPRNG source
    nobody asked for).
    """
    chosen = protocol.for_run(rng)
    grade = chosen.randomness_grade
    if rng is None and grade == "simulation":
        raise ValueError(f"protocol {protocol.name!r} was built with a simulation noise "
                         "source, which a networked run without a seed refuses: leave its "
                         "noise unset (deployment randomness), or pass a seed to ask for "
                         "simulation randomness explicitly")
    return chosen, grade


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
            "epsilon": None if guarantee is None else _float(float(guarantee.epsilon)),
            "delta": None if guarantee is None else float(guarantee.delta),
            "noise": estimate.noise}
