"""Privacy primitives: noise sources, mechanisms, local randomizers, accounting, checks.

* :mod:`~fedustat.privacy.noise`: simulation vs deployment randomness (``NoiseSource``).
* :mod:`~fedustat.privacy.mechanisms`: Laplace, Gaussian, discrete Laplace; Pólya shares.
* :mod:`~fedustat.privacy.randomizers`: binary / k-ary randomized response, Hadamard response.
* :mod:`~fedustat.privacy.frequency_oracles`: subset selection and the frequency-oracle
  chooser by exact variance.
* :mod:`~fedustat.privacy.accounting`: basic and advanced composition, budget splits.
* :mod:`~fedustat.privacy.budget`: a budget accountant (basic, advanced, zCDP) per data set.
* :mod:`~fedustat.privacy.verify`: exact LDP verification on small domains.
* :mod:`~fedustat.privacy.guarantee`: the guarantee a release carries, as data.
"""

from fedustat.privacy.accounting import (
    advanced_composition,
    basic_composition,
    per_step_budget_advanced,
    split_budget,
)
from fedustat.privacy.budget import (
    BudgetAccountant,
    BudgetExceededError,
    IncomparableGuaranteeError,
    PrivacyBudget,
)
from fedustat.privacy.frequency_oracles import SubsetSelection, best_frequency_oracle
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.privacy.mechanisms import (
    DiscreteLaplaceMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    classic_gaussian_sigma,
    distributed_discrete_laplace_shares,
    gaussian_delta,
    polya,
)
from fedustat.privacy.noise import DeploymentNoise, NoiseSource, SimulationNoise, as_noise
from fedustat.privacy.randomizers import (
    BinaryRandomizedResponse,
    FrequencyOracle,
    HadamardResponse,
    KaryRandomizedResponse,
    LocalRandomizer,
    OracleSummary,
    fwht,
)
from fedustat.privacy.verify import LDPVerification, verify_ldp

__all__ = [
    "BinaryRandomizedResponse",
    "BudgetAccountant",
    "BudgetExceededError",
    "DeploymentNoise",
    "DiscreteLaplaceMechanism",
    "FrequencyOracle",
    "GaussianMechanism",
    "HadamardResponse",
    "IncomparableGuaranteeError",
    "KaryRandomizedResponse",
    "LDPVerification",
    "LaplaceMechanism",
    "LocalRandomizer",
    "NoiseSource",
    "OracleSummary",
    "PrivacyBudget",
    "PrivacyGuarantee",
    "PrivacyModel",
    "SimulationNoise",
    "SubsetSelection",
    "advanced_composition",
    "as_noise",
    "basic_composition",
    "best_frequency_oracle",
    "classic_gaussian_sigma",
    "distributed_discrete_laplace_shares",
    "fwht",
    "gaussian_delta",
    "per_step_budget_advanced",
    "polya",
    "split_budget",
    "verify_ldp",
]
