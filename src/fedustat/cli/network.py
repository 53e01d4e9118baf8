"""The networked roles: ``certs``, ``serve``, ``party``, ``collect``, ``report`` and
``service`` (docs/network.md, docs/collection.md, docs/deployment-guide.md)."""

from __future__ import annotations

import argparse
import json
import math
import resource
from pathlib import Path
from typing import Any

import numpy as np

from fedustat import catalogue, datasets
from fedustat.catalogue import STATISTICS, Statistic
from fedustat.cli._data import _kernel, _party_records, _protocol_params
from fedustat.cli._messages import did_you_mean
from fedustat.cli._options import (
    _HelpFormatter,
    add_bounds,
    add_column_domain,
    add_delta,
    add_epsilon,
    add_operations_options,
    add_precision,
    add_protocol_parameters,
    add_seed,
)
from fedustat.cli._parsing import (
    _check_file,
    _parse_pair,
    _parse_params,
    _parse_value,
    _positive_int,
)
from fedustat.privacy.noise import DeploymentNoise
from fedustat.protocols import registry
from fedustat.runtime import network
from fedustat.runtime.network import run_journal
from fedustat.stats.kernels import Kernel


def _network_protocol(args: argparse.Namespace
                      ) -> tuple[Statistic | None, Kernel | None, Any]:
    """The protocol a networked role runs, built from the same options on every side.

    A curve release (``registry.is_curve``) has no statistic nor kernel: (None, None, it).
    """
    if args.epsilon <= 0 or math.isnan(args.epsilon):
        raise SystemExit(f"error: --epsilon must be > 0, got {args.epsilon}")
    if registry.is_curve(args.protocol):
        return None, None, _network_curve(args)
    known = [entry.name for entry in registry.available()]
    if args.protocol not in known:
        curves = [entry.name for entry in registry.available_curves()]
        raise SystemExit(f"error: unknown protocol {args.protocol!r}; available protocols: "
                         f"{', '.join(known)}; curve releases: {', '.join(curves)}"
                         f"{did_you_mean(args.protocol, known + curves)}")
    if args.statistic is None:
        raise SystemExit(f"error: protocol {args.protocol} needs --statistic (one of "
                         f"{', '.join(catalogue.names('u-statistic'))})")
    spec = STATISTICS[args.statistic]
    if spec.needs_bounds and not args.bounds:
        raise SystemExit(f"error: {spec.name} needs --bounds LO,HI (public bounds, the same "
                         "on every side of the run)")
    kernel = _kernel(spec, args)
    params = _protocol_params(spec, kernel, args)
    registry.check_parameters(args.protocol, params)
    if args.seed is None:
        # Deployment randomness unless a seed asks for simulation streams explicitly.
        params["noise"] = DeploymentNoise()
    protocol = registry.make(args.protocol, kernel, epsilon=args.epsilon, delta=args.delta,
                             **params)
    return spec, kernel, protocol


#: Curve parameters given as comma-separated lists, and the type of their entries.
_CURVE_LISTS: dict[str, type] = {"thresholds": float, "query": int}


def _network_curve(args: argparse.Namespace) -> Any:
    """A curve release (``ecdf-secagg``, ``ecdf-fss``) from the networked roles' options.

    The grid is ``--bounds LO,HI`` (with ``--precision``, its spacing) or
    ``--param thresholds=t1,t2,...``; ``--param query=i,j,...`` picks grid positions. No
    seed means deployment randomness (``randomness="os"``: shares, masks and noise).
    """
    name = args.protocol
    if args.statistic is not None:
        raise SystemExit(f"error: {name} releases a curve of one column; it takes no "
                         f"--statistic (give the grid with --bounds or --param thresholds=...)")
    if args.column_bounds or args.column_values:
        raise SystemExit(f"error: {name} takes the public bounds of its one column with "
                         "--bounds LO,HI, not --column-bounds/--column-values")
    if args.delta:
        raise SystemExit(f"error: {name} is pure epsilon-DP; it takes no --delta")
    params = _parse_params(args.param)
    for key, kind in _CURVE_LISTS.items():
        if key in params and params[key] is not None:
            text = str(params[key])
            try:
                params[key] = [kind(v) for v in text.split(",")]
            except ValueError:
                raise SystemExit(f"error: --param {key} must be comma-separated "
                                 f"{'numbers' if kind is float else 'grid positions'}, "
                                 f"got {text!r}") from None
    if args.bounds:
        params["bounds"] = _parse_pair(args.bounds, "--bounds")
    if args.precision is not None:
        params["precision"] = _parse_value(args.precision)
    if args.seed is None:
        params.setdefault("randomness", "os")
    try:
        return registry.make_curve(name, epsilon=args.epsilon, **params)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: {name}: {exc}") from None


