"""What the two KV fake servers (kv_cpu_server.py, kv_flags_server.py) print and serve alike: vLLM 0.32's lines, its
one-sequence KV refusal, /health and one completion. Imported as a sibling: each server runs as a script."""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def out(s):
    return (sys.stdout.write(s + "\n"), sys.stdout.flush())


def refuse(length: int, per_token: int, kv: int, usable: int) -> None:
    """vLLM's refusal when one sequence of `length` does not fit the `kv` bytes (`usable` tokens)."""
    out(f"(EngineCore pid=3) ERROR 11-29 10:00:02 [core.py:1510] ValueError: To serve at least one request with "
        f"the model's max seq len ({length}), ({length * per_token / 2**30:.2f} GiB KV cache is needed, which is "
        f"larger than the available KV cache memory ({kv / 2**30:.2f} GiB). Based on the available memory, the "
        f"estimated maximum model length is {usable}. Try increasing `gpu_memory_utilization`.")


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *x):
        pass

    def _ok(self):
        body = json.dumps({"choices": [{"text": "x"}], "data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _ok


def serve(host: str, port: int) -> None:
    """Say the server started, as vLLM does, and answer until killed."""
    server = ThreadingHTTPServer((host, port), _Handler)
    out(f"(APIServer pid=1) INFO 11-29 10:00:03 [entry.py:140] Starting vLLM server on http://{host}:{port}")
    out("INFO:     Application startup complete.")
    server.serve_forever()
