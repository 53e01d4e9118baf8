"""Enrollment: devices obtain short-lived party certificates against one-time tokens.

A deployment of many devices cannot have a certificate made by hand for each. The operator
runs an enrollment service next to the deployment CA's key (``ca.key`` of
:func:`~fedustat.runtime.network.certs.create_deployment`) and hands out one-time tokens
(:func:`mint_tokens`; the service's :class:`TokenStore` keeps only their SHA-256 digests).
A device generates its own ECDSA P-256 key pair, sends a certificate signing request (CSR)
with its token over TLS that authenticates the service (the device has no certificate
yet), and receives a certificate signed by the deployment CA:

* its identity is assigned by the service: ``party-<i>`` with ``i`` the next free index
  (the CSR's requested subject is ignored), so identities are unique per store;
* it is short-lived (:data:`DEFAULT_VALIDITY`, never past the CA's own expiry) and good
  for client authentication only;
* the token is consumed in the same SQLite transaction that records the certificate, so a
  token yields one identity even across restarts and concurrent requests, and is consumed
  only when a certificate is issued. A device that repeats its request with the same key
  (its reply was lost) gets the same certificate back, never a second identity.

The private key never leaves the device: the request carries the CSR (the public key and a
signature by the private key proving its possession) and the token.

Wire format (gRPC, generic byte methods like :mod:`fedustat.runtime.network.service`): the
request is JSON ``{"token": str, "csr": base64 DER}``; the reply is JSON ``{"identity",
"certificate" (PEM), "not_after" (ISO 8601)}``; a refusal is a gRPC status with a public
one-line reason.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime as dt
import functools
import hashlib
import json
import random
import re
import secrets
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from fedustat.runtime.network.certs import (
    Credentials,
    _name,
    _pem_key,
    _write_private,
    load_credentials,
    party_identity,
    party_index,
)
from fedustat.runtime.network.service import load_grpc

__all__ = ["DEFAULT_VALIDITY", "EnrollmentError", "EnrollmentRefusedError", "EnrollmentServer",
           "EnrollmentService", "TokenStore", "enroll", "enroll_async", "enrollment_request",
           "mint_tokens", "serve_enrollment", "start_enrollment_server", "token_digest",
           "write_credentials"]

SERVICE = "fedustat.Enrollment"
ENROLL = f"/{SERVICE}/Enroll"
#: How long an issued certificate is valid unless the operator says otherwise.
DEFAULT_VALIDITY = dt.timedelta(hours=24)
#: Random bytes of a token: 128 bits from the OS CSPRNG (``secrets``).
TOKEN_BYTES = 16
#: Largest request the service reads: a P-256 CSR is about 250 bytes DER.
MAX_REQUEST_BYTES = 16 * 1024
#: Clock skew allowed between the service and the servers that check a certificate.
CLOCK_SKEW = dt.timedelta(minutes=5)
#: Each device its own connection (and TLS handshake), even from one process: without a
#: local subchannel pool, channels of one process to one address may share a connection.
CHANNEL_OPTIONS = [("grpc.use_local_subchannel_pool", 1),
                   ("grpc.max_receive_message_length", 1 << 16)]
#: Most requests decided in one transaction.
MAX_BATCH = 512
#: More pending requests than gRPC's default of 1000 (hard limit 3000): a burst of devices
#: beyond it is otherwise CANCELLED before the service sees it.
SERVER_OPTIONS = [("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                  ("grpc.server.max_pending_requests", 20_000),
                  ("grpc.server.max_pending_requests_hard_limit", 30_000)]
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
UNKNOWN_TOKEN = ("this enrollment token is not known to the service (check it was copied "
                 "whole, or ask the operator for one)")


class EnrollmentError(RuntimeError):
    """A device's enrollment that did not end with a certificate (one line: why)."""


class EnrollmentRefusedError(Exception):
    """The service refuses a request; ``reason`` is public, ``code`` a gRPC status name."""

    def __init__(self, reason: str, code: str = "PERMISSION_DENIED") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


