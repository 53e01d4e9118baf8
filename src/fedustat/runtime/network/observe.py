"""Operating a networked run: a health check, Prometheus metrics and structured logs.

Both servers (the lockstep :func:`~fedustat.runtime.network.server.serve` and the
collection window :func:`~fedustat.runtime.network.collect.collect`) report to one
:class:`Observer`:

* **Metrics** (off by default): with a metrics address the observer serves, on its own
  HTTP listener in a background thread, ``/metrics`` in the Prometheus text format
  (rendered by ``prometheus_client``, the ``network`` extra) and ``/health``, a JSON
  object saying whether the server is serving and the run's state. The numbers are
  counts of public events (members joined, frames accepted, refusals by their public
  reason, bytes on the wire) and public facts of the run (its round, its stage's age,
  its store's size on disk); the gauges are read from the server's state at each scrape
  (:meth:`Observer.bind`), so a scrape costs the event loop nothing.
* **Logs**: one record per server event (start, join, refusal, round end, window close,
  release, failure) on the ``fedustat.network`` logger, carrying the event's name, the
  run id and counts or public identities (certificate names) as fields.
  :func:`configure_logging` writes them one JSON object per line (or as text).

Neither ever carries a party's data: no records, no report or frame bodies, no shares,
no noise draws, and not the release's value either (it goes to the server's caller). The
servers hand the observer only the fields listed in :data:`LOG_FIELDS`; a refusal's
public reason is the text the refused member itself is told (which names options of the
public configuration or a frame's field, never its values), cut to
:data:`MAX_REASON_CHARS` characters.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any, TextIO
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

__all__ = ["LOGGER", "LOG_FIELDS", "Observer", "configure_logging", "observed_by", "parse_address",
           "store_bytes"]

#: The logger every server event goes to (a library adds no handler but a null one: the
#: application, or ``fedustat serve --log-format``, chooses where they go).
LOGGER = "fedustat.network"
logging.getLogger(LOGGER).addHandler(logging.NullHandler())

#: The fields a server event may carry besides time, level, event, server and run: public
#: identities and counts only. :meth:`Observer.event` refuses any other (a new field must
#: be added here, where its publicness is decided).
LOG_FIELDS = frozenset({
    "identity", "reason", "detail", "protocol", "address", "metrics_address",
    "parties", "joined", "expected", "round", "rounds", "arrived", "reports", "rows",
    "refused", "dropped", "absent", "n_parties", "closed_by", "seconds", "timeout",
    "window_seconds", "quorum", "received_bytes", "sent_bytes", "store", "noise",
})

#: Longest public reason a refusal or failure log line carries (characters).
MAX_REASON_CHARS = 300

#: The reasons of refused calls of the lockstep server, by their gRPC status, where the
#: call does not name a more precise one (a call refused because the run already failed
#: is not counted: the failure is logged once).
REASON_BY_STATUS = {"ALREADY_EXISTS": "duplicate", "PERMISSION_DENIED": "identity",
                    "INVALID_ARGUMENT": "invalid", "FAILED_PRECONDITION": "out_of_turn"}

_PROMETHEUS_MISSING = ("metrics need the prometheus_client package: install fedustat's "
                       "network extra (pip install '.[network]' in the fedustat checkout)")


def parse_address(address: str, name: str = "metrics_address") -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``; an empty host is localhost) as ``(host, port)``."""
    text = str(address).strip()
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not sep or not 0 <= port <= 65535:
        raise ValueError(f"{name} must be HOST:PORT with a port 0-65535 (0 picks a free one), "
                         f"e.g. 127.0.0.1:9464; got {address!r}")
    return host, port


def observed_by(metrics_address: str | None, observer: Observer | None
                ) -> tuple[Observer, bool]:
    """A server's observer and whether the server owns it (then it stops it at the end):
    the caller's ``observer``, or a new one serving ``metrics_address`` (if given)."""
    if observer is not None and metrics_address is not None:
        raise ValueError("give metrics_address or observer, not both")
    if observer is not None and not isinstance(observer, Observer):
        raise TypeError(f"observer must be an Observer, got {type(observer).__name__}")
    return (observer, False) if observer is not None else (Observer(metrics_address), True)


