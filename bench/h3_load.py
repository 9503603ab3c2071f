"""A load client for HTTP/3 (aioquic): CONNECTIONS QUIC connections, each keeping STREAMS
requests in flight, until REQUESTS responses in all; prints one JSON line with the count, the
failures and the time taken. h2load here has no HTTP/3, so bench/h3.py drives this one.

Usage: h3_load.py HOST PORT PATH REQUESTS [--connections 10] [--streams 10] [--server-name bench]"""
import argparse
import asyncio
import json
import ssl
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.waiting = {}

    def quic_event_received(self, event):
        for e in self.http.handle_event(event):
            if isinstance(e, (HeadersReceived, DataReceived)) and e.stream_ended:
                done = self.waiting.pop(e.stream_id, None)
                if done:
                    done.set_result(True)

    async def get(self, authority, path):
        sid = self._quic.get_next_available_stream_id()
        self.http.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", authority), (b":path", path)], end_stream=True)
        done = asyncio.get_running_loop().create_future()
        self.waiting[sid] = done
        self.transmit()
        await done


async def one_connection(a, left, counts):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=a.server_name)
    config.verify_mode = ssl.CERT_NONE
    authority = f"{a.server_name}:{a.port}".encode()
    async with connect(a.host, a.port, configuration=config, create_protocol=Client) as client:
        async def worker():
            while left[0] > 0:
                left[0] -= 1
                try:
                    await asyncio.wait_for(client.get(authority, a.path.encode()), 10)
                    counts["ok"] += 1
                except Exception:
                    counts["failed"] += 1
        await asyncio.gather(*[worker() for _ in range(a.streams)])


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("path")
    p.add_argument("requests", type=int)
    p.add_argument("--connections", type=int, default=10)
    p.add_argument("--streams", type=int, default=10)
    p.add_argument("--server-name", default="bench")
    a = p.parse_args()
    left, counts = [a.requests], {"ok": 0, "failed": 0}
    began = time.monotonic()
    await asyncio.gather(*[one_connection(a, left, counts) for _ in range(a.connections)])
    took = time.monotonic() - began
    print(json.dumps({**counts, "seconds": took, "per_second": counts["ok"] / took}))


asyncio.run(main())