# ------------------------------------------------------------------------ tokens
def mint_tokens(count: int) -> list[str]:
    """``count`` fresh one-time tokens, 128 bits each from the OS CSPRNG (URL-safe text)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    return [secrets.token_urlsafe(TOKEN_BYTES) for _ in range(count)]


def token_digest(token: str) -> bytes:
    """What the store keeps of a token: its SHA-256 digest (FIPS 180-4). A token has 128
    random bits, so an unsalted fast hash suffices: nobody can search that space."""
    return hashlib.sha256(token.encode()).digest()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class TokenStore:
    """The service's SQLite file: token digests, which are used, and what was issued.

    Redemptions run in ``BEGIN IMMEDIATE`` transactions (SQLite's write lock, taken
    before the token is read), one or a batch at a time, so two requests with one token,
    in one service process or in two sharing the file, issue one certificate; WAL with
    ``synchronous=FULL`` makes an issued certificate's record survive a crash or power
    loss before its reply leaves.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise ValueError(f"store must be a file (the token store), got directory "
                             f"{self.path}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
        try:
            self._setup()
        except sqlite3.DatabaseError as error:
            self._db.close()
            raise ValueError(f"store: {self.path} is not a token store (the SQLite file "
                             f"`fedustat enroll-tokens --store` writes): {error}") from None
        with contextlib.suppress(OSError):
            self.path.chmod(0o600)

    def _setup(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript("""
            CREATE TABLE IF NOT EXISTS tokens (
                digest BLOB PRIMARY KEY, minted_at TEXT NOT NULL, used_at TEXT
            ) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS issued (
                party INTEGER PRIMARY KEY, token BLOB NOT NULL UNIQUE,
                public_key BLOB NOT NULL, serial TEXT NOT NULL, not_after TEXT NOT NULL,
                issued_at TEXT NOT NULL, certificate BLOB NOT NULL
            );
        """)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> TokenStore:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def add(self, tokens: Iterable[str]) -> int:
        """Store the digests of ``tokens`` (never the tokens); returns how many were new."""
        rows = [(token_digest(t), _now()) for t in tokens]
        with self._transaction():
            before = self._db.total_changes
            self._db.executemany("INSERT OR IGNORE INTO tokens VALUES (?, ?, NULL)", rows)
            return self._db.total_changes - before

    def counts(self) -> tuple[int, int]:
        """(unused, used) tokens."""
        unused, used = self._db.execute(
            "SELECT COUNT(*) - COUNT(used_at), COUNT(used_at) FROM tokens").fetchone()
        return int(unused), int(used)

    def issued(self) -> list[tuple[str, str, str]]:
        """Every issued certificate: (identity, serial number in hex, not-after)."""
        return [(party_identity(i), serial, after) for i, serial, after in self._db.execute(
            "SELECT party, serial, not_after FROM issued ORDER BY party")]

    def redeem(self, token: str, public_key: bytes, first_index: int,
               issue: Callable[[int], tuple[bytes, str, str]]) -> tuple[int, bytes, str]:
        """Consume ``token`` for the key ``public_key`` (DER) and return (index,
        certificate PEM, not-after). ``issue(index)`` signs the certificate and returns
        (PEM, serial, not-after); a failure there leaves the token unused. The same token
        and key again return the same certificate. Raises :class:`EnrollmentRefusedError`."""
        outcome = self.redeem_many([(token, public_key, issue)], first_index)[0]
        if isinstance(outcome, EnrollmentRefusedError):
            raise outcome
        return outcome

    def redeem_many(self, requests: list[tuple[str, bytes, Callable[[int], tuple[bytes, str,
                                                                              str]]]],
                    first_index: int) -> list[tuple[int, bytes, str] | EnrollmentRefusedError]:
        """:meth:`redeem` for several requests in one transaction (one commit, so one wait
        for the disk, for all of them): each gets its certificate or its refusal. Within
        the batch, requests are decided in order, so one token twice issues once."""
        outcomes: list[tuple[int, bytes, str] | EnrollmentRefusedError] = []
        with self._transaction():
            for token, public_key, issue in requests:
                try:
                    outcomes.append(self._redeem_one(token, public_key, first_index, issue))
                except EnrollmentRefusedError as refused:
                    outcomes.append(refused)
                except Exception as error:  # one request's failure, not the batch's
                    # Nothing of this request was written (signing precedes the writes).
                    outcomes.append(EnrollmentRefusedError(
                        f"the service could not issue a certificate "
                        f"({type(error).__name__}); the token is still unused", "INTERNAL"))
        return outcomes

    def _redeem_one(self, token: str, public_key: bytes, first_index: int,
                    issue: Callable[[int], tuple[bytes, str, str]]) -> tuple[int, bytes, str]:
        digest = token_digest(token)
        row = self._db.execute("SELECT used_at FROM tokens WHERE digest = ?",
                               (digest,)).fetchone()
        if row is None:
            raise EnrollmentRefusedError(UNKNOWN_TOKEN)
        if row[0] is not None:
            prior = self._db.execute(
                "SELECT party, certificate, not_after, public_key FROM issued "
                "WHERE token = ?", (digest,)).fetchone()
            if prior is not None and prior[3] == public_key:
                return int(prior[0]), bytes(prior[1]), str(prior[2])
            raise EnrollmentRefusedError("this enrollment token was already used (a token "
                                         "enrolls one device once; ask the operator for a "
                                         "new one)")
        last = self._db.execute("SELECT MAX(party) FROM issued").fetchone()[0]
        index = first_index if last is None else max(first_index, int(last) + 1)
        certificate, serial, not_after = issue(index)
        self._db.execute("INSERT INTO issued VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (index, digest, public_key, serial, not_after, _now(), certificate))
        self._db.execute("UPDATE tokens SET used_at = ? WHERE digest = ?", (_now(), digest))
        return index, certificate, not_after

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        # IMMEDIATE takes the write lock before the first read, so two redemptions of one
        # token cannot both read it unused.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


# ------------------------------------------------------------------------ the service
def _key_name(key: Any) -> str:
    if isinstance(key, ec.EllipticCurvePublicKey):
        return f"ECDSA {key.curve.name}"
    size = getattr(key, "key_size", None)
    return type(key).__name__.removeprefix("_").replace("PublicKey", "") + \
        (f"-{size}" if size else "")


def _pem_of(path: Path, what: str) -> bytes:
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} is missing (create the deployment with "
                                "`fedustat certs`, which writes ca.pem and ca.key)")
    return path.read_bytes()


class EnrollmentService:
    """What the service decides for one request (no network): check, redeem, sign."""

    def __init__(self, certs: str | Path, store: TokenStore, *,
                 validity: dt.timedelta = DEFAULT_VALIDITY,
                 first_index: int | None = None) -> None:
        base = Path(certs)
        self.ca_pem = _pem_of(base / "ca.pem", "the deployment CA certificate")
        self.ca = x509.load_pem_x509_certificate(self.ca_pem)
        key = serialization.load_pem_private_key(_pem_of(base / "ca.key", "the CA key"),
                                                 password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey) or \
                key.public_key().public_bytes(serialization.Encoding.DER,
                                              serialization.PublicFormat.SubjectPublicKeyInfo) \
                != self.ca.public_key().public_bytes(
                    serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
            raise ValueError(f"certs: {base / 'ca.key'} is not the key of {base / 'ca.pem'}")
        self.ca_key = key
        if not isinstance(validity, dt.timedelta) or validity <= dt.timedelta(0):
            raise ValueError(f"validity must be a positive duration, got {validity!r}")
        self.validity = validity
        if first_index is None:
            # After every hand-made party certificate of the deployment: an enrolled
            # identity never collides with one made by `fedustat certs`.
            made = [party_index(p.stem) for p in base.glob("party-*.pem")]
            first_index = max((i for i in made if i is not None), default=-1) + 1
        if isinstance(first_index, bool) or not isinstance(first_index, int) \
                or first_index < 0:
            raise ValueError(f"first_index must be an integer >= 0, got {first_index!r}")
        self.first_index = first_index
        self.store = store
        if self.ca.not_valid_after_utc <= dt.datetime.now(dt.UTC) + CLOCK_SKEW:
            raise ValueError(f"certs: the deployment CA expired on "
                             f"{self.ca.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; make a new "
                             "deployment")

    def check_csr(self, der: bytes) -> tuple[x509.CertificateSigningRequest, bytes]:
        """The CSR and its public key (DER), or a refusal naming what is wrong."""
        try:
            csr = x509.load_der_x509_csr(der)
            public = csr.public_key()
        except (ValueError, TypeError):
            raise EnrollmentRefusedError("the certificate request is not a valid DER-encoded "
                                         "PKCS#10 CSR", "INVALID_ARGUMENT") from None
        if not isinstance(public, ec.EllipticCurvePublicKey) or \
                not isinstance(public.curve, ec.SECP256R1):
            raise EnrollmentRefusedError(f"the certificate request's key must be ECDSA P-256 "
                                         f"(secp256r1), got {_key_name(public)}",
                                         "INVALID_ARGUMENT")
        if not csr.is_signature_valid:
            raise EnrollmentRefusedError("the certificate request's signature does not verify "
                                         "(it must be signed by the private key it carries)",
                                         "INVALID_ARGUMENT")
        return csr, public.public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)

    def _sign(self, public: ec.EllipticCurvePublicKey, index: int
              ) -> tuple[bytes, str, str]:
        identity = party_identity(index)
        now = dt.datetime.now(dt.UTC)
        not_after = min(now + self.validity, self.ca.not_valid_after_utc)
        serial = x509.random_serial_number()
        cert = (x509.CertificateBuilder()
                .subject_name(_name(identity)).issuer_name(self.ca.subject)
                .public_key(public).serial_number(serial)
                .not_valid_before(now - CLOCK_SKEW).not_valid_after(not_after)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(identity)]),
                               critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                               critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                             key_encipherment=False, data_encipherment=False,
                                             key_agreement=False, key_cert_sign=False,
                                             crl_sign=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    self.ca_key.public_key()), critical=False)
                .sign(self.ca_key, hashes.SHA256()))
        return (cert.public_bytes(serialization.Encoding.PEM), f"{serial:x}",
                not_after.isoformat(timespec="seconds"))

    def _parse(self, request: bytes) -> tuple[str, ec.EllipticCurvePublicKey, bytes]:
        """The token, public key and its DER of a request, or a refusal."""
        if len(request) > MAX_REQUEST_BYTES:
            raise EnrollmentRefusedError(f"the request is larger than {MAX_REQUEST_BYTES} "
                                         "bytes", "INVALID_ARGUMENT")
        try:
            body = json.loads(request)
            token, csr_b64 = body["token"], body["csr"]
            if not isinstance(token, str) or not isinstance(csr_b64, str):
                raise TypeError
            der = base64.b64decode(csr_b64, validate=True)
        except (ValueError, TypeError, KeyError, binascii.Error):
            raise EnrollmentRefusedError("the request must be JSON with a string token and a "
                                         "base64 csr", "INVALID_ARGUMENT") from None
        if not _TOKEN.match(token):
            raise EnrollmentRefusedError(UNKNOWN_TOKEN)
        csr, public_der = self.check_csr(der)
        public = csr.public_key()
        assert isinstance(public, ec.EllipticCurvePublicKey)
        return token, public, public_der

    def handle_many(self, requests: list[bytes]) -> list[bytes | EnrollmentRefusedError]:
        """Each request's reply bytes or refusal; the certificates issued in one commit."""
        outcomes: list[bytes | EnrollmentRefusedError] = []
        valid: list[tuple[int, tuple[str, ec.EllipticCurvePublicKey, bytes]]] = []
        for position, request in enumerate(requests):
            try:
                valid.append((position, self._parse(request)))
                outcomes.append(b"")
            except EnrollmentRefusedError as refused:
                outcomes.append(refused)
            except Exception as error:  # e.g. an algorithm the library does not support:
                # this request's refusal, never its batch's failure
                outcomes.append(EnrollmentRefusedError(
                    f"the certificate request could not be read ({type(error).__name__})",
                    "INVALID_ARGUMENT"))
        if not valid:
            return outcomes
        redeemed = self.store.redeem_many(
            [(token, public_der, functools.partial(self._sign, public))
             for _, (token, public, public_der) in valid], self.first_index)
        for (position, _), outcome in zip(valid, redeemed, strict=True):
            if isinstance(outcome, EnrollmentRefusedError):
                outcomes[position] = outcome
            else:
                index, pem, not_after = outcome
                outcomes[position] = json.dumps({
                    "identity": party_identity(index), "certificate": pem.decode(),
                    "not_after": not_after}).encode()
        return outcomes

    def handle(self, request: bytes) -> bytes:
        """One request's reply bytes, or :class:`EnrollmentRefusedError`."""
        outcome = self.handle_many([request])[0]
        if isinstance(outcome, EnrollmentRefusedError):
            raise outcome
        return outcome