def store_bytes(path: str | Path) -> int:
    """Bytes of the regular files under ``path`` (a run directory or a database file)."""
    root = Path(path)
    with contextlib.suppress(OSError):
        if root.is_file():
            return root.stat().st_size
    total = 0
    stack = [root]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
    return total


def _cut(text: Any) -> str:
    text = str(text)
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 3] + "..."


class Observer:
    """The metrics, health and event log of one server run.

    ``Observer()`` logs events and counts them; ``Observer("127.0.0.1:0")`` also serves
    ``/metrics`` and ``/health`` there once the server starts it (port 0: a free port,
    :attr:`port` once bound). A caller that passes its own observer to ``serve`` or
    ``collect`` owns it: the endpoint stays up after the run (the final counts stay
    scrapable) until the caller's :meth:`stop`; one made by ``metrics_address=`` stops
    with its server.
    """

    def __init__(self, metrics_address: str | None = None) -> None:
        self.metrics_address = None if metrics_address is None else parse_address(
            metrics_address)
        if self.metrics_address is not None:
            try:
                import prometheus_client  # noqa: F401
            except ImportError:
                raise ImportError(_PROMETHEUS_MISSING) from None
        self.logger = logging.getLogger(LOGGER)
        self.server = "server"
        self.run = ""
        self.protocol = ""
        self.started = time.monotonic()
        self.outcome: str | None = None  # "released" or "failed" once the run ended
        self.serving = False
        self.store: Path | None = None
        self._view: Callable[[], dict[str, Any]] = dict
        # Counters touched by the server's one event loop; a scrape reads copies.
        self.accepted = 0
        self.refusals: dict[str, int] = {}
        self.received_bytes = 0
        self.sent_bytes = 0
        self.rounds_ended = 0
        self._http: Any = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    # ------------------------------------------------------------ set-up
    def bind(self, server: str, run: str, protocol: str,
             view: Callable[[], dict[str, Any]], store: str | Path | None = None) -> None:
        """Attach the run: its kind (``serve``/``collect``), id, protocol, and ``view``,
        which returns its public progress (``state``, ``round``, ``arrived``,
        ``expected``, ``joined``, ``stage_seconds``, ``stage_timeout``, optionally
        ``dropped``, ``rows``): called at each scrape, from the listener's thread, so it
        reads only numbers and lengths. ``store``: a directory or file whose size on disk
        is the run's store."""
        self.server, self.run, self.protocol, self._view = server, run, protocol, view
        self.store = None if store is None else Path(store)
        self.started = time.monotonic()
        self.outcome = None

    def start(self) -> int | None:
        """Start the metrics listener (if an address was given); return its port."""
        self.serving = True
        if self.metrics_address is None or self._http is not None:
            return self.port
        from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app

        registry = CollectorRegistry(auto_describe=True)
        registry.register(_RunCollector(self))
        ProcessCollector(registry=registry)  # resident memory, CPU, open files
        metrics_app = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            path = environ.get("PATH_INFO", "/")
            if path in ("/health", "/healthz"):
                status, body = self.health()
                start_response("200 OK" if status == 200 else "503 Service Unavailable",
                               [("Content-Type", "application/json")])
                return [json.dumps(body).encode()]
            if path == "/metrics":
                return metrics_app(environ, start_response)
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"fedustat serves /metrics and /health\n"]

        host, port = self.metrics_address
        server_class = _ThreadingIPv6Server if ":" in host else _ThreadingServer
        try:
            self._http = make_server(host, port, app, server_class, _QuietHandler)
        except OSError as exc:
            raise OSError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}"
                          ) from None
        self.port = int(self._http.server_port)
        self._thread = threading.Thread(target=self._http.serve_forever,
                                        name="fedustat-metrics", daemon=True)
        self._thread.start()
        return self.port

    @property
    def address(self) -> str | None:
        """``host:port`` of the metrics listener once it listens."""
        if self.metrics_address is None or self.port is None:
            return None
        host = self.metrics_address[0]
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def stop(self) -> None:
        """Stop serving: the health check answers no more, the listener closes."""
        self.serving = False
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # ------------------------------------------------------------ events
    def event(self, event: str, level: int = logging.INFO, **fields: Any) -> None:
        """Log one server event with public fields (:data:`LOG_FIELDS`)."""
        unknown = set(fields) - LOG_FIELDS
        if unknown:
            raise ValueError(f"log field(s) {sorted(unknown)} are not declared public "
                             "(observe.LOG_FIELDS)")
        if self.logger.isEnabledFor(level):
            self.logger.log(level, event, extra={"fedustat": {
                "event": event, "server": self.server, "run": self.run, **fields}})

    def joined(self, identity: str, joined: int) -> None:
        self.event("join", identity=identity, joined=joined)

    def accept(self, received: int) -> None:
        """A member's frame or report was accepted (``received`` bytes)."""
        self.accepted += 1
        self.received_bytes += int(received)

    def reported(self, identity: str, received: int) -> None:
        """A device's report was accepted (logged at debug level: one line per device)."""
        self.accept(received)
        self.event("report", logging.DEBUG, identity=identity)

    def sent(self, size: int) -> None:
        self.sent_bytes += int(size)

    def refused(self, reason: str, identity: str, detail: str = "") -> None:
        """A call refused for a public ``reason`` (a label), told ``detail``."""
        self.refusals[reason] = self.refusals.get(reason, 0) + 1
        self.event("refused", logging.WARNING, identity=identity, reason=reason,
                   detail=_cut(detail))

    def refused_call(self, status: str, identity: str, detail: str,
                     reason: str | None = None) -> None:
        """A lockstep call refused with gRPC ``status`` (its name): counted by ``reason``
        or the status's (:data:`REASON_BY_STATUS`); a call of a failed run is not."""
        label = reason or REASON_BY_STATUS.get(status)
        if label is not None:
            self.refused(label, identity, detail)

    def round_ended(self, round_: int, arrived: int) -> None:
        self.rounds_ended += 1
        self.event("round_end", round=round_, arrived=arrived)

    def released(self, **fields: Any) -> None:
        self.outcome = "released"
        self.event("release", **fields)

    def failed(self, reason: str) -> None:
        if self.outcome is None:
            self.outcome = "failed"
            self.event("failure", logging.ERROR, reason=_cut(reason))

    # ------------------------------------------------------------ reading
    def progress(self) -> dict[str, Any]:
        """The run's public progress now (its view, with the outcome once it ended)."""
        view = dict(self._view())
        if self.outcome is not None:
            view["state"] = self.outcome
        view.setdefault("state", "starting")
        return view

    def health(self) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body): 200 while serving (or after a release), 503 otherwise."""
        view = self.progress()
        healthy = view["state"] == "released" or (self.serving and view["state"] != "failed")
        body = {"status": "ok" if healthy else "unavailable", "serving": self.serving,
                "server": self.server, "run": self.run, "protocol": self.protocol,
                "uptime_seconds": round(time.monotonic() - self.started, 3),
                **{k: view[k] for k in ("state", "round", "arrived", "expected", "joined")
                   if k in view}}
        return (200 if healthy else 503), body

    def counts(self) -> dict[str, Any]:
        """The counters as numbers (what the metrics expose), for tests and summaries."""
        return {"accepted": self.accepted, "refused": dict(self.refusals),
                "received_bytes": self.received_bytes, "sent_bytes": self.sent_bytes,
                "rounds_ended": self.rounds_ended}


#: States a run may be in, per server (a StateSet metric: one of them is 1).
STATES = {"serve": ("starting", "joining", "running", "released", "failed"),
          "collect": ("starting", "collecting", "closed", "released", "failed")}


class _RunCollector:
    """The run's metric families, built from the observer at each scrape."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            InfoMetricFamily,
            StateSetMetricFamily,
        )

        o = self.observer
        view = o.progress()
        labels = {"server": o.server}
        yield InfoMetricFamily("fedustat_run", "The run this server serves (public).",
                               value={"run": o.run, "protocol": o.protocol,
                                      "server": o.server})
        yield StateSetMetricFamily("fedustat_run_state", "The run's state.",
                                   value={s: s == view["state"] for s in STATES.get(
                                       o.server, (view["state"],))})

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=list(labels))
            family.add_metric(list(labels.values()), float(value))
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=list(labels))
            family.add_metric(list(labels.values()), float(value))
            return family

        yield gauge("fedustat_up", "1 while the server is serving.", o.serving)
        yield gauge("fedustat_released", "1 once the run's release is made.",
                    view["state"] == "released")
        yield gauge("fedustat_failed", "1 once the run has failed (no release).",
                    view["state"] == "failed")
        yield gauge("fedustat_uptime_seconds", "Seconds since the run's server started.",
                    time.monotonic() - o.started)
        yield gauge("fedustat_parties_joined",
                    "Members that have joined (lockstep) or reported (collection).",
                    view.get("joined", 0))
        yield gauge("fedustat_parties_expected",
                    "Members the run waits for: every member (lockstep) or the quorum "
                    "(collection; 0 without one).", view.get("expected", 0))
        yield gauge("fedustat_parties_dropped",
                    "Silos that fell silent in a round that went on without them.",
                    view.get("dropped", 0))
        yield gauge("fedustat_round", "The current round (0 while joining or collecting).",
                    view.get("round", 0))
        yield gauge("fedustat_round_arrived",
                    "Members whose frame of the current round has arrived.",
                    view.get("arrived", 0))
        yield gauge("fedustat_stage_seconds",
                    "Seconds since the current stage (joining, a round, the window) began.",
                    view.get("stage_seconds", 0.0))
        yield gauge("fedustat_stage_timeout_seconds",
                    "Seconds a stage may last (the stage timeout, or the window).",
                    view.get("stage_timeout", 0.0))
        if "rows" in view:
            yield gauge("fedustat_rows", "Rows in the accepted reports.", view["rows"])
        yield counter("fedustat_rounds_total", "Rounds that ended.", o.rounds_ended)
        yield counter("fedustat_reports_accepted_total",
                      "Frames (lockstep) or reports (collection) accepted.", o.accepted)
        refused = CounterMetricFamily("fedustat_reports_refused_total",
                                      "Calls refused, by public reason.",
                                      labels=["server", "reason"])
        for reason, count in sorted(dict(o.refusals).items()):
            refused.add_metric([o.server, reason], float(count))
        yield refused
        yield counter("fedustat_received_bytes_total",
                      "Bytes of accepted frames and reports (framing included).",
                      o.received_bytes)
        yield counter("fedustat_sent_bytes_total", "Bytes of the replies sent.", o.sent_bytes)
        if o.store is not None:
            yield gauge("fedustat_store_bytes",
                        "Bytes on disk of the run's store (database and partitions).",
                        store_bytes(o.store))


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingIPv6Server(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not server events: not logged."""


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, event, server, run, fields."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        fields = getattr(record, "fedustat", None) or {"event": "log",
                                                        "message": record.getMessage()}
        return json.dumps({"time": stamp.replace("+00:00", "Z"),
                           "level": record.levelname.lower(), **fields}, default=str)


class _TextFormatter(logging.Formatter):
    """``time level event key=value ...`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        fields = dict(getattr(record, "fedustat", None) or {"event": record.getMessage()})
        event = fields.pop("event")
        pairs = " ".join(f"{k}={json.dumps(v) if isinstance(v, str) and ' ' in v else v}"
                         for k, v in fields.items())
        return f"{stamp.replace('+00:00', 'Z')} {record.levelname.lower()} {event} {pairs}"


def configure_logging(log_format: str = "json", level: str = "info",
                      stream: TextIO | None = None) -> logging.Handler | None:
    """Write the servers' events to ``stream`` (default standard error): ``"json"`` (one
    object per line), ``"text"``, or ``"none"`` (nothing). Returns the handler added."""
    if log_format not in ("json", "text", "none"):
        raise ValueError(f"log_format must be 'json', 'text' or 'none', got {log_format!r}")
    levels = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
              "error": logging.ERROR}
    if level not in levels:
        raise ValueError(f"log level must be one of {', '.join(levels)}, got {level!r}")
    if log_format == "none":
        return None
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter() if log_format == "json" else _TextFormatter())
    logger = logging.getLogger(LOGGER)
    logger.addHandler(handler)
    logger.setLevel(levels[level])
    return handler
