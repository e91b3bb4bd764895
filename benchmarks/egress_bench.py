"""The cost of egress by allowlist (issue 22): a request through the host proxy against the same
request straight to the upstream, both from inside one local sandbox, on loopback only.

The upstream is an HTTP server on the host's 127.0.0.1 serving a 1-byte body (latency) and a
50 MB body (throughput). "direct" is the same client program run on the host (a sandbox with
network = true cannot reach the host's loopback, so it has no direct path to compare);
"proxied" runs inside the allowlisted sandbox through 127.0.0.1:3128 -> forwarder -> Unix socket
-> proxy -> upstream. Needs a quiet machine: `python3 benchmarks/egress_bench.py [REQUESTS]`.
"""
import asyncio, http.server, subprocess, sys, threading

from coderoom.egress.policy import parse_policy
from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session

REQUESTS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
BIG = 50 * 1024 * 1024
CLIENT = r"""
import http.client, statistics, sys, time
host, port, n, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
proxy = sys.argv[5] if len(sys.argv) > 5 else None
def get(path):
    if proxy:
        c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=60); target = f"http://{host}:{port}{path}"
    else:
        c = http.client.HTTPConnection(host, port, timeout=60); target = path
    c.request("GET", target, headers={"Host": f"{host}:{port}"})
    body = c.getresponse().read(); c.close(); return len(body)
times = []
for _ in range(n):
    t = time.perf_counter(); get("/small"); times.append(time.perf_counter() - t)
t = time.perf_counter(); size = get("/big"); took = time.perf_counter() - t
print(f"p50 {statistics.median(times)*1000:.2f} ms  p90 {sorted(times)[int(n*0.9)]*1000:.2f} ms  "
      f"50 MB in {took:.2f} s = {size/took/2**20:.0f} MiB/s")
"""


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"x" * (BIG if self.path == "/big" else 1)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


async def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    args = [str(port), str(REQUESTS), str(BIG)]
    direct = subprocess.run([sys.executable, "-c", CLIENT, "127.0.0.1", *args], capture_output=True, text=True)
    print("direct (host)     ", direct.stdout.strip() or direct.stderr)
    policy = parse_policy({"allow": [f"bench.test:{port}"], "resolve": {"bench.test": "127.0.0.1"}}, source="bench")
    limits = Limits(egress=policy, egress_bytes="1G", timeout=600)
    async with open_session(SandboxSpec(backend="local", limits=limits)) as s:
        r = await s.exec("python3", "-c", CLIENT, "bench.test", *args, "proxy", shell=False)
        print("proxied (sandbox) ", r.stdout.decode().strip() or r.stderr.decode())
    server.shutdown()


asyncio.run(main())