def _grpc() -> Any:
    return load_grpc("enrollment requests")


@dataclass
class EnrollmentServer:
    """A running enrollment service (asyncio gRPC): its port; ``await stop()`` ends it."""

    port: int
    server: Any
    service: EnrollmentService
    executor: futures.ThreadPoolExecutor
    writer: asyncio.Task[None]

    async def stop(self, grace: float = 1.0) -> None:
        await self.server.stop(grace)
        self.writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.writer
        self.executor.shutdown(wait=True)
        self.service.store.close()

    async def wait(self) -> None:
        await self.server.wait_for_termination()


async def start_enrollment_server(certs: str | Path, store: str | Path, *,
                                  address: str = "127.0.0.1:0",
                                  validity: dt.timedelta = DEFAULT_VALIDITY,
                                  first_index: int | None = None) -> EnrollmentServer:
    """Start the enrollment service on ``address`` (port 0: a free port) in this event loop.

    ``certs`` is the deployment directory: ``ca.pem`` and ``ca.key`` (the CA that signs),
    ``server.pem`` and ``server.key`` (the certificate the service presents; its host
    names are the ones devices connect to). ``store`` is the token store
    (:class:`TokenStore`, filled by ``fedustat enroll-tokens``). ``first_index`` is the
    smallest party index to assign (default: after the deployment's hand-made
    ``party-<i>.pem``)."""
    grpc = _grpc()
    tls = load_credentials(certs, "server")
    service = EnrollmentService(certs, TokenStore(store), validity=validity,
                                first_index=first_index)
    # One thread does every check, signature and commit in turn, a batch at a time: the
    # requests that arrived while the last batch was committed go in one transaction, so
    # the disk's wait for a durable commit (milliseconds) is shared by the whole batch
    # (group commit, DeWitt et al. 1984), and nothing waits for a batch to
    # fill. The event loop keeps accepting connections meanwhile; a reply leaves only
    # after its certificate's record is committed.
    executor = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="enroll")
    loop = asyncio.get_running_loop()
    pending: asyncio.Queue[tuple[bytes, asyncio.Future[Any]]] = asyncio.Queue()

    async def writer() -> None:
        while True:
            batch = [await pending.get()]
            while not pending.empty() and len(batch) < MAX_BATCH:
                batch.append(pending.get_nowait())
            try:
                outcomes = await loop.run_in_executor(
                    executor, service.handle_many, [request for request, _ in batch])
            except Exception as error:  # the store failed: tell each caller
                outcomes = [EnrollmentRefusedError(
                    f"the service's token store failed ({type(error).__name__})",
                    "UNAVAILABLE")] * len(batch)
            for (_, answer), outcome in zip(batch, outcomes, strict=True):
                if not answer.done():
                    answer.set_result(outcome)

    async def enroll_method(request: bytes, context: Any) -> bytes:
        answer = loop.create_future()
        pending.put_nowait((request, answer))
        outcome = await answer
        if isinstance(outcome, EnrollmentRefusedError):
            await context.abort(getattr(grpc.StatusCode, outcome.code), outcome.reason)
        return outcome

    writing = asyncio.get_running_loop().create_task(writer())
    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE, {"Enroll": grpc.unary_unary_rpc_method_handler(enroll_method)}),))
    try:
        port = server.add_secure_port(address, grpc.ssl_server_credentials(
            [(tls.key, tls.certificate)], require_client_auth=False))
    except RuntimeError:  # grpc.aio's refusal to bind
        port = 0
    if port == 0:
        writing.cancel()
        executor.shutdown()
        service.store.close()
        raise OSError(f"address: cannot listen on {address} (a HOST:PORT of this machine, "
                      "port free; port 0 picks one)")
    await server.start()
    return EnrollmentServer(port, server, service, executor, writing)