def _curve_records(args: argparse.Namespace) -> np.ndarray:
    """A curve party's own values: one column of its file, as ``(rows, 1)``."""
    columns = [c for c in args.columns.split(",") if c]
    if len(columns) != 1:
        raise SystemExit(f"error: {args.protocol} needs one column (--columns NAME), got "
                         f"{len(columns)}")
    _check_file(args.file)
    try:
        table = datasets.read_table(args.file, columns=columns)
    except (OSError, ValueError, ImportError) as exc:
        raise SystemExit(f"error: {exc}") from None
    return np.asarray(table[columns[0]], dtype=np.float64)[:, None]


def _curve_summary(est: Any) -> dict[str, Any]:
    """The released curve (public fields only): grid points, values, guarantee, cost."""
    curve = est.diagnostics["curve"]
    guarantee = curve.privacy
    return {"thresholds": [float(t) for t in curve.thresholds],
            "values": [float(v) for v in curve.values],
            "indices": [int(i) for i in curve.indices],
            "guarantee": {"text": str(guarantee),
                          "epsilon": "inf" if math.isinf(guarantee.epsilon)
                          else float(guarantee.epsilon),
                          "delta": float(guarantee.delta),
                          "assumptions": [str(a) for a in guarantee.assumptions]},
            "cost": {name: getattr(est.cost, name) for name in (
                "bits_per_party", "max_bits_per_party", "bits_received_per_party",
                "total_bits", "rounds", "server_operations", "offline_bits",
                "peer_bits_per_party", "peer_rounds")}}


def cmd_certs(args: argparse.Namespace) -> int:
    hosts = tuple(h for h in args.host.split(",") if h) if args.host else ("localhost",
                                                                            "127.0.0.1")
    services = tuple(r for r in (args.services or "").split(",") if r)
    bad = [r for r in services if r not in SERVICE_ROLES]
    if bad:
        raise SystemExit(f"error: unknown service role {bad[0]!r} in --services; service "
                         f"roles are {', '.join(SERVICE_ROLES)}")
    out = network.create_deployment(args.out, args.parties, server_hosts=hosts,
                                    extra_roles=services)
    extra = f" and services {', '.join(services)}" if services else ""
    print(f"wrote a CA and certificates for server (hosts {', '.join(hosts)}), "
          f"party-0 .. party-{args.parties - 1}{extra} to {out}")
    print("give each role only its own .key file (and ca.pem); keys are owner-readable only; "
          "ca.key stays with the operator (it signs enrolled devices' certificates)")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    _, _, protocol = _network_protocol(args)
    credentials = network.load_credentials(args.certs, "server")
    observer = _operations(args)

    # Named now, so that the operator knows where to restart a killed server from.
    run_dir = args.run_dir or str(run_journal.default_run_root() / run_journal.new_run_id())

    def ready(port: int) -> None:
        print(f"listening on port {port} for {args.parties} parties"
              + _metrics_note(observer), flush=True)
        print(f"run directory {run_dir} (restart with --run-dir {run_dir} to resume)",
              flush=True)

    try:
        run = network.serve(protocol, args.parties, credentials, address=args.listen,
                            rng=args.seed, timeout=args.timeout,
                            min_silos=args.min_parties, on_ready=ready,
                            run_dir=run_dir, observer=observer)
    except (network.NetworkRunError, ValueError, OSError) as exc:
        raise SystemExit(f"error: {exc}") from None
    finally:
        observer.stop()
    if run.read_back:
        print(f"run {run.run_id} had finished: its release is read back from {run.run_dir}, "
              "not computed again", flush=True)
    else:
        print(f"run {run.run_id}{' (resumed)' if run.resumed else ''}: run directory "
              f"{run.run_dir}", flush=True)
    est = run.estimate
    curve = _curve_summary(est) if registry.is_curve(args.protocol) else {}
    summary = network.release_summary(est) | curve | {
        "protocol": est.protocol, "quantity": est.quantity, "privacy": str(est.privacy),
        "parties": run.parties, "absent": run.absent, "dropped": run.dropped,
        "n_parties": run.n_parties, "services": run.services,
        "rounds": run.rounds, "seconds": run.seconds,
        "bits_per_party": est.cost.bits_per_party, "total_bits": est.cost.total_bits,
        "wire_bytes": run.wire_bytes, "server_peak_rss_mib": _peak_rss_mib(),
        "run_id": run.run_id, "run_dir": run.run_dir, "resumed": run.resumed,
        "read_back": run.read_back}
    return _publish(est, summary, args.output)


