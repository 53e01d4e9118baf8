"""Enrollment: devices trade a one-time token and a CSR for a short-lived party certificate.

A real service process (``fedustat enroll-server``) on a free port, devices in this process;
every process started here is stopped by its id, also when a test fails.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from concurrent import futures
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

from fedustat.cli import main  # noqa: E402
from fedustat.runtime.network.certs import create_deployment, load_credentials  # noqa: E402
from fedustat.runtime.network.enroll import (  # noqa: E402
    ENROLL,
    EnrollmentError,
    EnrollmentService,
    TokenStore,
    enroll,
    enroll_async,
    enrollment_request,
    mint_tokens,
    token_digest,
)

FEDUSTAT = [sys.executable, "-m", "fedustat.cli"]
WAIT = 60.0  # a hang guard only


class Services:
    """Enrollment service processes of a test or module, stopped by process id."""

    def __init__(self) -> None:
        self.running: list[subprocess.Popen] = []

    def start(self, certs: Path, store: Path, *extra: str) -> tuple[subprocess.Popen, int]:
        proc = subprocess.Popen([*FEDUSTAT, "enroll-server", "--certs", str(certs),
                                 "--store", str(store), "--address", "127.0.0.1:0", *extra],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        self.running.append(proc)
        line = proc.stdout.readline()
        match = re.search(r"listening on port (\d+)", line)
        assert match, f"the service did not start: {line!r} {proc.stderr.read()!r}"
        return proc, int(match.group(1))

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

    def stop_all(self) -> None:
        for proc in self.running:
            self.stop(proc)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """A deployment with one hand-made party (party-0) and a store of 40 tokens."""
    base = tmp_path_factory.mktemp("enroll")
    certs = create_deployment(base / "certs", 1)
    tokens = mint_tokens(40)
    store = TokenStore(base / "enroll.db")
    store.add(tokens)
    store.close()
    return certs, base / "enroll.db", tokens


@pytest.fixture(scope="module")
def service(deployment):
    certs, store, tokens = deployment
    services = Services()
    try:
        _, port = services.start(certs, store)
        yield f"localhost:{port}", certs, iter(tokens), services
    finally:
        services.stop_all()


def send(address: str, ca: bytes, request: bytes) -> bytes:
    with grpc.secure_channel(address, grpc.ssl_channel_credentials(ca)) as channel:
        return channel.unary_unary(ENROLL)(request, timeout=WAIT)


def refusal(address: str, ca: bytes, request: bytes) -> tuple[str, str]:
    with pytest.raises(grpc.RpcError) as caught:
        send(address, ca, request)
    return caught.value.code().name, caught.value.details()


def test_device_enrolls_and_passes_mutual_tls(service, tmp_path):
    address, certs, tokens, _ = service
    credentials = enroll(address, certs / "ca.pem", next(tokens), tmp_path / "device")
    identity = credentials.identity
    # Assigned by the service, after the deployment's hand-made party-0; the CSR asked
    # for another name, which is ignored.
    index = int(re.fullmatch(r"party-(\d+)", identity).group(1))
    assert index >= 1
    loaded = load_credentials(tmp_path / "device", identity)
    assert loaded == credentials
    assert (tmp_path / "device" / f"{identity}.key").stat().st_mode & 0o777 == 0o600

    ca = x509.load_pem_x509_certificate((certs / "ca.pem").read_bytes())
    cert = x509.load_pem_x509_certificate(loaded.certificate)
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == identity
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert lifetime == dt.timedelta(hours=24, minutes=5)  # 24 h, and 5 min of clock skew
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca

    # Mutual TLS against a server of the deployment that requires a client certificate:
    # it reads the enrolled identity from the channel.
    server_tls = load_credentials(certs, "server")
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.Who", {
        "Who": grpc.unary_unary_rpc_method_handler(
            lambda request, context: context.auth_context()["x509_common_name"][0])}),))
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
        [(server_tls.key, server_tls.certificate)], root_certificates=server_tls.ca,
        require_client_auth=True))
    server.start()
    try:
        with grpc.secure_channel(f"localhost:{port}", grpc.ssl_channel_credentials(
                loaded.ca, loaded.key, loaded.certificate)) as channel:
            assert channel.unary_unary("/t.Who/Who")(b"", timeout=WAIT) == identity.encode()
        # The control: without the enrolled certificate the same server refuses.
        with grpc.secure_channel(f"localhost:{port}", grpc.ssl_channel_credentials(
                loaded.ca)) as channel, pytest.raises(grpc.RpcError):
            channel.unary_unary("/t.Who/Who")(b"", timeout=WAIT)
    finally:
        server.stop(0)


def test_token_used_twice_is_refused(service, tmp_path):
    address, certs, tokens, _ = service
    token = next(tokens)
    first = enroll(address, certs / "ca.pem", token)
    with pytest.raises(EnrollmentError, match="token was already used"):
        enroll(address, certs / "ca.pem", token, tmp_path / "second")
    assert not (tmp_path / "second").exists()
    # The same device repeating its request (its reply lost) gets the same certificate,
    # not a second identity.
    ca = (certs / "ca.pem").read_bytes()
    key = ec.generate_private_key(ec.SECP256R1())
    token = next(tokens)
    replies = [json.loads(send(address, ca, enrollment_request(token, key)))
               for _ in range(2)]
    assert replies[0] == replies[1]
    assert replies[0]["identity"] != first.identity


def test_unknown_token_is_refused(service):
    address, certs, _, _ = service
    with pytest.raises(EnrollmentError, match="token is not known to the service"):
        enroll(address, certs / "ca.pem", mint_tokens(1)[0])


def test_bad_csr_is_refused_and_the_token_kept(service):
    address, certs, tokens, _ = service
    ca = (certs / "ca.pem").read_bytes()
    token = next(tokens)
    request = json.loads(enrollment_request(token, ec.generate_private_key(ec.SECP256R1())))
    der = bytearray(base64.b64decode(request["csr"]))
    der[-1] ^= 0x01  # the last byte of the ECDSA signature's s
    forged = json.dumps({"token": token, "csr": base64.b64encode(bytes(der)).decode()})
    code, details = refusal(address, ca, forged.encode())
    assert code == "INVALID_ARGUMENT"
    assert "signature does not verify" in details

    # Another curve's key: refused by key type.
    other = json.loads(enrollment_request(token, ec.generate_private_key(ec.SECP384R1())))
    code, details = refusal(address, ca, json.dumps(other).encode())
    assert "must be ECDSA P-256 (secp256r1), got ECDSA secp384r1" in details
    code, details = refusal(address, ca, b'{"token": "x"}')
    assert "must be JSON with a string token and a base64 csr" in details

    # Nothing was issued for those, so the token still enrolls a device.
    assert enroll(address, ca, token).identity.startswith("party-")


def test_private_key_never_sent(service, tmp_path, monkeypatch):
    address, certs, tokens, _ = service
    sent: list[bytes] = []

    class Recorder(grpc.UnaryUnaryClientInterceptor):
        def intercept_unary_unary(self, continuation, details, request):
            sent.append(request)
            return continuation(details, request)

    real = grpc.secure_channel
    monkeypatch.setattr(grpc, "secure_channel",
                        lambda *a, **k: grpc.intercept_channel(real(*a, **k), Recorder()))
    credentials = enroll(address, certs / "ca.pem", next(tokens), tmp_path / "device")
    assert len(sent) == 1
    request = sent[0]
    key = serialization.load_pem_private_key(credentials.key, password=None)
    scalar = key.private_numbers().private_value.to_bytes(32, "big")
    body = json.loads(request)
    assert set(body) == {"token", "csr"}
    csr_der = base64.b64decode(body["csr"])
    for blob in (request, csr_der):
        assert scalar not in blob
        assert key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()) not in blob
    assert credentials.key not in request
    # What was sent is the CSR of this very key (so the capture is the real request).
    public = x509.load_der_x509_csr(csr_der).public_key()
    assert public == key.public_key()


def test_concurrent_requests_with_one_token_issue_one_certificate(service, deployment):
    address, certs, tokens, services = service
    _, store, _ = deployment
    ca = (certs / "ca.pem").read_bytes()
    # A second service process on the same store: requests race in two processes too.
    _, other_port = services.start(certs, store)
    other = f"localhost:{other_port}"

    async def race(token: str) -> list:
        return await asyncio.gather(enroll_async(address, ca, token),
                                    enroll_async(other, ca, token),
                                    enroll_async(address, ca, token),
                                    return_exceptions=True)

    async def all_races() -> list[list]:
        return await asyncio.gather(*(race(next(tokens)) for _ in range(5)))

    issued = []
    for outcome in asyncio.run(all_races()):
        wins = [o for o in outcome if not isinstance(o, BaseException)]
        losses = [o for o in outcome if isinstance(o, BaseException)]
        assert len(wins) == 1, outcome
        assert all(isinstance(e, EnrollmentError) and "already used" in str(e) for e in losses)
        issued.append(wins[0].identity)
    assert len(set(issued)) == len(issued)


def test_restart_keeps_used_tokens_and_identities(deployment, tmp_path):
    certs, store, _ = deployment
    ca = (certs / "ca.pem").read_bytes()
    services = Services()
    try:
        proc, port = services.start(certs, store)
        token = mint_tokens(1)[0]
        with TokenStore(store) as added:
            added.add([token])
        before = enroll(f"localhost:{port}", ca, token)
        services.stop(proc)
        assert proc.returncode == 0  # SIGTERM ends it cleanly

        proc, port = services.start(certs, store, "--validity-hours", "0.5")
        with pytest.raises(EnrollmentError, match="already used"):
            enroll(f"localhost:{port}", ca, token)
        fresh = mint_tokens(1)[0]
        with TokenStore(store) as added:
            added.add([fresh])
        after = enroll(f"localhost:{port}", ca, fresh)
        cert = x509.load_pem_x509_certificate(after.certificate)
        assert cert.not_valid_after_utc - cert.not_valid_before_utc == \
            dt.timedelta(minutes=35)
        with TokenStore(store) as kept:
            used = {name for name, _, _ in kept.issued()}
        assert before.identity in used and after.identity in used
        assert int(after.identity.split("-")[1]) > int(before.identity.split("-")[1])
    finally:
        services.stop_all()


def test_enroll_tokens_cli_stores_digests_only(tmp_path, capsys):
    out, store = tmp_path / "tokens.txt", tmp_path / "store.db"
    assert main(["enroll-tokens", "--count", "5", "--out", str(out), "--store", str(store)]) == 0
    assert "5 unused, 0 used" in capsys.readouterr().out
    tokens = out.read_text().split()
    assert len(set(tokens)) == 5
    assert all(len(base64.urlsafe_b64decode(t + "==")) == 16 for t in tokens)  # 128 bits
    assert out.stat().st_mode & 0o777 == 0o600
    with sqlite3.connect(store) as db:
        digests = {row[0] for row in db.execute("SELECT digest FROM tokens")}
    assert digests == {hashlib.sha256(t.encode()).digest() for t in tokens}
    assert digests == {token_digest(t) for t in tokens}
    raw = store.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("store.db-*"))
    assert not any(t.encode() in raw for t in tokens)
    with pytest.raises(SystemExit, match="exists; tokens are never overwritten"):
        main(["enroll-tokens", "--count", "1", "--out", str(out), "--store", str(store)])


def test_enroll_cli_refusal_is_one_line(service, tmp_path):
    address, certs, _, _ = service
    with pytest.raises(SystemExit) as caught:
        main(["enroll", "--server", address, "--ca", str(certs / "ca.pem"),
              "--token", mint_tokens(1)[0], "--out", str(tmp_path)])
    assert str(caught.value.code).startswith("error: enrollment refused: this enrollment "
                                             "token is not known")
    assert "\n" not in str(caught.value.code)


def test_bad_arguments_name_themselves(deployment, tmp_path):
    with pytest.raises(ValueError, match="count must be an integer >= 1, got 0"):
        mint_tokens(0)
    with pytest.raises(ValueError, match="token must be the enrollment token text"):
        enrollment_request("short", ec.generate_private_key(ec.SECP256R1()))
    certs, store, _ = deployment
    text = tmp_path / "tokens.txt"
    text.write_text("not a database\n" * 100)
    refusals = [
        (["--store", str(text)], "error: store: .* is not a token store"),
        (["--store", str(tmp_path)], "error: --store .* is not a file"),
        (["--store", str(store), "--first-index", "-3"], "error: --first-index must be >= 0"),
        (["--store", str(store), "--validity-hours", "0"],
         "error: --validity-hours must be a positive number of hours"),
        (["--store", str(store), "--address", "999.1.1.1:5"],
         "error: address: cannot listen on 999.1.1.1:5"),
    ]
    for extra, message in refusals:
        with pytest.raises(SystemExit, match=message):
            main(["enroll-server", "--certs", str(certs), *extra])
    with pytest.raises(SystemExit, match=r"error: ca must be the deployment's ca\.pem"):
        main(["enroll", "--server", "localhost:1", "--ca", str(certs / "ca.key"),
              "--token", mint_tokens(1)[0], "--out", str(tmp_path)])


def test_one_batch_decides_requests_in_order(deployment, tmp_path):
    """Requests committed together (the service's group commit): one token twice in the
    batch issues once, the same key's repeat gets the same certificate, a bad request does
    not spoil the others, and nothing is written for a refused one."""
    certs, _, _ = deployment
    tokens = mint_tokens(2)
    with TokenStore(tmp_path / "batch.db") as store:
        store.add(tokens)
        service = EnrollmentService(certs, store)
        key = ec.generate_private_key(ec.SECP256R1())
        mine = enrollment_request(tokens[0], key)
        outcomes = service.handle_many([
            mine, enrollment_request(tokens[0], ec.generate_private_key(ec.SECP256R1())),
            mine, b"not json", enrollment_request(mint_tokens(1)[0], key),
            enrollment_request(tokens[1], ec.generate_private_key(ec.SECP256R1()))])
        first, reused, again, bad, unknown, second = outcomes
        assert json.loads(first)["identity"] == "party-1"  # after the hand-made party-0
        assert "already used" in str(reused)
        assert again == first
        assert "must be JSON" in str(bad)
        assert "not known" in str(unknown)
        assert json.loads(second)["identity"] == "party-2"
        assert store.counts() == (0, 2)
        assert [name for name, _, _ in store.issued()] == ["party-1", "party-2"]


def test_service_of_another_deployment_is_named_a_tls_failure(service, tmp_path):
    address, _, tokens, _ = service
    other = create_deployment(tmp_path / "other", 1)
    with pytest.raises(EnrollmentError, match="cannot reach the enrollment service over TLS"):
        enroll(address, other / "ca.pem", next(tokens), attempts=1)


def test_an_unreadable_request_fails_alone(deployment, tmp_path, monkeypatch):
    """A request whose CSR the library cannot handle (an unforeseen exception) is refused
    by itself; the others of its batch are issued."""
    certs, _, _ = deployment
    tokens = mint_tokens(2)
    with TokenStore(tmp_path / "alone.db") as store:
        store.add(tokens)
        service = EnrollmentService(certs, store)
        odd = b"odd-csr"
        real = service.check_csr

        def check(der):
            if der == odd:
                raise NotImplementedError("an algorithm nobody supports")
            return real(der)

        monkeypatch.setattr(service, "check_csr", check)
        strange = json.dumps({"token": tokens[0], "csr": base64.b64encode(odd).decode()})
        good = enrollment_request(tokens[1], ec.generate_private_key(ec.SECP256R1()))
        refused, issued = service.handle_many([strange.encode(), good])
        assert "could not be read (NotImplementedError)" in str(refused)
        assert json.loads(issued)["identity"].startswith("party-")
        assert store.counts() == (1, 1)
