"""Device enrollment: ``enroll-tokens``, ``enroll-server`` and ``enroll``
(docs/enrollment.md)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from fedustat.cli._options import _HelpFormatter
from fedustat.cli._parsing import _positive_int


def cmd_enroll_tokens(args: argparse.Namespace) -> int:
    from fedustat.runtime.network import enroll

    out = Path(args.out)
    if out.exists():
        raise SystemExit(f"error: --out {out} exists; tokens are never overwritten (give a new "
                         "file name)")
    tokens = enroll.mint_tokens(args.count)
    store = enroll.TokenStore(args.store)
    try:
        store.add(tokens)
        unused, used = store.counts()
    finally:
        store.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.touch(mode=0o600)
    out.write_text("\n".join(tokens) + "\n")
    print(f"wrote {len(tokens)} one-time enrollment tokens to {out} (one per line, "
          f"owner-readable only); their SHA-256 digests are in {args.store} "
          f"({unused} unused, {used} used in all)")
    print("give each device one token; the store keeps no token itself")
    return 0


def cmd_enroll_server(args: argparse.Namespace) -> int:
    import datetime as dt

    from fedustat.runtime.network import enroll

    if not (args.validity_hours > 0 and math.isfinite(args.validity_hours)):
        raise SystemExit(f"error: --validity-hours must be a positive number of hours, got "
                         f"{args.validity_hours}")
    if not Path(args.store).is_file():
        raise SystemExit(f"error: --store {args.store} is not a file; mint tokens into it "
                         "first with `fedustat enroll-tokens --store`")
    if args.first_index is not None and args.first_index < 0:
        raise SystemExit(f"error: --first-index must be >= 0, got {args.first_index}")

    def ready(port: int) -> None:
        store = enroll.TokenStore(args.store)
        unused, used = store.counts()
        store.close()
        print(f"enrollment service listening on port {port} ({unused} unused tokens, "
              f"{used} used)", flush=True)

    enroll.serve_enrollment(args.certs, args.store, address=args.address,
                            validity=dt.timedelta(hours=args.validity_hours),
                            first_index=args.first_index, on_ready=ready)
    return 0


def cmd_enroll(args: argparse.Namespace) -> int:
    from fedustat.runtime.network import enroll

    token = Path(args.token_file).read_text().strip() if args.token_file else args.token
    try:
        credentials = enroll.enroll(args.server, args.ca, token, args.out,
                                    timeout=args.timeout)
    except enroll.EnrollmentError as exc:
        raise SystemExit(f"error: {exc}") from None
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(credentials.certificate)
    print(json.dumps({"identity": credentials.identity,
                      "certificate": str(Path(args.out) / f"{credentials.identity}.pem"),
                      "key": str(Path(args.out) / f"{credentials.identity}.key"),
                      "not_after": cert.not_valid_after_utc.isoformat()}, indent=2))
    return 0


def add_parsers(sub: Any) -> None:
    """``enroll-tokens``, ``enroll-server`` and ``enroll`` (docs/enrollment.md)."""
    tok = sub.add_parser("enroll-tokens", help="mint one-time enrollment tokens for devices",
                         formatter_class=_HelpFormatter)
    tok.add_argument("--count", type=_positive_int, required=True, help="how many tokens")
    tok.add_argument("--out", required=True,
                     help="file to write the tokens to, one per line (for distribution)")
    tok.add_argument("--store", required=True,
                     help="the enrollment service's token store (SQLite; created or "
                          "added to): holds only the tokens' SHA-256 digests")
    tok.set_defaults(func=cmd_enroll_tokens)

    esrv = sub.add_parser("enroll-server",
                          help="run the enrollment service: devices trade a token and a CSR "
                               "for a short-lived party certificate",
                          formatter_class=_HelpFormatter)
    esrv.add_argument("--certs", required=True,
                      help="deployment directory: ca.pem, ca.key, server.pem, server.key")
    esrv.add_argument("--store", required=True,
                      help="the token store written by `fedustat enroll-tokens`")
    esrv.add_argument("--address", default="127.0.0.1:50052",
                      help="HOST:PORT to listen on (port 0: a free port)")
    esrv.add_argument("--validity-hours", type=float, default=24.0,
                      help="how long an issued certificate is valid")
    esrv.add_argument("--first-index", type=int, default=None,
                      help="smallest party index to assign (default: after the "
                           "deployment's party-<i>.pem files)")
    esrv.set_defaults(func=cmd_enroll_server)

    dev = sub.add_parser("enroll", help="enroll this device: make its key, get its "
                                        "certificate", formatter_class=_HelpFormatter)
    dev.add_argument("--server", required=True, help="HOST:PORT of the enrollment service")
    dev.add_argument("--ca", required=True, help="the deployment's ca.pem")
    which = dev.add_mutually_exclusive_group(required=True)
    which.add_argument("--token", help="the one-time enrollment token")
    which.add_argument("--token-file", help="a file holding the token (keeps it out of "
                                            "the process list)")
    dev.add_argument("--out", required=True,
                     help="directory for <identity>.pem, <identity>.key and ca.pem")
    dev.add_argument("--timeout", type=float, default=30.0,
                     help="seconds to wait for the service's answer")
    dev.set_defaults(func=cmd_enroll)

