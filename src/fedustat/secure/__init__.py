"""Secure computation for the protocols: real secret sharing, a dealer, Beaver products,
comparisons (boolean circuits for any group size, function secret sharing for two),
distributed discrete Laplace noise, and a log of every bit sent.

Everything is computed for real — every share, mask, key and opened value — in
vectorized NumPy over many groups of parties at once. ``docs/secure.md`` states the
security model (semi-honest parties, a trusted dealer for the offline phase) and the
costs of each primitive.

Modules
-------
ring        Z_{2^l} on uint64 arrays; randomness sources (seeded or the OS CSPRNG)
fixedpoint  fixed-point encoding (002 App. A.1, defaults l = 40, c = 14)
sharing     additive (p, p) and XOR sharing, openings
transcript  the message log: bits per member, phase and round; conversion to a Cost
dealer      the offline phase: Beaver and AND triples, edaBits, daBits, FSS keys
beaver      Beaver multiplication, AND gates, B2A
compare     [x < y], msb, [x == y] (method "circuit" or "fss")
dcf         DCF/DPF key generation and evaluation (AES-128 PRG), the gates' dealt material
fss_gates   FSS gates on 2-party shares: msb and zero test
noise       Protocol B.1 noise, its M_HF subgroup variant and Remark B.1's local variant
"""

from fedustat.secure.beaver import and_gates, b2a, mul, mul_many
from fedustat.secure.compare import (
    ComparisonMaterial,
    PrimitiveCost,
    comparison_cost,
    deal_equal,
    deal_less_than,
    deal_msb,
    equal,
    greater_than,
    less_than,
    msb,
)
from fedustat.secure.dcf import FssKey, dcf_eval, dcf_gen, dpf_eval, dpf_gen
from fedustat.secure.dealer import AndTriples, BeaverTriples, DaBits, Dealer, EdaBits
from fedustat.secure.fixedpoint import FixedPoint
from fedustat.secure.fss_gates import fss_is_zero, fss_msb
from fedustat.secure.noise import (
    NoiseShares,
    PolyaDifferenceError,
    contributor_noise,
    distributed_noise,
    local_noise,
    mhf_noise,
    noise_magnitude_bound,
    subgroup_size,
)
from fedustat.secure.ring import DEFAULT_RING, Ring, SystemRandomness
from fedustat.secure.sharing import (
    add_public,
    member_openings,
    mul_public,
    open_shares,
    open_xor,
    public_shares,
    reconstruct,
    share,
    xor_reconstruct,
    xor_share,
)
from fedustat.secure.transcript import PartyBits, Transcript

__all__ = [
    "DEFAULT_RING",
    "AndTriples",
    "BeaverTriples",
    "ComparisonMaterial",
    "DaBits",
    "Dealer",
    "EdaBits",
    "FixedPoint",
    "FssKey",
    "NoiseShares",
    "PartyBits",
    "PolyaDifferenceError",
    "PrimitiveCost",
    "Ring",
    "SystemRandomness",
    "Transcript",
    "add_public",
    "and_gates",
    "b2a",
    "comparison_cost",
    "contributor_noise",
    "dcf_eval",
    "dcf_gen",
    "deal_equal",
    "deal_less_than",
    "deal_msb",
    "distributed_noise",
    "dpf_eval",
    "dpf_gen",
    "equal",
    "fss_is_zero",
    "fss_msb",
    "greater_than",
    "less_than",
    "local_noise",
    "member_openings",
    "mhf_noise",
    "msb",
    "mul",
    "mul_many",
    "mul_public",
    "noise_magnitude_bound",
    "open_shares",
    "open_xor",
    "public_shares",
    "reconstruct",
    "share",
    "subgroup_size",
    "xor_reconstruct",
    "xor_share",
]