def serve_enrollment(certs: str | Path, store: str | Path, *,
                     address: str = "127.0.0.1:0",
                     validity: dt.timedelta = DEFAULT_VALIDITY,
                     first_index: int | None = None,
                     on_ready: Callable[[int], None] | None = None,
                     stop: threading.Event | None = None) -> None:
    """Run the enrollment service until SIGTERM/SIGINT (or ``stop`` is set, from another
    thread). ``on_ready`` gets the bound port. See :func:`start_enrollment_server`."""

    async def main() -> None:
        running = await start_enrollment_server(certs, store, address=address,
                                                validity=validity, first_index=first_index)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, done.set)
        if stop is not None:
            threading.Thread(target=lambda: (stop.wait(), loop.call_soon_threadsafe(done.set)),
                             daemon=True).start()
        try:
            if on_ready is not None:
                on_ready(running.port)
            await done.wait()
        finally:
            await running.stop()

    asyncio.run(main())


# ------------------------------------------------------------------------ the device
def enrollment_request(token: str, key: ec.EllipticCurvePrivateKey) -> bytes:
    """The bytes a device sends: its token and a CSR for ``key``'s public half, signed by
    ``key`` (proof of possession). The private key is not in them."""
    if not isinstance(token, str) or not _TOKEN.match(token.strip()):
        raise ValueError("token must be the enrollment token text the operator gave "
                         f"(16-64 characters of A-Z a-z 0-9 _ -), got {token!r:.20}")
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(_name("device"))  # the service assigns the identity
           .sign(key, hashes.SHA256()))
    return json.dumps({"token": token.strip(), "csr": base64.b64encode(
        csr.public_bytes(serialization.Encoding.DER)).decode()}).encode()


