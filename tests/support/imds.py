"""A local stand-in for the EC2 instance metadata service (IMDSv2), for running boot code off EC2.

It serves what the boot script, botocore's instance-profile credentials and the agent's watch ask
for, requires a session token like IMDSv2 with HttpTokens=required, and lets a test announce a
spot interruption or a rebalance recommendation.
"""

import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ROLE = "traincast-agent"


class Imds:
    """The metadata of one pretend instance, served on 127.0.0.1 at a free port."""

    def __init__(self, *, instance_id: str, region: str = "us-east-1") -> None:
        self.instance_id = instance_id
        self.region = region
        self.token = uuid.uuid4().hex
        self.spot_action: dict[str, str] | None = None
        self.rebalance: dict[str, str] | None = None
        self.requests: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()

    def interrupt(self, *, in_s: float = 120) -> None:
        """Announce a spot interruption, as AWS does two minutes ahead."""
        at = (datetime.now(UTC) + timedelta(seconds=in_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.spot_action = {"action": "terminate", "time": at}

    def recommend_rebalance(self) -> None:
        """Announce a rebalance recommendation."""
        self.rebalance = {"noticeTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}

    def document(self, path: str) -> Any:
        """What GET /latest/<path> returns (None: 404)."""
        expires = (datetime.now(UTC) + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
        docs: dict[str, Any] = {
            "meta-data/instance-id": self.instance_id,
            "meta-data/placement/region": self.region,
            "meta-data/iam/security-credentials/": ROLE,
            f"meta-data/iam/security-credentials/{ROLE}": json.dumps(
                {
                    "Code": "Success",
                    "Type": "AWS-HMAC",
                    "AccessKeyId": "ASIAFAKEINSTANCEROLE",
                    "SecretAccessKey": "fake-secret",
                    "Token": "fake-session-token",
                    "Expiration": expires,
                    "LastUpdated": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            ),
            "meta-data/spot/instance-action": json.dumps(self.spot_action) if self.spot_action else None,
            "meta-data/events/recommendations/rebalance": json.dumps(self.rebalance) if self.rebalance else None,
        }
        return docs.get(path)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
                if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    return self._send(400, "")
                self._send(200, imds.token)

            def do_GET(self) -> None:  # noqa: N802
                imds.requests.append(self.path)
                if self.headers.get("X-aws-ec2-metadata-token") != imds.token:
                    return self._send(401, "")
                doc = imds.document(self.path.removeprefix("/latest/"))
                self._send(404, "") if doc is None else self._send(200, doc)

            def _send(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        return Handler
