"""What a Flower run of fedustat is configured with: run config, node config, the app.

Nothing here imports Flower, so the configuration can be checked (and tested) without it.

* **Run config** (``[tool.flwr.app.config]`` of the app, overridden by
  ``flwr run --run-config``): the protocol, the statistic, the budget, the protocol's
  parameters as JSON, the seed, the noise source and where the ServerApp writes the
  release. Server and nodes read the same run config; each node still checks the
  server's configuration mark against its own (:meth:`RunConfig.mark`).
* **Node config** (``flower-supernode --node-config``): the silo's data file, its silo
  index and, optionally, its columns, the largest epsilon its owner accepts, a file
  for the release summaries it receives and, for protocols with relay rounds, the
  directory of its deployment credentials (``certs``: ``ca.pem`` and its own
  ``party-<silo>.pem``/``.key``, as ``fedustat certs`` writes them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedustat import catalogue
from fedustat._validation import as_float_array
from fedustat.privacy.noise import DeploymentNoise
from fedustat.protocols import registry
from fedustat.protocols.base import Protocol
from fedustat.runtime.network.service import fingerprint, public_configuration
from fedustat.stats.kernels import Kernel

__all__ = ["CURVE_STATISTICS", "DEFAULT_RUN_CONFIG", "STATISTICS", "STATISTIC_ALIASES",
           "NodeConfig", "RunConfig", "app_pyproject", "load_silo", "write_app"]

#: Statistics a run can compute: the U-statistics of :mod:`fedustat.catalogue`, by its
#: names. Bounded kernels take their public bounds from ``statistic-bounds`` (never from
#: the data: that would leak it).
STATISTICS: dict[str, catalogue.Statistic] = {
    name: catalogue.get(name) for name in catalogue.names("u-statistic")}

#: Run-config names of earlier versions, still accepted: each stands for the catalogue's.
STATISTIC_ALIASES: dict[str, str] = {"kendall-a": "kendall", "rand-index": "rand"}

#: The curve statistic the app releases: the federated ECDF releases (``ecdf-secagg``,
#: ``ecdf-fss``) publish the ECDF at grid points. The quantiles read from it and the
#: central curve releases (roc, hl) are not run inside Flower.
CURVE_STATISTICS = ("ecdf",)

#: The run config the app declares (Flower only accepts overrides of declared keys).
#: ``seed = ""`` draws every random number from the operating system; an integer seed
#: reproduces the simulator's numbers. ``noise = "deployment"`` gives the protocol
#: :class:`~fedustat.privacy.noise.DeploymentNoise` (OS CSPRNG, fixed-work samplers) for
#: its randomizers and mechanisms; ``"auto"`` (the default) means deployment unless a
#: seed asks for simulation randomness. ``nodes = 0`` takes every connected SuperNode.
DEFAULT_RUN_CONFIG: dict[str, Any] = {
    "protocol": "ldp-quantized",
    "statistic": "auc",
    "statistic-bounds": "",
    "epsilon": 1.0,
    "delta": 0.0,
    "params": "{}",
    "seed": "",
    "noise": "auto",
    "nodes": 0,
    "release": "fedustat-release.json",
    "timeout": 120.0,
}


def _statistic(name: str, protocol: str) -> str:
    """The catalogue name of the run config's statistic (an old name mapped to it).

    A U-statistic protocol needs a U-statistic; the federated curve releases release the
    ECDF whatever the key says (so the default ``"auc"`` does not stop them), but a curve
    statistic the app does not release is refused.
    """
    name = STATISTIC_ALIASES.get(name, name)
    if name in STATISTICS:
        return name
    curves = [e.name for e in registry.available_curves()]
    if name in CURVE_STATISTICS:
        if registry.is_curve(protocol):
            return name
        raise ValueError(f"statistic {name!r} is released by the curve protocols "
                         f"{', '.join(curves)}, not by {protocol!r}")
    if name in catalogue.STATISTICS:
        raise ValueError(f"statistic {name!r} is a curve the Flower app does not release: "
                         f"its curve protocols ({', '.join(curves)}) release the ECDF "
                         "(statistic \"ecdf\"); `fedustat estimate --statistic "
                         f"{name}` releases it")
    raise ValueError(f"statistic {name!r} is unknown; choose one of {list(STATISTICS)} "
                     f"(a U-statistic protocol) or {list(CURVE_STATISTICS)} (the curve "
                     "protocols); older names still taken: "
                     + ", ".join(f"{old} = {new}" for old, new in STATISTIC_ALIASES.items()))


def _parse_bounds(text: str) -> tuple[float, float] | None:
    if not text.strip():
        return None
    parts = text.split(",")
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"statistic-bounds must be \"LO,HI\" (two numbers), got {text!r}"
                         ) from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"statistic-bounds must be finite with LO < HI, got {text!r}")
    return low, high


def _tuples(value: Any) -> Any:
    """JSON lists as tuples (protocol parameters such as bounds are pairs)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class RunConfig:
    """A validated run config (see :data:`DEFAULT_RUN_CONFIG` for the keys)."""

    protocol: str
    statistic: str
    statistic_bounds: tuple[float, float] | None
    epsilon: float
    delta: float
    params: dict[str, Any]
    seed: int | None
    noise: str
    nodes: int
    release: str
    timeout: float

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> RunConfig:
        """Check a Flower run config; errors name the key and what it should be."""
        unknown = sorted(set(config) - set(DEFAULT_RUN_CONFIG))
        if unknown:
            raise ValueError(f"unknown run config keys {unknown}; fedustat's keys are "
                             f"{sorted(DEFAULT_RUN_CONFIG)}")
        merged = {**DEFAULT_RUN_CONFIG, **config}
        statistic = _statistic(str(merged["statistic"]), str(merged["protocol"]))
        try:
            params = json.loads(str(merged["params"]))
        except json.JSONDecodeError as exc:
            raise ValueError(f"params must be a JSON object, got {merged['params']!r} ({exc})"
                             ) from None
        if not isinstance(params, dict):
            raise ValueError(f"params must be a JSON object, got {merged['params']!r}")
        epsilon, delta, timeout = (_number(merged, k) for k in ("epsilon", "delta", "timeout"))
        if not epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        seed_text = str(merged["seed"]).strip()
        try:
            seed = int(seed_text) if seed_text else None
        except ValueError:
            raise ValueError(f"seed must be an integer or \"\" (randomness from the operating "
                             f"system), got {merged['seed']!r}") from None
        if seed is not None and seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        noise = str(merged["noise"])
        if noise not in ("auto", "simulation", "deployment"):
            raise ValueError(f"noise must be \"auto\", \"simulation\" or \"deployment\", "
                             f"got {noise!r}")
        if noise == "auto":
            # Networked runs use deployment randomness unless a seed asks otherwise.
            noise = "simulation" if seed is not None else "deployment"
        if noise == "deployment" and seed is not None:
            raise ValueError("noise = \"deployment\" draws from the operating system; it "
                             "cannot be seeded (set seed = \"\")")
        if "noise" in params:
            raise ValueError("params must not set noise; use the run config key noise")
        nodes = merged["nodes"]
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 0:
            raise ValueError(f"nodes must be an integer >= 0 (0: every connected SuperNode), "
                             f"got {nodes!r}")
        return cls(str(merged["protocol"]), statistic,
                   _parse_bounds(str(merged["statistic-bounds"])), epsilon, delta,
                   _tuples(params), seed, noise, nodes, str(merged["release"]), timeout)

    def kernel(self) -> Kernel:
        """The statistic's kernel, with the run config's public bounds where it needs them."""
        statistic = STATISTICS[self.statistic]
        if statistic.needs_bounds and self.statistic_bounds is None:
            raise ValueError(f"statistic {self.statistic!r} needs statistic-bounds = "
                             "\"LO,HI\": public bounds on the values (they fix the "
                             "sensitivity)")
        return statistic.kernel(self.statistic_bounds)

    def make_protocol(self) -> Protocol:
        """The protocol from the registry, exactly as every role builds it.

        A curve release (``ecdf-secagg``, ``ecdf-fss``: the registry's curve registry)
        takes no statistic and no delta; deployment noise is its ``randomness="os"``.
        """
        params = dict(self.params)
        if registry.is_curve(self.protocol):
            if self.delta:
                raise ValueError(f"protocol {self.protocol!r} is pure epsilon-DP; set "
                                 "delta = 0")
            if "randomness" in params:
                raise ValueError("params must not set randomness; use the run config key "
                                 "noise")
            if self.noise == "deployment":
                params["randomness"] = "os"
            return registry.make_curve(self.protocol, epsilon=self.epsilon, **params)
        if self.noise == "deployment":
            params["noise"] = DeploymentNoise()
        return registry.make(self.protocol, self.kernel(), epsilon=self.epsilon,
                             delta=self.delta, **params)

    def mark(self, protocol: Protocol) -> str:
        """What server and nodes must agree on: the hash of the protocol's public
        configuration (:func:`~fedustat.runtime.network.service.fingerprint`), which
        covers every option, the noise source's kind (deployment or simulation) included.
        """
        return fingerprint(protocol)

    def configuration(self, protocol: Protocol) -> str:
        """The protocol's public configuration as JSON, sent with the join request so a
        node that runs another names each option that differs
        (:func:`~fedustat.runtime.network.service.configuration_differences`)."""
        return json.dumps(public_configuration(protocol), sort_keys=True)


