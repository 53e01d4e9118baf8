"""Splits of M samples into K clients: IID and non-IID (by score), K = M included.

004 (Sun et al., FedAUC) Sec. 6.2.2 simulates two ways of assigning the evaluation
samples to clients, each client holding M / K samples on average:

1. IID: "all data points are uniformly assigned to the clients";
2. Non-IID: "all data points are assigned to the clients based on their corresponding
   prediction scores. Data samples with similar prediction scores will be assigned to the
   same client."

Both splits here give every client ``floor(M / K)`` or ``ceil(M / K)`` samples, so no
client is empty for any ``1 <= K <= M``; ``K = M`` is the paper's extreme case of one
sample per client (004 Sec. 6.2.2, App. O). A split is returned as the client id of each
sample (``client_of_sample``), the form the FedAUC driver
(:func:`fedustat.protocols.fedauc.protocol.run_fedauc`) takes.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from fedustat._validation import RandomLike, as_float_array, as_rng, check_positive_int

__all__ = [
    "PARTITIONS",
    "by_score_partition",
    "check_client_assignment",
    "client_sizes",
    "iid_partition",
    "partition_clients",
]

PartitionKind = Literal["iid", "by-score"]
#: Names accepted by :func:`partition_clients`.
PARTITIONS: tuple[str, ...] = ("iid", "by-score")


def _check_counts(n_samples: Any, n_clients: Any) -> tuple[int, int]:
    m = check_positive_int(n_samples, "n_samples")
    k = check_positive_int(n_clients, "n_clients")
    if k > m:
        raise ValueError(f"n_clients ({k}) exceeds the number of samples ({m}); every client "
                         f"needs at least one sample, so use n_clients <= {m}")
    return m, k


def _equal_groups(n_samples: int, n_clients: int) -> np.ndarray:
    """Group of each position 0..M-1 when M positions are cut into K runs of near-equal size.

    Position i goes to floor(i K / M): run sizes are floor(M/K) or ceil(M/K), none empty.
    """
    return np.arange(n_samples, dtype=np.int64) * n_clients // n_samples


def iid_partition(n_samples: int, n_clients: int, rng: RandomLike = None) -> np.ndarray:
    """Assign M samples to K clients uniformly at random (004 Sec. 6.2.2, "IID").

    A uniformly random permutation of the samples is cut into K runs of near-equal size,
    so each client holds ``floor(M/K)`` or ``ceil(M/K)`` samples and every set of that
    size is equally likely to be a given client's.

    Parameters
    ----------
    n_samples : int
        Number of samples M (>= 1).
    n_clients : int
        Number of clients K, ``1 <= K <= M``.
    rng : int, Generator or None
        Seed or generator; the same seed gives the same split.

    Returns
    -------
    numpy.ndarray of int64, shape (M,)
        Client id in ``0..K-1`` of each sample.
    """
    m, k = _check_counts(n_samples, n_clients)
    gen = as_rng(rng)
    client = np.empty(m, dtype=np.int64)
    client[gen.permutation(m)] = _equal_groups(m, k)
    return client


def by_score_partition(scores: Any, n_clients: int) -> np.ndarray:
    """Assign samples to clients by score (004 Sec. 6.2.2, "Non-IID").

    Samples are sorted by score (ties in their input order, a stable sort) and the sorted
    list is cut into K runs of near-equal size: client 0 holds the lowest scores, client
    K - 1 the highest. Deterministic.

    Parameters
    ----------
    scores : array_like of shape (M,)
        Prediction scores (finite).
    n_clients : int
        Number of clients K, ``1 <= K <= M``.

    Returns
    -------
    numpy.ndarray of int64, shape (M,)
        Client id in ``0..K-1`` of each sample.
    """
    s = as_float_array(scores, "scores")
    m, k = _check_counts(s.size, n_clients)
    client = np.empty(m, dtype=np.int64)
    client[np.argsort(s, kind="stable")] = _equal_groups(m, k)
    return client


def partition_clients(scores: Any, n_clients: int, kind: PartitionKind = "iid",
                      rng: RandomLike = None) -> np.ndarray:
    """Split samples into clients by name: ``"iid"`` or ``"by-score"`` (non-IID).

    Parameters
    ----------
    scores : array_like of shape (M,)
        Prediction scores (used by ``"by-score"``; for ``"iid"`` only their number).
    n_clients : int
        Number of clients K, ``1 <= K <= M``.
    kind : {"iid", "by-score"}
        Which split (004 Sec. 6.2.2).
    rng : int, Generator or None
        Randomness of the ``"iid"`` split.

    Returns
    -------
    numpy.ndarray of int64, shape (M,)
        Client id of each sample.
    """
    s = as_float_array(scores, "scores")
    if kind == "iid":
        return iid_partition(s.size, n_clients, rng)
    if kind == "by-score":
        return by_score_partition(s, n_clients)
    raise ValueError(f"partition must be one of {', '.join(map(repr, PARTITIONS))}, "
                     f"got {kind!r}")


def check_client_assignment(client_of_sample: Any, n_samples: int | None = None,
                            n_clients: int | None = None) -> tuple[np.ndarray, int]:
    """Validate a client id per sample; return it as int64 and the number of clients.

    Parameters
    ----------
    client_of_sample : array_like of int, shape (M,)
        Client id of each sample, in ``0..K-1``.
    n_samples : int, optional
        Expected M.
    n_clients : int, optional
        Expected K; by default ``max(client_of_sample) + 1``.

    Raises
    ------
    ValueError
        If ids are not whole numbers >= 0, the length is not ``n_samples``, an id is
        ``>= n_clients``, or some client in ``0..K-1`` holds no sample.
    """
    raw = np.asarray(client_of_sample)
    if raw.dtype == bool:
        raise TypeError("client_of_sample must hold integer client ids, got booleans")
    arr = as_float_array(raw, "client_of_sample")
    ids = arr.astype(np.int64)
    if not np.array_equal(ids, arr):
        raise ValueError("client_of_sample must contain whole numbers (client ids 0..K-1)")
    if ids.min() < 0:
        raise ValueError(f"client_of_sample must be >= 0, found {int(ids.min())}")
    if n_samples is not None and ids.size != n_samples:
        raise ValueError(f"client_of_sample has {ids.size} entries but there are {n_samples} "
                         f"samples; give one client id per sample")
    k = int(ids.max()) + 1 if n_clients is None else check_positive_int(n_clients, "n_clients")
    if int(ids.max()) >= k:
        raise ValueError(f"client_of_sample has id {int(ids.max())} but n_clients is {k}; "
                         f"ids must be in 0..{k - 1}")
    sizes = np.bincount(ids, minlength=k)
    empty = np.flatnonzero(sizes == 0)
    if empty.size:
        shown = ", ".join(map(str, empty[:5].tolist())) + (", ..." if empty.size > 5 else "")
        raise ValueError(f"client_of_sample leaves {empty.size} client(s) with no samples "
                         f"(ids {shown}); every client in 0..{k - 1} must hold at least one "
                         "sample (renumber the clients or lower n_clients)")
    return ids, k


def client_sizes(client_of_sample: Any, n_clients: int | None = None) -> np.ndarray:
    """Number of samples of each client (validated: no client is empty)."""
    ids, k = check_client_assignment(client_of_sample, n_clients=n_clients)
    return np.bincount(ids, minlength=k)
