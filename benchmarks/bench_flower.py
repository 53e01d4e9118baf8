"""A seeded fedauc-rr run through a real Flower deployment, per ClientApp isolation mode.

    python benchmarks/bench_flower.py [--modes subprocess,process] [--polls 1.0,0.1] [--repeats N]

For each (isolation mode, SuperExec task poll) a fresh loopback deployment: one SuperLink
and three SuperNodes (no TLS, on 127.0.0.1: the modes differ in how the ClientApp is
started, not in the transport), 3 silos x 20 labelled rows, then ``flwr run`` of
``fedauc-rr`` (join, two party rounds, release) with seed 5. The table gives the ServerApp's
whole run (the release file's ``seconds``), its mean and range per exchange
(``exchange_seconds``), the time from submission to the release file, the seconds a fresh
Python takes to import what a ClientApp process imports (measured after the run), and the
1-minute load average before and after (other jobs share the machine). Every run must
release the same value (same seed, same data).

Isolation modes of flwr 1.41 (``flower-supernode --isolation``):

* ``subprocess`` (Flower's default): the SuperNode starts its own ``flower-superexec``
  child, which starts one ``flwr-clientapp`` process per message.
* ``process``: the operator starts ``flower-superexec --runtime-api-address HOST:PORT``
  beside the SuperNode (its lifetime is the operator's); it too starts one
  ``flwr-clientapp`` per message (flwr 1.41 keeps no ClientApp process between
  messages in either mode; warm executor pools exist only for Kubernetes).

``FLWR_SUPEREXEC_TASK_POLL_INTERVAL`` is SuperExec's wait between looks for a new task
(default 1 s); it is set for the SuperLink's and the SuperNodes' SuperExec alike.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fedustat.runtime.flower import write_app

SEED = 5
SILOS = 3
ROWS = 20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LoopbackDeployment:
    """A SuperLink, SuperNodes and (``process`` mode) their SuperExecs, each in its own
    process session, stopped by process group id."""

    def __init__(self, root: Path, mode: str, poll: float) -> None:
        self.root, self.mode = root, mode
        bin_dir = Path(sys.executable).parent
        self.bin = bin_dir
        self.env = {**os.environ,
                    "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                    "FLWR_HOME": str(root / "flwr-home"),
                    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(poll)}
        self.processes: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        log = (self.root / f"{name}.log").open("wb")
        process = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                   cwd=self.root, start_new_session=True)
        self.processes.append(process)
        return process

    def start(self, silos: list[Path]) -> None:
        port = free_port()  # the SuperLink's one HTTP port (Fleet and Control APIs)
        home = self.root / "flwr-home"
        home.mkdir()
        (home / "config.toml").write_text(
            '[superlink]\ndefault = "bench"\n\n[superlink.bench]\n'
            f'address = "127.0.0.1:{port}"\ninsecure = true\n')
        self._start("superlink", [
            "flower-superlink", "--insecure", "--disable-runtime-dependency-installation",
            "--host", "127.0.0.1", "--port", str(port)])
        wait_for_port(port)
        for i, path in enumerate(silos):
            runtime = free_port()
            self._start(f"supernode-{i}", [
                "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{port}",
                "--isolation", self.mode, "--port", str(runtime),
                "--node-config", f'data="{path}" silo={i}'])
            if self.mode == "process":
                wait_for_port(runtime)
                self._start(f"superexec-{i}", [
                    "flower-superexec", "--insecure",
                    "--runtime-api-address", f"127.0.0.1:{runtime}"])

    def submit(self, app: Path, config: Path) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(["flwr", "run", str(app), "bench", "--run-config",
                                    str(config)], env=self.env, cwd=self.root,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=15)


def wait_for_port(port: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on port {port} after {timeout} s")
        time.sleep(0.1)


def write_silos(root: Path) -> list[Path]:
    rng = np.random.default_rng(3)
    n = SILOS * ROWS
    data = np.column_stack([rng.random(n), (rng.random(n) < 0.4).astype(float)])
    paths = []
    for i, silo in enumerate(np.array_split(data, SILOS)):
        path = root / f"silo-{i}.csv"
        np.savetxt(path, silo, delimiter=",", header="score,label", comments="")
        paths.append(path)
    return paths


def one_run(mode: str, poll: float, timeout: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"bench-flower-{mode}-") as tmp:
        root = Path(tmp)
        release = root / "release.json"
        config = root / "run-config.toml"
        config.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in {
            "protocol": "fedauc-rr", "statistic": "auc", "epsilon": 1.0,
            "params": json.dumps({"n_clients": SILOS}), "seed": str(SEED), "nodes": SILOS,
            "release": str(release), "timeout": timeout}.items()) + "\n")
        app = write_app(root / "app")
        deployment = LoopbackDeployment(root, mode, poll)
        load_before = os.getloadavg()[0]
        try:
            deployment.start(write_silos(root))
            start = time.monotonic()
            submission = deployment.submit(app, config)
            output = submission.communicate(timeout=timeout * 4)[0].decode()
            if submission.returncode != 0:
                raise RuntimeError(f"flwr run failed: {output}")
            deadline = time.monotonic() + timeout * 4
            while not release.exists():
                if time.monotonic() > deadline:
                    logs = "\n".join(p.read_text()[-2000:] for p in root.glob("*.log"))
                    raise RuntimeError(f"no release after {timeout * 4} s\n{logs}")
                time.sleep(0.1)
            to_release = time.monotonic() - start
            document = json.loads(release.read_text())
        finally:
            deployment.stop()
        exchanges = document["exchange_seconds"]
        return {"seconds": document["seconds"], "to_release": to_release,
                "exchanges": len(exchanges), "mean": float(np.mean(exchanges)),
                "min": min(exchanges), "max": max(exchanges), "value": document["value"],
                "load_before": load_before, "load_after": os.getloadavg()[0]}


def clientapp_start() -> float:
    """Seconds for a fresh Python to import what each ClientApp process imports (flwr's
    runtime and fedustat's ClientApp): paid once per message in either mode."""
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "import flwr.supernode.runtime.run_clientapp, "
                    "fedustat.runtime.flower.client_app"], check=True)
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="subprocess,process")
    parser.add_argument("--polls", default="1.0,0.1",
                        help="SuperExec task poll intervals in seconds")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds over every (mode, poll), interleaved so that a change "
                             "of load hits every mode alike")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    rows = []
    for _ in range(args.repeats):
        for poll in [float(p) for p in args.polls.split(",")]:
            for mode in args.modes.split(","):
                result = one_run(mode, poll, args.timeout)
                result["import"] = clientapp_start()
                rows.append((mode, poll, result))
                print(f"done: {mode} poll {poll} s: {result}", file=sys.stderr, flush=True)
    print("| isolation | SuperExec poll | ServerApp run | submit to release | exchanges "
          "| per exchange (mean, min-max) | ClientApp imports | load avg (1 min) "
          "before/after | value |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, poll, r in rows:
        print(f"| {mode} | {poll:g} s | {r['seconds']:.1f} s | {r['to_release']:.1f} s "
              f"| {r['exchanges']} | {r['mean']:.1f} s ({r['min']:.1f}-{r['max']:.1f}) "
              f"| {r['import']:.1f} s | {r['load_before']:.1f} / {r['load_after']:.1f} "
              f"| {r['value']:.6f} |")


if __name__ == "__main__":
    main()
