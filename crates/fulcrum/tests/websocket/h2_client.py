"""A WebSocket client over HTTP/2 (RFC 8441), on the h2 library: it opens a plain HTTP/2
connection (prior knowledge), checks the server announced SETTINGS_ENABLE_CONNECT_PROTOCOL,
sends an extended CONNECT with :protocol, and when it is answered 200 exchanges WebSocket frames
(RFC 6455, masked as a client's must be) on the stream. Prints one JSON line: the settings seen,
the status, and the messages echoed back.

usage: h2_client.py HOST PORT PATH PROTOCOL MESSAGES
"""

import json
import os
import socket
import struct
import sys

import h2.config
import h2.connection
import h2.events
import h2.settings


def frame(opcode, payload):
    """A client's frame: FIN, the opcode, a masked payload."""
    mask = os.urandom(4)
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def frames(buf):
    """Whole server frames (unmasked) at the front of buf: [(opcode, payload)], rest."""
    out = []
    while len(buf) >= 2:
        opcode, n, at = buf[0] & 0x0F, buf[1] & 0x7F, 2
        if n == 126:
            if len(buf) < 4:
                break
            n, at = struct.unpack("!H", buf[2:4])[0], 4
        elif n == 127:
            if len(buf) < 10:
                break
            n, at = struct.unpack("!Q", buf[2:10])[0], 10
        if len(buf) < at + n:
            break
        out.append((opcode, buf[at:at + n]))
        buf = buf[at + n:]
    return out, buf


def main():
    host, port, path, protocol, messages = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
    sock = socket.create_connection((host, port), timeout=10)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    result = {"enable_connect_protocol": None, "status": None, "echoed": [], "headers": {}}
    stream = None
    pending = b""
    sent = 0

    def send_next():
        nonlocal sent
        if sent < messages:
            conn.send_data(stream, frame(0x1, f"hello {sent}".encode()))
            sent += 1
        else:
            conn.send_data(stream, frame(0x8, struct.pack("!H", 1000)), end_stream=True)

    while True:
        data = sock.recv(65536)
        if not data:
            break
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.RemoteSettingsChanged) and stream is None:
                result["enable_connect_protocol"] = conn.remote_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL)
                stream = conn.get_next_available_stream_id()
                conn.send_headers(stream, [(":method", "CONNECT"), (":protocol", protocol), (":scheme", "http"), (":path", path), (":authority", f"{host}:{port}"), ("sec-websocket-version", "13")])
            elif isinstance(event, h2.events.ResponseReceived):
                headers = dict(event.headers)
                result["status"] = int(headers[":status"])
                result["headers"] = {k: v for k, v in headers.items() if not k.startswith(":")}
                if result["status"] != 200:
                    print(json.dumps(result))
                    return
                send_next()
            elif isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                got, pending = frames(pending + event.data)
                for opcode, payload in got:
                    if opcode == 0x8:
                        print(json.dumps(result))
                        return
                    result["echoed"].append(payload.decode())
                    send_next()
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset, h2.events.ConnectionTerminated)):
                print(json.dumps(result))
                return
        sock.sendall(conn.data_to_send())
    print(json.dumps(result))


main()
