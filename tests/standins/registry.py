"""A stand-in image registry on loopback (dockerd treats 127.0.0.0/8 registries as insecure, so plain HTTP works):
it serves one image's manifest and config, then answers every layer download with HTTP 429 "toomanyrequests", the
way a registry's rate limit cuts a pull off mid-way. The engine then reports the error inside its pull stream, after
progress events, which is what docker-py's `images.pull()` swallows."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading

RATE_LIMIT = "You have reached your pull rate limit (stand-in registry)"
_CONFIG = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                      "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]}}).encode()
_CONFIG_DIGEST = "sha256:" + hashlib.sha256(_CONFIG).hexdigest()
_MANIFEST = json.dumps({
    "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
    "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(_CONFIG),
               "digest": _CONFIG_DIGEST},
    "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 3 * 10**9,
                "digest": "sha256:" + "1" * 64}]}).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: bytes, ctype: str = "application/json", **headers: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v2/":
            return self._send(200, b"{}", Docker_Distribution_API_Version="registry/2.0")
        if "/manifests/" in self.path:
            return self._send(200, _MANIFEST, "application/vnd.docker.distribution.manifest.v2+json",
                              Docker_Content_Digest="sha256:" + hashlib.sha256(_MANIFEST).hexdigest())
        if self.path.endswith(_CONFIG_DIGEST):
            return self._send(200, _CONFIG, "application/octet-stream")
        return self._send(429, json.dumps({"errors": [{"code": "TOOMANYREQUESTS", "message": RATE_LIMIT}]}).encode())

    do_HEAD = do_GET


class RateLimitedRegistry:
    def __enter__(self) -> RateLimitedRegistry:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