def _publish(est: Any, summary: dict[str, Any], output: str | None) -> int:
    """A server's release: the estimate's line and its summary (JSON), also to ``output``."""
    text = json.dumps(summary, indent=2)
    if output:
        Path(output).write_text(text + "\n")
    print(est)
    print(text)
    return 0


def _peak_rss_mib() -> float:
    """This process's peak resident memory in MiB.

    Linux's ``VmHWM`` belongs to the process image, whereas ``ru_maxrss`` carries over the
    high-water mark of the parent that forked it, so the former is read where it exists.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cmd_party(args: argparse.Namespace) -> int:
    spec, kernel, protocol = _network_protocol(args)
    if not args.file:
        raise SystemExit("error: a party needs its own data: --file FILE --columns ...")
    if spec is None or kernel is None:
        records = _curve_records(args)
    else:
        records = _party_records(spec, kernel, args)
    credentials = network.load_credentials(args.certs, args.identity)
    try:
        result = network.run_party(protocol, records, credentials, args.server,
                                   rng=args.seed, timeout=args.timeout,
                                   state_dir=args.state_dir)
    except (network.NetworkRunError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(json.dumps(result.release | {"identity": args.identity,
                                       "rounds": result.rounds}, indent=2))
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    if args.no_durable and (args.run_dir is not None or args.partitions):
        raise SystemExit("error: --no-durable keeps nothing on disk: drop --run-dir and "
                         "--partitions, or drop --no-durable")
    if args.engine is not None and not args.partitions:
        raise SystemExit("error: --engine releases from partitions: give --partitions too")
    _, _, protocol = _network_protocol(args)
    credentials = network.load_credentials(args.certs, "server")
    try:
        window = network.Window(args.window, args.quorum, args.linger)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    from fedustat.runtime.network.collect import new_run_directory

    run_dir = (None if args.no_durable else Path(args.run_dir) if args.run_dir is not None
               else new_run_directory())
    where = "no run directory (not durable)" if run_dir is None else f"run directory {run_dir}"

    observer = _operations(args)

    def ready(port: int) -> None:
        print(f"listening on port {port}; {where}; the window closes in "
              f"{args.window:g} s" + (f" or at {args.quorum} reports" if args.quorum else "")
              + _metrics_note(observer), flush=True)

    try:
        run = network.collect(protocol, credentials, window, address=args.listen,
                              rng=args.seed, on_ready=ready, run_dir=run_dir,
                              durable=not args.no_durable, partitions=args.partitions,
                              engine=args.engine, observer=observer)
    except (network.NetworkRunError, ValueError, OSError) as exc:
        raise SystemExit(f"error: {exc}") from None
    finally:
        observer.stop()
    if run.read_back:
        print(f"the run in {run_dir} had finished: its stored release is read back",
              flush=True)
    est = run.estimate
    summary = network.release_summary(est) | {
        "protocol": est.protocol, "quantity": est.quantity, "privacy": str(est.privacy),
        "n_reports": run.n_reports, "closed_by": run.closed_by, "seconds": run.seconds,
        "late": list(run.late), "refused": run.refused, "resent": run.resent,
        "wire_bytes": run.wire_bytes, "payload_bytes": run.payload_bytes,
        "run_directory": None if run.run_directory is None else str(run.run_directory),
        "read_back": run.read_back, "server_peak_rss_mib": _peak_rss_mib()}
    return _publish(est, summary, args.output)


def cmd_report(args: argparse.Namespace) -> int:
    spec, kernel, protocol = _network_protocol(args)
    if spec is None or kernel is None:
        raise SystemExit("error: report sends one record of a statistic (--statistic); "
                         "curve releases run in rounds (fedustat party)")
    records = _party_records(spec, kernel, args)
    credentials = network.load_credentials(args.certs, args.identity)
    try:
        sent = network.report(protocol, records, credentials, args.server, rng=args.seed,
                              timeout=args.timeout, keep=args.keep)
    except (network.NetworkRunError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(json.dumps({"identity": sent.identity, "run": sent.run,
                      "wire_bytes": sent.wire_bytes}, indent=2))
    return 0


def _operations(args: argparse.Namespace) -> Any:
    """The server's observer (metrics, health) and its event log, from the options."""
    from fedustat.runtime.network.observe import Observer, configure_logging, parse_address

    configure_logging(args.log_format, args.log_level)
    try:
        if args.metrics_address is not None:
            parse_address(args.metrics_address, "--metrics-address")
        observer = Observer(args.metrics_address)
        observer.start()  # bound before the run, so a taken port fails here, in one line
    except (ValueError, ImportError, OSError) as exc:
        raise SystemExit(f"error: {exc}") from None
    return observer


