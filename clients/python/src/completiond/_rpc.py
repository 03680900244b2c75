"""google.rpc's status, error details and codes, from googleapis-common-protos when it is installed.

Every Python gRPC service that reports errors or exports telemetry
(grpcio-status, the OpenTelemetry OTLP exporters) imports ``google.rpc`` from
the googleapis-common-protos distribution, and protobuf keeps one registry of
proto files per process: a second copy of ``google/rpc/status.proto`` that
differs from the first (another googleapis version) is refused at import.
So when ``google.rpc`` is importable, completiond uses it, whichever of the
two a process imports first; only without it does completiond fall back to
its own copy (``completiond._proto.google.rpc``, generated from
third_party/googleapis), which then is the only one in the process.
``pip install completiond-client[google-rpc]`` installs it.
"""

from __future__ import annotations

try:
    from google.rpc import code_pb2, error_details_pb2, status_pb2

    #: SOURCE says where google.rpc comes from.
    SOURCE = "googleapis-common-protos"
except ImportError:
    from completiond._proto.google.rpc import code_pb2, error_details_pb2, status_pb2

    SOURCE = "completiond._proto"

__all__ = ["SOURCE", "code_pb2", "error_details_pb2", "status_pb2"]
