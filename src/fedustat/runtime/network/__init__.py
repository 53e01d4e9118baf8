"""Networked runs: each role in its own process over mutually authenticated gRPC.

See docs/network.md (lockstep runs), docs/collection.md (collection windows) and
docs/enrollment.md (``fedustat.runtime.network.enroll``: device certificates at scale).
gRPC is an optional dependency (the ``network`` extra: ``pip install '.[network]'`` in the
checkout); it is imported when a server or party starts.
"""

from fedustat.runtime.network.certs import Credentials, create_deployment, load_credentials
from fedustat.runtime.network.collect import (
    CollectionRun,
    DeviceReport,
    Window,
    collect,
    report,
    report_async,
)
from fedustat.runtime.network.party import (
    PartyResult,
    ServiceResult,
    run_party,
    run_party_async,
    run_service,
)
from fedustat.runtime.network.server import ServerRun, serve
from fedustat.runtime.network.service import NetworkRunError, release_summary

__all__ = ["CollectionRun", "Credentials", "DeviceReport", "NetworkRunError", "PartyResult",
           "ServerRun", "ServiceResult", "Window", "collect", "create_deployment",
           "load_credentials", "release_summary", "report", "report_async", "run_party",
           "run_party_async", "run_service", "serve"]
