"""A gRPC client for the tests: calls METHOD COUNT times over one channel to TARGET and prints
one line per call: `ok <reply>` or `<STATUS> <details>`.
Usage: client.py TARGET METHOD COUNT"""
import sys

import grpc

target, method, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with grpc.insecure_channel(target) as channel:
    call = channel.unary_unary(f"/fulcrum.Echo/{method}")
    for _ in range(count):
        try:
            print("ok", call(b"", timeout=10).decode(), flush=True)
        except grpc.RpcError as e:
            print(e.code().name, e.details(), flush=True)