def _ca_bytes(ca: bytes | str | Path) -> bytes:
    if isinstance(ca, bytes):
        data = ca
    else:
        path = Path(ca)
        if not path.is_file():
            raise FileNotFoundError(f"ca: {path} is not a file (the deployment's ca.pem, "
                                    "from the operator)")
        data = path.read_bytes()
    try:
        x509.load_pem_x509_certificate(data)
    except ValueError:
        raise ValueError("ca must be the deployment's ca.pem (a PEM certificate)") from None
    return data


def _credentials(reply: bytes, key: ec.EllipticCurvePrivateKey, ca: bytes) -> Credentials:
    body = json.loads(reply)
    identity, pem = str(body["identity"]), str(body["certificate"]).encode()
    cert = x509.load_pem_x509_certificate(pem)
    mine = key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    if cert.public_key().public_bytes(serialization.Encoding.DER,
                                      serialization.PublicFormat.SubjectPublicKeyInfo) != mine:
        raise EnrollmentError("the service returned a certificate for another key")
    if party_index(identity) is None:
        raise EnrollmentError(f"the service assigned a malformed identity {identity!r}")
    return Credentials(ca=ca, certificate=pem, key=_pem_key(key), identity=identity)


#: Failures worth another attempt: the service is busy or briefly unreachable, or the reply
#: was lost (a repeat with the same key returns the same certificate).
_RETRY = ("UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "CANCELLED")


def _failure(error: Any) -> EnrollmentError:
    code = error.code().name if hasattr(error, "code") else "UNKNOWN"
    details = (error.details() if hasattr(error, "details") else "") or code
    if code in ("PERMISSION_DENIED", "INVALID_ARGUMENT"):
        return EnrollmentError(f"enrollment refused: {details}")
    text = details.lower()
    if "handshake" in text or "certificate" in text or "ssl" in text:
        return EnrollmentError(f"cannot reach the enrollment service over TLS ({details}); "
                               "is ca.pem the deployment's, and does the service's "
                               "certificate name the host in --server?")
    return EnrollmentError(f"enrollment failed: {code}: {details}")


def _check_attempts(attempts: int) -> int:
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"attempts must be an integer >= 1, got {attempts!r}")
    return attempts