def _metrics_note(observer: Any) -> str:
    return f"; metrics on http://{observer.address}/metrics" if observer.address else ""


#: Service roles a protocol may need (``Protocol.service_roles``); each has a certificate.
SERVICE_ROLES = ("shuffler", "dealer")


def cmd_service(args: argparse.Namespace) -> int:
    _, _, protocol = _network_protocol(args)
    roles = protocol.service_roles()
    if args.role not in roles:
        raise SystemExit(f"error: protocol {args.protocol!r} as configured has no "
                         f"{args.role} role (its service roles: "
                         f"{', '.join(roles) or 'none'}); e.g. ghazi-shuffle needs "
                         "--param shuffler=service")
    credentials = network.load_credentials(args.certs, args.role)
    try:
        result = network.run_service(protocol, args.role, credentials, args.server,
                                     rng=args.seed, timeout=args.timeout)
    except network.NetworkRunError as exc:
        raise SystemExit(f"error: {exc}") from None
    print(json.dumps(result.release | {"identity": args.role, "service_id": result.service_id,
                                       "rounds": result.rounds}, indent=2))
    return 0


def _add_protocol_options(cmd: argparse.ArgumentParser) -> None:
    """Options that fix the protocol; server and parties must give the same ones."""
    cmd.add_argument("--statistic", choices=catalogue.names("u-statistic"), default=None,
                     help="which statistic (none for a curve release such as ecdf-fss)")
    cmd.add_argument("--protocol", required=True, help="protocol name (`fedustat protocols`)")
    add_epsilon(cmd, what="privacy budget epsilon > 0 (every role gives the same)")
    add_delta(cmd, what="privacy parameter delta (every role gives the same)")
    add_protocol_parameters(cmd, what="a protocol parameter (repeatable)")
    add_column_domain(cmd, bounds_help="public bounds of a continuous kernel column "
                                       "(repeatable)",
                      values_help="public list of the values of a discrete kernel column")
    add_bounds(cmd, what="public bounds LO,HI of the values")
    add_precision(cmd, what="fixed-point precision (default: the protocol's own)")
    cmd.add_argument("--certs", required=True,
                     help="directory with ca.pem and this role's certificate and key")
    cmd.add_argument("--timeout", type=float, default=60.0,
                     help="the stage timeout: seconds joining and each round may last; "
                          "give every role the same number (a party waits a margin "
                          "longer for each answer, so the server decides first)")
    add_seed(cmd, default=None,
             what="simulation randomness with this seed (to compare with the simulator); "
                  "default: deployment randomness")
    cmd.set_defaults(data=None, file=None, columns=None, bundled_defaults=False)


def _add_member_options(cmd: argparse.ArgumentParser, member: str, server: str) -> None:
    """The protocol's options and where a data-holding member's rows and server are."""
    _add_protocol_options(cmd)
    cmd.add_argument("--server", required=True, help=f"HOST:PORT of {server}")
    cmd.add_argument("--identity", required=True,
                     help=f"this {member}'s certificate name, e.g. party-0")
    cmd.add_argument("--file", required=True, help=f"this {member}'s CSV or Parquet file")
    cmd.add_argument("--columns", required=True,
                     help="comma-separated column names in the kernel's order")


def add_parsers(sub: Any) -> None:
    """``certs``, ``serve``, ``party``, ``collect``, ``report`` and ``service``."""
    _add_certs(sub)
    _add_serve(sub)
    _add_party(sub)
    _add_collect(sub)
    _add_report(sub)
    _add_service(sub)


def _add_certs(sub: Any) -> None:
    certs = sub.add_parser("certs", help="create a CA and certificates for a test deployment",
                           formatter_class=_HelpFormatter)
    certs.add_argument("--out", required=True, help="directory to write them to")
    certs.add_argument("--parties", type=_positive_int, required=True,
                       help="number of party certificates (party-0 ...)")
    certs.add_argument("--host", default=None,
                       help="comma-separated host names or addresses of the server "
                            "(default: localhost,127.0.0.1)")
    certs.add_argument("--services", default=None,
                       help="comma-separated service roles to certify too "
                            f"({', '.join(SERVICE_ROLES)})")
    certs.set_defaults(func=cmd_certs)


