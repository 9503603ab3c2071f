"""A gRPC server for the tests (grpcio, no generated code): /fulcrum.Echo/Name answers the
server's name, /fulcrum.Echo/Fail ends with NOT_FOUND and a message in the trailers.
Usage: server.py NAME PORT"""
import sys
from concurrent import futures

import grpc

name, port = sys.argv[1], sys.argv[2]


def reply_name(request, context):
    return name.encode()


def fail(request, context):
    context.abort(grpc.StatusCode.NOT_FOUND, f"nothing here on {name}")


handlers = {
    "Name": grpc.unary_unary_rpc_method_handler(reply_name),
    "Fail": grpc.unary_unary_rpc_method_handler(fail),
}
server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("fulcrum.Echo", handlers),))
server.add_insecure_port(f"127.0.0.1:{port}")
server.start()
server.wait_for_termination()
