"""An HTTP/3 client for the tests, on aioquic: sends requests over one QUIC connection, all at
once, and prints one JSON object: each response (status, fields, body length and text, trailers,
or the error that ended its stream) in the order asked, and what the connection learnt of the
server (its initial limit of request streams, private to aioquic's QuicConnection).

Usage: client.py HOST PORT REQUESTS_JSON [--ca FILE] [--server-name NAME] [--timeout SECONDS]
                 [--ticket FILE [--early]]
--ticket keeps the server's session ticket in FILE, and resumes with the one there; --early sends
the requests before the handshake ends (0-RTT, when the ticket allows it).
REQUESTS_JSON is a list of {"method", "path", "headers": [[name, value]...], "body": text,
"body_size": n (that many bytes of "x"), "trailers": [[name, value]...], "repeat": n}."""
import argparse
import asyncio
import json
import os
import pickle
import ssl

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import StreamReset


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.streams = {}

    def quic_event_received(self, event):
        if isinstance(event, StreamReset) and event.stream_id in self.streams:
            state = self.streams.pop(event.stream_id)
            state["error"] = f"reset {event.error_code}"
            state["done"].set_result(state)
        for e in self.http.handle_event(event):
            state = self.streams.get(e.stream_id)
            if state is None:
                continue
            if isinstance(e, HeadersReceived):
                if state["headers"] is None:
                    state["headers"] = e.headers
                else:
                    state["trailers"] = e.headers
            elif isinstance(e, DataReceived):
                state["body"] += e.data
            if getattr(e, "stream_ended", False):
                self.streams.pop(e.stream_id)
                state["done"].set_result(state)

    async def request(self, authority, r):
        sid = self._quic.get_next_available_stream_id()
        body = r.get("body", "").encode() or b"x" * r.get("body_size", 0)
        trailers = [(n.encode(), v.encode()) for n, v in r.get("trailers", [])]
        fields = [
            (b":method", r.get("method", "GET").encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", r.get("path", "/").encode()),
        ] + [(n.encode(), v.encode()) for n, v in r.get("headers", [])]
        done = asyncio.get_running_loop().create_future()
        self.streams[sid] = {"headers": None, "body": b"", "trailers": None, "error": None, "done": done}
        self.http.send_headers(sid, fields, end_stream=not body and not trailers)
        if body:
            self.http.send_data(sid, body, end_stream=not trailers)
        if trailers:
            self.http.send_headers(sid, trailers, end_stream=True)
        self.transmit()
        return await done


def shown(state):
    if state["headers"] is None:
        return {"error": state["error"] or "no response"}
    fields = [(n.decode(), v.decode()) for n, v in state["headers"]]
    status = int(dict(fields)[":status"])
    return {
        "status": status,
        "headers": {n: v for n, v in fields if not n.startswith(":")},
        "length": len(state["body"]),
        "body": state["body"][:4096].decode("utf-8", "replace"),
        "trailers": {n.decode(): v.decode() for n, v in (state["trailers"] or [])},
        "error": state["error"],
    }


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("requests")
    p.add_argument("--ca")
    p.add_argument("--server-name", default="localhost")
    p.add_argument("--timeout", type=float, default=20)
    p.add_argument("--ticket")
    p.add_argument("--early", action="store_true")
    a = p.parse_args()
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=a.server_name, idle_timeout=a.timeout)
    if a.ca:
        config.load_verify_locations(a.ca)
    else:
        config.verify_mode = ssl.CERT_NONE
    wanted = []
    for r in json.loads(a.requests):
        wanted += [r] * r.get("repeat", 1)
    authority = f"{a.server_name}:{a.port}"
    if a.ticket and os.path.exists(a.ticket):
        with open(a.ticket, "rb") as f:
            config.session_ticket = pickle.load(f)

    def keep_ticket(ticket):
        if a.ticket:
            with open(a.ticket, "wb") as f:
                pickle.dump(ticket, f)

    async with connect(a.host, a.port, configuration=config, create_protocol=Client, session_ticket_handler=keep_ticket, wait_connected=not a.early) as client:
        # The server's initial stream credit, before any request raises it.
        initial_streams = client._quic._remote_max_streams_bidi
        tasks = [asyncio.ensure_future(client.request(authority, r)) for r in wanted]
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), a.timeout)
        out = {
            "responses": [shown(d) if isinstance(d, dict) else {"error": repr(d)} for d in done],
            "server_max_streams_bidi": initial_streams,
            "session_resumed": client._quic.tls.session_resumed,
            "early_data_accepted": client._quic.tls.early_data_accepted,
        }
    print(json.dumps(out))


asyncio.run(main())