def _add_serve(sub: Any) -> None:
    srv = sub.add_parser("serve", help="run the aggregator of a networked run",
                         formatter_class=_HelpFormatter)
    _add_protocol_options(srv)
    srv.add_argument("--parties", type=_positive_int, required=True,
                     help="number of party processes (certificates party-0 ...)")
    srv.add_argument("--min-parties", type=_positive_int, default=None,
                     help="go on without parties that have not joined when joining times "
                          "out, if at least this many have (default: all must join)")
    srv.add_argument("--listen", default="127.0.0.1:50051", help="HOST:PORT to listen on")
    srv.add_argument("--output", default=None, help="also write the release (JSON) here")
    srv.add_argument("--run-dir", default=None, metavar="DIR",
                     help="the run directory (its database: members, accepted frames, "
                          "the state after each round, the release). A directory holding "
                          "a run of the same options resumes it (a restarted server); a "
                          "finished run's release is read back. Default: a new directory "
                          "under $FEDUSTAT_RUN_ROOT or ~/.local/share/fedustat/runs, "
                          "printed at the end")
    add_operations_options(srv)
    srv.set_defaults(func=cmd_serve)


def _add_party(sub: Any) -> None:
    party = sub.add_parser("party", help="take part in a networked run with your own data",
                           formatter_class=_HelpFormatter)
    _add_member_options(party, "party", "the server")
    party.add_argument("--state-dir", default=None, metavar="DIR",
                       help="this party's own state directory: a process restarted with "
                            "it rejoins under the same identity and resends the same "
                            "frame (one directory per party and run)")
    party.set_defaults(func=cmd_party)


def _add_collect(sub: Any) -> None:
    col = sub.add_parser("collect", help="serve a collection window: devices send one report "
                                         "each, whenever they are online",
                         formatter_class=_HelpFormatter)
    _add_protocol_options(col)
    col.add_argument("--window", type=float, required=True,
                     help="seconds until the window closes")
    col.add_argument("--quorum", type=_positive_int, default=None,
                     help="close as soon as this many reports are in (default: at the "
                          "deadline only)")
    col.add_argument("--linger", type=float, default=1.0,
                     help="seconds to keep telling late devices that the window closed")
    col.add_argument("--listen", default="127.0.0.1:50051", help="HOST:PORT to listen on")
    col.add_argument("--output", default=None, help="also write the release (JSON) here")
    col.add_argument("--run-dir", default=None, metavar="DIR",
                     help="run directory (made if missing; default: a new one under "
                          "$FEDUSTAT_RUN_ROOT or ~/.local/share/fedustat/runs, printed): "
                          "every accepted report is committed "
                          "there before its device is acknowledged; the same directory "
                          "resumes the window after a restart and reads back a finished "
                          "run's release (docs/collection.md)")
    col.add_argument("--partitions", action="store_true",
                     help="also write the reports to Parquet partitions in the run "
                          "directory and release from them on a Dask engine, so this "
                          "process never holds them")
    col.add_argument("--engine", default=None,
                     help="with --partitions: 'local' (default: a local cluster of 2 "
                          "workers started at the close) or a scheduler address "
                          "tcp://host:port")
    col.add_argument("--no-durable", action="store_true",
                     help="keep the reports in memory only (a crash loses them): for "
                          "comparison, not for deployments")
    add_operations_options(col)
    col.set_defaults(func=cmd_collect)


def _add_report(sub: Any) -> None:
    rpt = sub.add_parser("report", help="send this device's one report to a collection "
                                        "window", formatter_class=_HelpFormatter)
    _add_member_options(rpt, "device", "the collection server")
    rpt.add_argument("--keep", default=None, metavar="FILE",
                     help="keep the report in FILE before sending it: run again after a "
                          "crash, the device resends that same report (counted once) "
                          "instead of randomizing its record again")
    rpt.set_defaults(func=cmd_report)


def _add_service(sub: Any) -> None:
    svc = sub.add_parser("service", help="run a record-less service role of a networked run "
                                         "(e.g. the shuffler of ghazi-shuffle)",
                         formatter_class=_HelpFormatter)
    _add_protocol_options(svc)
    svc.add_argument("--role", choices=SERVICE_ROLES, required=True,
                     help="which service (its certificate carries this name)")
    svc.add_argument("--server", required=True, help="HOST:PORT of the server")
    svc.set_defaults(func=cmd_service)