def _number(config: Mapping[str, Any], key: str) -> float:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value):
        raise ValueError(f"{key} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class NodeConfig:
    """A SuperNode's own settings: its data, its silo index, its owner's budget limit.

    ``release`` (optional) is a file to which the node appends, as one JSON line per run,
    the release summary it receives at the end of the run. ``certs`` (optional; needed
    for protocols whose parties send each other rows) is a directory holding the
    deployment CA ``ca.pem`` and this silo's ``party-<silo>.pem`` and ``party-<silo>.key``:
    the key pair that seals its relayed rows end to end.
    """

    data: Path
    silo: int | None
    max_epsilon: float | None
    columns: tuple[int, ...] | None
    release: Path | None = None
    certs: Path | None = None

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> NodeConfig:
        if "data" not in config or not str(config["data"]).strip():
            raise ValueError("node config needs data=\"PATH\" (a .csv or .npy file of this "
                             "silo's rows)")
        silo = config.get("silo")
        if silo is not None and (isinstance(silo, bool) or not isinstance(silo, int)
                                 or silo < 0):
            raise ValueError(f"node config silo must be an integer >= 0, got {silo!r}")
        max_epsilon = config.get("max-epsilon")
        if max_epsilon is not None:
            max_epsilon = _number(config, "max-epsilon")
        columns = None
        if str(config.get("columns", "")).strip():
            try:
                columns = tuple(int(c) for c in str(config["columns"]).split(","))
            except ValueError:
                raise ValueError(f"node config columns must be column indices such as "
                                 f"\"0,1\", got {config['columns']!r}") from None
        release = str(config.get("release", "")).strip()
        certs = str(config.get("certs", "")).strip()
        if certs and silo is None:
            raise ValueError("node config certs=... needs silo=<index>: the silo's "
                             "certificate is party-<silo>")
        return cls(Path(str(config["data"])), silo, max_epsilon, columns,
                   Path(release) if release else None, Path(certs) if certs else None)


def load_silo(node: NodeConfig) -> np.ndarray:
    """The silo's rows, shape (m, columns): a .npy array or a numeric CSV (header allowed)."""
    path = node.data
    if not path.is_file():
        raise FileNotFoundError(f"node data {str(path)!r} does not exist")
    if path.suffix == ".npy":
        rows = np.load(path, allow_pickle=False)
    else:
        with path.open() as handle:
            first = handle.readline()
        try:
            [float(v) for v in first.split(",")]
            header = 0
        except ValueError:
            header = 1  # a header line of column names
        rows = np.loadtxt(path, delimiter=",", ndmin=2, skiprows=header)
    rows = as_float_array(rows, f"node data {path.name}", ndim=(1, 2))
    rows = rows[:, None] if rows.ndim == 1 else rows
    if node.columns is not None:
        if max(node.columns) >= rows.shape[1] or min(node.columns) < 0:
            raise ValueError(f"node config columns {list(node.columns)} are outside the "
                             f"{rows.shape[1]} columns of {path.name}")
        rows = rows[:, list(node.columns)]
    if rows.shape[0] == 0:
        raise ValueError(f"node data {path.name} holds no rows")
    return rows


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a TOML basic string has JSON's escapes


def app_pyproject(name: str = "fedustat-flower") -> str:
    """The Flower app's ``pyproject.toml``: its components are fedustat's installed apps."""
    config = "\n".join(f"{key} = {_toml_value(value)}"
                       for key, value in DEFAULT_RUN_CONFIG.items())
    return f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "1.0.0"
description = "fedustat's private statistics run by Flower's deployment engine"
license = "MIT"
dependencies = ["fedustat[flower]"]

[tool.flwr.app]
publisher = "fedustat"

[tool.flwr.app.components]
serverapp = "fedustat.runtime.flower.server_app:app"
clientapp = "fedustat.runtime.flower.client_app:app"

[tool.flwr.app.config]
{config}
"""


def write_app(directory: str | Path, name: str = "fedustat-flower") -> Path:
    """Write the Flower app (its ``pyproject.toml``) into ``directory``; return it.

    ``flwr run DIRECTORY`` then runs fedustat's ServerApp and ClientApp, which are imported
    from the installed package (the directory holds no code).
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pyproject.toml").write_text(app_pyproject(name))
    return out