def _backoff(attempt: int) -> float:
    # Full jitter (Brooker, "Exponential Backoff and Jitter", AWS Architecture Blog 2015):
    # many devices refused at once do not come back at once.
    return random.uniform(0, min(5.0, 0.1 * 2 ** attempt))


def enroll(server: str, ca: bytes | str | Path, token: str, out: str | Path | None = None, *,
           timeout: float = 30.0, attempts: int = 4) -> Credentials:
    """Enroll this device: generate its key, get a certificate for it, return credentials.

    ``server`` is the service's ``host:port`` (its certificate must name ``host``), ``ca``
    the deployment's ``ca.pem`` (path or bytes), ``token`` the one-time token. With
    ``out``, writes ``<identity>.pem``, ``<identity>.key`` (owner-only) and ``ca.pem``
    there, loadable with ``load_credentials(out, identity)``. Busy or lost replies are
    retried up to ``attempts`` times; a refusal raises :class:`EnrollmentError`.
    """
    grpc = _grpc()
    ca_pem, attempts = _ca_bytes(ca), _check_attempts(attempts)
    key = ec.generate_private_key(ec.SECP256R1())
    request = enrollment_request(token, key)
    for attempt in range(attempts):
        with grpc.secure_channel(server, grpc.ssl_channel_credentials(ca_pem),
                                 options=CHANNEL_OPTIONS) as channel:
            try:
                reply = channel.unary_unary(ENROLL)(request, timeout=timeout)
                break
            except grpc.RpcError as error:
                if error.code().name not in _RETRY or attempt == attempts - 1:
                    raise _failure(error) from None
        time.sleep(_backoff(attempt))
    credentials = _credentials(reply, key, ca_pem)
    if out is not None:
        write_credentials(credentials, out)
    return credentials


