"""A gRPC server for the tests (grpcio, no generated code): /fulcrum.Echo/Name answers the
server's name, /fulcrum.Echo/Fail ends with NOT_FOUND and a message in the trailers, and
/grpc.health.v1.Health/Check answers the status HEALTH_FILE holds (SERVING when there is no
such file) for the service "fulcrum.Echo" or the whole server (""), SERVICE_UNKNOWN for others.
Usage: server.py NAME PORT [HEALTH_FILE]"""
import os
import sys
from concurrent import futures

import grpc

name, port = sys.argv[1], sys.argv[2]
health_file = sys.argv[3] if len(sys.argv) > 3 else None
# HealthCheckResponse.status: field 1, a varint.
STATUS = {"SERVING": b"\x08\x01", "NOT_SERVING": b"\x08\x02", "SERVICE_UNKNOWN": b"\x08\x03"}
# HealthCheckRequest.service (field 1, length-delimited) for the services this server knows.
KNOWN = {b"", b"\x0a\x0cfulcrum.Echo"}


def reply_name(request, context):
    return name.encode()


def fail(request, context):
    context.abort(grpc.StatusCode.NOT_FOUND, f"nothing here on {name}")


def health(request, context):
    if request not in KNOWN:
        return STATUS["SERVICE_UNKNOWN"]
    status = "SERVING"
    if health_file and os.path.exists(health_file):
        status = open(health_file).read().strip()
    return STATUS[status]


handlers = {
    "Name": grpc.unary_unary_rpc_method_handler(reply_name),
    "Fail": grpc.unary_unary_rpc_method_handler(fail),
}
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
server.add_generic_rpc_handlers((
    grpc.method_handlers_generic_handler("fulcrum.Echo", handlers),
    grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(health)}),
))
server.add_insecure_port(f"127.0.0.1:{port}")
server.start()
server.wait_for_termination()
