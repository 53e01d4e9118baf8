"""End-to-end encryption and authentication of peer rows relayed by the server.

Parties connect out to the server only, so a row one party addresses to another (a relay
round, :attr:`~fedustat.protocols.base.Message.is_peer`) travels through the server. The
server must forward it without being able to read or alter it:

* **Whose keys.** The server hands every party the certificates of all parties of the run
  (in the ``Join`` reply). Each party checks every one against the deployment CA (issuer
  signature, validity, the name ``party-i`` at index ``i``, a P-256 key), so a server
  cannot substitute a key of its own.
* **Pairwise key.** Parties ``a`` and ``b`` derive the same 256-bit key from ECDH on their
  certificates' P-256 keys (NIST SP 800-56A), expanded by HKDF-SHA256 (RFC 5869) with
  the run id and both identities, in a fixed order, as ``info``: a key per pair and run.
* **Sealing.** Each payload is sealed with AES-256-GCM (NIST SP 800-38D). The 96-bit nonce
  is derived from (run, round, sender, receiver, counter), unique per key because the run
  is in the key and (round, direction, counter) never repeats within a run. The
  associated data binds the header facts: protocol fingerprint, run, round, sender,
  receiver, the declared rows (origins, destinations, bits) and the layout the payload
  is read with. A payload (or its layout) that is altered, replayed in another round or
  run, redirected, or not sealed by the claimed sender fails to open, with a
  :class:`~fedustat.runtime.wire.WireError` naming the sender.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509.oid import NameOID

from fedustat.runtime.network.certs import party_identity
from fedustat.runtime.wire import WireError

__all__ = ["CertificateRefusedError", "PartyDirectory", "PeerKeys", "verify_party_certificates"]

_INFO = b"fedustat relay v1"


def _common_name(cert: x509.Certificate) -> str:
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def verify_party_certificates(ca_pem: bytes, certificates: Sequence[str | bytes],
                              now: dt.datetime | None = None,
                              names: Sequence[str] | None = None
                              ) -> list[ec.EllipticCurvePublicKey | None]:
    """The P-256 public keys of parties ``0 .. len(certificates) - 1``, each certificate
    checked against the deployment CA; a ``ValueError`` names the first one that fails.

    An empty entry is a silo that did not join (the run went on without it): no key, and
    no payload can be sealed for it or opened from it. ``names`` gives the expected name at
    each index when the run has service roles after its silos (default ``party-i``).
    """
    directory = PartyDirectory(ca_pem, certificates, now=now, names=names)
    return [directory[i] for i in range(len(directory))]


class CertificateRefusedError(ValueError):
    """A certificate in the server's directory fails the deployment's checks."""


class PartyDirectory(Sequence):
    """The parties' public keys, each certificate checked against the CA on first use.

    A party of a large run exchanges with a few others (U-MPC's edges and noise
    contributors): checking all n signatures up front would cost every party O(n)
    signature checks, n^2 for the run. An entry is checked when its key is first needed,
    and a certificate that fails raises the same ``ValueError`` as
    :func:`verify_party_certificates` before any payload is sealed for or opened from it.
    """

    def __init__(self, ca_pem: bytes, certificates: Sequence[str | bytes], *,
                 now: dt.datetime | None = None, names: Sequence[str] | None = None
                 ) -> None:
        self._ca = x509.load_pem_x509_certificate(ca_pem)
        self._certificates = list(certificates)
        self._moment = now or dt.datetime.now(dt.UTC)
        self._names = None if names is None else list(names)
        if self._names is not None and len(self._names) != len(self._certificates):
            raise ValueError(f"{len(self._certificates)} certificates for "
                             f"{len(self._names)} names")
        self._keys: dict[int, ec.EllipticCurvePublicKey | None] = {}

    def __len__(self) -> int:
        return len(self._certificates)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        if index not in self._keys:
            self._keys[index] = self._check(index)
        return self._keys[index]

    def _check(self, index: int) -> ec.EllipticCurvePublicKey | None:
        expected = party_identity(index) if self._names is None else self._names[index]
        pem = self._certificates[index]
        if not pem:
            return None
        raw = pem.encode() if isinstance(pem, str) else bytes(pem)
        try:
            cert = x509.load_pem_x509_certificate(raw)
            cert.verify_directly_issued_by(self._ca)
        except (ValueError, TypeError, InvalidSignature) as exc:
            raise CertificateRefusedError(
                f"the certificate given for {expected} is not issued by this deployment's "
                f"CA ({exc or type(exc).__name__})") from None
        if _common_name(cert) != expected:
            raise CertificateRefusedError(f"the certificate given for {expected} names "
                                          f"{_common_name(cert)!r}")
        if not cert.not_valid_before_utc <= self._moment <= cert.not_valid_after_utc:
            raise CertificateRefusedError(f"the certificate of {expected} is not valid now")
        key = cert.public_key()
        if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
            raise CertificateRefusedError(f"the certificate of {expected} does not hold a "
                                          "P-256 key")
        return key


def _facts(protocol: str, run: str, round_: int, sender: str, receiver: str,
           origins: np.ndarray, targets: np.ndarray, bits: np.ndarray,
           layout: bytes) -> bytes:
    """Associated data: the header facts, a digest of the declared rows and one of the
    rows' layout (how the payload's bytes are read)."""
    rows = hashlib.sha256()
    for array in (origins, targets, bits):
        rows.update(np.ascontiguousarray(array, dtype="<i8").tobytes())
    return json.dumps({"protocol": protocol, "run": run, "round": int(round_),
                       "sender": sender, "receiver": receiver,
                       "rows": int(np.size(origins)), "digest": rows.hexdigest(),
                       "layout": hashlib.sha256(layout).hexdigest()},
                      sort_keys=True).encode()


class PeerKeys:
    """One party's pairwise keys with every party of a run (derived on first use).

    Parameters
    ----------
    own_index:
        This party's index (its certificate is ``party-{own_index}``).
    own_key_pem:
        Its private key (PEM, as in its credentials).
    peer_keys:
        Every party's verified public key (:func:`verify_party_certificates`), or a
        :class:`PartyDirectory` that checks each on first use.
    protocol, run:
        The protocol fingerprint and the run id, bound into every key and payload.
    names:
        The identity at each index, when the run has service roles after its silos
        (default ``party-i``).
    """

    def __init__(self, own_index: int, own_key_pem: bytes,
                 peer_keys: Sequence[ec.EllipticCurvePublicKey | None], protocol: str,
                 run: str, names: Sequence[str] | None = None) -> None:
        key = serialization.load_pem_private_key(own_key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("a party's key must be an elliptic-curve (P-256) key")
        self._private = key
        self.own = int(own_index)
        # Kept as given: a PartyDirectory checks a certificate only when its key is used.
        self.peers = peer_keys
        self.protocol = protocol
        self.run = run
        self.names = [party_identity(i) for i in range(len(self.peers))] if names is None \
            else list(names)
        self._cache: dict[int, AESGCM] = {}

    def _aead(self, other: int) -> AESGCM:
        if not 0 <= other < len(self.peers) or self.peers[other] is None:
            raise ValueError(f"party index {other} is not one of the run's "
                             f"{len(self.peers)} parties, or did not join it")
        if other not in self._cache:
            shared = self._private.exchange(ec.ECDH(), self.peers[other])
            low, high = sorted((self.own, other))
            info = b"|".join([_INFO, self.run.encode(), self.names[low].encode(),
                              self.names[high].encode()])
            key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                       info=info).derive(shared)
            self._cache[other] = AESGCM(key)
        return self._cache[other]

    def _nonce(self, round_: int, sender: int, receiver: int, counter: int) -> bytes:
        # Unique per key: the run is in the key; (round, direction, counter) never repeats.
        return hashlib.sha256(_INFO + self.run.encode() + struct.pack(
            ">QQQQ", round_, sender, receiver, counter)).digest()[:12]

    def seal(self, round_: int, receiver: int, counter: int, payload: bytes,
             origins: np.ndarray, targets: np.ndarray, bits: np.ndarray, *,
             layout: bytes = b"") -> bytes:
        """``payload`` sealed for party ``receiver``, bound to the declared rows and
        their ``layout``."""
        aad = _facts(self.protocol, self.run, round_, self.names[self.own],
                     self.names[receiver], origins, targets, bits, layout)
        return self._aead(receiver).encrypt(self._nonce(round_, self.own, receiver, counter),
                                            payload, aad)

    def open(self, round_: int, sender: int, counter: int, sealed: bytes,
             origins: np.ndarray, targets: np.ndarray, bits: np.ndarray, *,
             layout: bytes = b"") -> bytes:
        """The payload party ``sender`` sealed for this party, or a WireError naming it."""
        aad = _facts(self.protocol, self.run, round_, self.names[sender],
                     self.names[self.own], origins, targets, bits, layout)
        try:
            return self._aead(sender).decrypt(self._nonce(round_, sender, self.own, counter),
                                              bytes(sealed), aad)
        except InvalidTag:
            raise WireError(f"party {self.names[sender]!r}", "relayed payload",
                            f"fails authentication in round {round_}: altered, replayed, "
                            "redirected or not sealed by its sender") from None

    def __repr__(self) -> str:
        return f"PeerKeys(own={self.own}, parties={len(self.peers)}, run={self.run!r})"