async def enroll_async(server: str, ca: bytes | str | Path, token: str, *,
                       timeout: float = 30.0, attempts: int = 4) -> Credentials:
    """:func:`enroll` for an event loop, so one process can enroll many devices at once,
    each with its own key and its own connection. Returns the credentials (write them
    with :func:`write_credentials`)."""
    grpc = _grpc()
    ca_pem, attempts = _ca_bytes(ca), _check_attempts(attempts)
    key = ec.generate_private_key(ec.SECP256R1())
    request = enrollment_request(token, key)
    for attempt in range(attempts):
        async with grpc.aio.secure_channel(server, grpc.ssl_channel_credentials(ca_pem),
                                           options=CHANNEL_OPTIONS) as channel:
            try:
                reply = await channel.unary_unary(ENROLL)(request, timeout=timeout)
                break
            except grpc.aio.AioRpcError as error:
                if error.code().name not in _RETRY or attempt == attempts - 1:
                    raise _failure(error) from None
        await asyncio.sleep(_backoff(attempt))
    return _credentials(reply, key, ca_pem)


def write_credentials(credentials: Credentials, out: str | Path) -> Path:
    """Write ``<identity>.pem``, ``<identity>.key`` (owner-only) and ``ca.pem`` to ``out``."""
    base = Path(out)
    base.mkdir(parents=True, exist_ok=True)
    _write_private(base / f"{credentials.identity}.key", credentials.key)
    (base / f"{credentials.identity}.pem").write_bytes(credentials.certificate)
    (base / "ca.pem").write_bytes(credentials.ca)
    return base
