"""Certificates for one deployment: a private CA and a key pair per role.

Every channel of a networked run is mutually authenticated TLS: the server presents a
certificate for its host names, every party, computing server and dealer presents its
own, and both sides accept only certificates signed by the deployment's CA. A role's
identity is its certificate's common name (``server``, ``party-0``, ``party-1``, ...), which
the transport reads from the authenticated channel, never from a message.

:func:`create_deployment` writes such a set for a test deployment (``fedustat certs``);
a production deployment may use its own CA with the same names. The CA's key is written
too (``ca.key``, owner-only) for the operator's enrollment service
(:mod:`fedustat.runtime.network.enroll`), which signs devices' own keys with it; it stays
on the operator's machine.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Credentials", "create_deployment", "load_credentials", "party_identity"]

_VALIDITY = dt.timedelta(days=30)
_PARTY = re.compile(r"^party-(\d+)$")


def party_identity(index: int) -> str:
    """The certificate name of party ``index``."""
    return f"party-{index}"


def party_index(identity: str) -> int | None:
    """The index in a party's certificate name, or None for another role."""
    match = _PARTY.match(identity)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Credentials:
    """PEM bytes a role needs: the CA certificate, its own certificate and key."""

    ca: bytes
    certificate: bytes
    key: bytes
    identity: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fedustat deployment"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _issue(ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, common_name: str,
           hosts: tuple[str, ...], now: dt.datetime) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = [x509.DNSName(common_name)]
    for host in hosts:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + _VALIDITY)
            .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def create_deployment(directory: str | Path, n_parties: int, *,
                      server_hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
                      extra_roles: tuple[str, ...] = ()) -> Path:
    """Write a CA and certificates for a server, ``n_parties`` parties and extra roles.

    Files: ``ca.pem`` and ``ca.key`` (the CA's key, for the operator's enrollment
    service only), and ``<identity>.pem`` / ``<identity>.key`` for ``server``,
    ``party-0`` ... and each of ``extra_roles`` (e.g. ``dealer``). Keys are written with
    owner-only permissions. Returns the directory.
    """
    if isinstance(n_parties, bool) or not isinstance(n_parties, int) or n_parties < 1:
        raise ValueError(f"n_parties must be an integer >= 1, got {n_parties!r}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("fedustat deployment CA")
    ca_cert = (x509.CertificateBuilder()
               .subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + _VALIDITY)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .sign(ca_key, hashes.SHA256()))
    (out / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(out / "ca.key", _pem_key(ca_key))
    identities = ["server", *(party_identity(i) for i in range(n_parties)), *extra_roles]
    for identity in identities:
        hosts = server_hosts if identity == "server" else ()
        cert, key = _issue(ca_key, ca_name, identity, hosts, now)
        (out / f"{identity}.pem").write_bytes(cert)
        _write_private(out / f"{identity}.key", key)
    return out


def _write_private(path: Path, data: bytes) -> None:
    """Write a key readable by its owner only (created so, never world-readable first)."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_bytes(data)


def load_credentials(directory: str | Path, identity: str) -> Credentials:
    """The CA certificate and ``identity``'s certificate and key from ``directory``."""
    base = Path(directory)
    paths = [base / "ca.pem", base / f"{identity}.pem", base / f"{identity}.key"]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"credentials for {identity!r} are incomplete: missing "
                                f"{', '.join(missing)} (create them with `fedustat certs`)")
    return Credentials(*(p.read_bytes() for p in paths), identity=identity)
