"""An OTLP/HTTP trace receiver for the tests: takes POST /v1/traces, decodes each body as an
ExportTraceServiceRequest with the opentelemetry-proto package's own classes, and appends one
JSON line per span to a file. A body that does not decode, or comes with another content type,
is answered 400 and written as an "error" line, so a test sees it.

Usage: receiver.py PORT SPANS_FILE
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PORT = int(sys.argv[1])
SPANS = sys.argv[2]


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def write(line):
    with open(SPANS, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        request = ExportTraceServiceRequest()
        try:
            if self.path != "/v1/traces":
                raise ValueError("path " + self.path)
            if self.headers.get("Content-Type") != "application/x-protobuf":
                raise ValueError("content type " + str(self.headers.get("Content-Type")))
            request.ParseFromString(body)
        except Exception as e:  # the test reads it from the file
            write({"error": str(e)})
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        for rs in request.resource_spans:
            resource = {kv.key: value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    write({
                        "resource": resource,
                        "scope": ss.scope.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "trace_state": s.trace_state,
                        "name": s.name,
                        "kind": s.kind,
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "status": s.status.code,
                        "flags": s.flags,
                        "attributes": {kv.key: value(kv.value) for kv in s.attributes},
                        "batch": len(ss.spans),
                    })
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
