"""A stand-in Iceberg REST catalog for the tests: the REST catalog protocol's table endpoints
over PyIceberg's SQL catalog (SQLite), so the sink's REST client writes a table that PyIceberg
then reads through the SQL catalog. No REST catalog server can be installed here from a package
registry (the reference servers ship as container images), hence this stand-in; the README says
so. It implements only what a writer needs: config, namespaces (exists, create), tables (exists,
create, load, commit with the requirements checked and a conflict answered 409).

    python3 rest_catalog.py PORT SQLITE_PATH WAREHOUSE S3_ENDPOINT ACCESS_KEY SECRET_KEY REGION [TOKEN]

With TOKEN every request must carry `Authorization: Bearer TOKEN` (else 401).
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

from pyiceberg.catalog.rest import CommitTableRequest, CreateTableRequest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)

port, db, warehouse, endpoint, ak, sk, region = sys.argv[1:8]
token = sys.argv[8] if len(sys.argv) > 8 else None
catalog = SqlCatalog("spillway", **{
    "uri": "sqlite:///" + db,
    "warehouse": warehouse,
    "s3.endpoint": endpoint,
    "s3.access-key-id": ak,
    "s3.secret-access-key": sk,
    "s3.region": region,
    "s3.force-virtual-addressing": "false",
})
# One request at a time against the SQL catalog: its commit is a compare-and-swap all the same.
lock = threading.Lock()


def load_result(table):
    return {
        "metadata-location": table.metadata_location,
        "metadata": json.loads(table.metadata.model_dump_json(by_alias=True)),
        "config": {},
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def error(self, status, kind, message):
        self.send(status, {"error": {"message": message, "type": kind, "code": status}})

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def route(self):
        if token is not None and self.headers.get("Authorization") != "Bearer " + token:
            self.body()
            return self.error(401, "NotAuthorizedException", "a bearer token is required")
        path = [unquote(p) for p in urlparse(self.path).path.strip("/").split("/")]
        if path[:1] != ["v1"]:
            return self.error(404, "NoSuchEndpoint", self.path)
        rest = path[1:]
        with lock:
            if rest == ["config"]:
                return self.send(200, {"defaults": {}, "overrides": {}})
            if rest == ["namespaces"] and self.command == "POST":
                req = json.loads(self.body())
                try:
                    catalog.create_namespace(tuple(req["namespace"]), req.get("properties") or {})
                except NamespaceAlreadyExistsError as e:
                    return self.error(409, "AlreadyExistsException", str(e))
                return self.send(200, {"namespace": req["namespace"], "properties": req.get("properties") or {}})
            if len(rest) == 2 and rest[0] == "namespaces":
                ns = tuple(rest[1].split("\x1f"))
                try:
                    props = catalog.load_namespace_properties(ns)
                except NoSuchNamespaceError as e:
                    return self.error(404, "NoSuchNamespaceException", str(e))
                return self.send(200 if self.command == "GET" else 204,
                                 {"namespace": list(ns), "properties": props} if self.command == "GET" else None)
            if len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "tables" and self.command == "POST":
                ns = tuple(rest[1].split("\x1f"))
                raw = json.loads(self.body())
                # Optional in the REST spec, required by PyIceberg's client-side model.
                raw.setdefault("location", None)
                raw.setdefault("write-order", {"order-id": 0, "fields": []})
                req = CreateTableRequest.model_validate(raw)
                try:
                    table = catalog.create_table(
                        ns + (req.name,),
                        schema=req.table_schema,
                        location=req.location,
                        partition_spec=req.partition_spec,
                        sort_order=req.write_order,
                        properties=req.properties,
                    )
                except TableAlreadyExistsError as e:
                    return self.error(409, "AlreadyExistsException", str(e))
                return self.send(200, load_result(table))
            if len(rest) == 4 and rest[0] == "namespaces" and rest[2] == "tables":
                ident = tuple(rest[1].split("\x1f")) + (rest[3],)
                try:
                    table = catalog.load_table(ident)
                except NoSuchTableError as e:
                    self.body()
                    return self.error(404, "NoSuchTableException", str(e))
                if self.command == "HEAD":
                    return self.send(204)
                if self.command == "GET":
                    return self.send(200, load_result(table))
                req = CommitTableRequest.model_validate_json(self.body())
                try:
                    res = catalog.commit_table(table, tuple(req.requirements), tuple(req.updates))
                except CommitFailedException as e:
                    return self.error(409, "CommitFailedException", str(e))
                return self.send(200, {
                    "metadata-location": res.metadata_location,
                    "metadata": json.loads(res.metadata.model_dump_json(by_alias=True)),
                })
            return self.error(404, "NoSuchEndpoint", self.path)

    def handle_one(self):
        try:
            self.route()
        except (BrokenPipeError, ConnectionResetError):
            # The client went away (a test kills engines): its answer is lost, as a real
            # server's would be.
            self.close_connection = True
        except Exception as e:  # a stand-in: any failure is the server's
            self.error(500, type(e).__name__, str(e))

    do_GET = do_POST = do_HEAD = do_DELETE = handle_one


server = ThreadingHTTPServer(("127.0.0.1", int(port)), Handler)
print("ready", flush=True)
server.serve_forever()
