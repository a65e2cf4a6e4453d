#!/usr/bin/env python3
"""A local HTTP server for the end-to-end tests (started by lib.sh's
start_receiver DIR): it plays the alert webhook receiver (every POST body
kept in DIR/posts.jsonl, one JSON per line, with its path and content
type) and the cloud metadata services a spot notice is read from (AWS
IMDSv2: a token, then spot/instance-action, 404 until DIR/aws exists; GCP
instance/preempted, FALSE until DIR/gcp exists; Azure scheduled events, a
Preempt event once DIR/azure exists; a plain URL /going, 404 until
DIR/going exists, and /going/NAME, 404 until DIR/going-NAME exists: one
node's notice, for tests and chaos that preempt k nodes of n).  It listens on a free port of 127.0.0.1 and writes it to
DIR/port."""
import http.server, json, os, sys
D = sys.argv[1]
TOKEN = "tok-123"
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, body, ctype="text/plain"):
        b = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n).decode()
        with open(os.path.join(D, "posts.jsonl"), "a") as f:
            f.write(json.dumps({"path": self.path, "ctype": self.headers.get("Content-Type"),
                                "body": json.loads(body)}) + "\n")
        self.reply(200, "ok")
    def do_PUT(self):
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self.reply(200, TOKEN)
        self.reply(400, "bad")
    def do_GET(self):
        flag = lambda n: os.path.exists(os.path.join(D, n))
        if self.path == "/latest/meta-data/spot/instance-action":
            if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
                return self.reply(401, "no token")
            if flag("aws"):
                return self.reply(200, '{"action": "terminate", "time": "2026-12-01T22:00:00Z"}',
                                  "application/json")
            return self.reply(404, "none")
        if self.path == "/computeMetadata/v1/instance/preempted":
            if self.headers.get("Metadata-Flavor") != "Google":
                return self.reply(403, "no flavor")
            return self.reply(200, "TRUE" if flag("gcp") else "FALSE")
        if self.path == "/going":
            return self.reply(200, "terminate at 22:00") if flag("going") else self.reply(404, "none")
        if self.path.startswith("/going/") and "/" not in self.path[7:] and self.path[7:] not in ("", ".", ".."):
            n = "going-" + self.path[7:]
            return self.reply(200, "terminate at 22:00") if flag(n) else self.reply(404, "none")
        if self.path == "/metadata/scheduledevents?api-version=2020-07-01":
            if self.headers.get("Metadata") != "true":
                return self.reply(400, "no Metadata header")
            ev = [{"EventId": "e1", "EventType": "Freeze", "NotBefore": "x"}]
            if flag("azure"):
                ev.append({"EventId": "e2", "EventType": "Preempt",
                           "NotBefore": "Mon, 01 Dec 2026 22:00:00 GMT"})
            return self.reply(200, json.dumps({"DocumentIncarnation": 1, "Events": ev}),
                              "application/json")
        self.reply(404, "unknown")
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(os.path.join(D, "port.tmp"), "w") as f:
    f.write(str(s.server_address[1]))
os.rename(os.path.join(D, "port.tmp"), os.path.join(D, "port"))
s.serve_forever()
