"""The cost of egress by allowlist (issue 22): a request through the host proxy against the same
request straight to the upstream, both from inside one local sandbox, on loopback only.

The upstream is an HTTP server on the host's 127.0.0.1 serving a 1-byte body (latency) and a
50 MB body (throughput). "direct" is the same client program run on the host (a sandbox with
network = true cannot reach the host's loopback, so it has no direct path to compare);
"proxied" runs inside the allowlisted sandbox through 127.0.0.1:3128 -> forwarder -> Unix socket
-> proxy -> upstream. Needs a quiet machine: `python3 benchmarks/egress_bench.py [REQUESTS]`.

Then HTTPS, both through the proxy from one sandbox: "tunnel" to a host without a secret (bytes
relayed as they are) against "intercepted" to a host with one (the proxy terminates TLS, adds
the header and opens its own verified TLS connection upstream). The upstreams' certificates come
from a CA made for the run; the proxy trusts it through CODEROOM_EGRESS_UPSTREAM_CA.
"""
import asyncio, http.server, os, ssl, subprocess, sys, tempfile, threading
from pathlib import Path

from coderoom.egress.interception import SessionCA
from coderoom.egress.session import UPSTREAM_CA_ENV

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

HTTPS_CLIENT = r"""
import http.client, ssl, statistics, sys, time
host, port, n, big, cadata = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
context = ssl.create_default_context(cadata=None if cadata == "-" else cadata)  # "-": the sandbox's bundle
def get(path):
    c = http.client.HTTPSConnection("127.0.0.1", 3128, timeout=60, context=context)
    c.set_tunnel(host, port)
    c.request("GET", path, headers={"Connection": "close"})
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
    await https(args[1:])


def https_server(context):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def https(counts):
    upstream_ca = SessionCA(["tunnel.test", "secret.test"])  # only a CA for the upstreams' leaves here
    folder = Path(tempfile.mkdtemp(prefix="egress-bench-"))
    (folder / "upstream-ca.pem").write_bytes(upstream_ca.pem())  # public: the proxy's extra upstream root
    os.environ[UPSTREAM_CA_ENV] = str(folder / "upstream-ca.pem")
    os.environ["EGRESS_BENCH_TOKEN"] = "bench-token"
    tunnel, secret = (https_server(upstream_ca.server_context(h)) for h in ("tunnel.test", "secret.test"))
    tp, sp = tunnel.server_address[1], secret.server_address[1]
    policy = parse_policy({
        "allow": [f"tunnel.test:{tp}", f"secret.test:{sp}"],
        "resolve": {"tunnel.test": "127.0.0.1", "secret.test": "127.0.0.1"},
        "secrets": [{"host": "secret.test", "header": "X-Bench", "env": "EGRESS_BENCH_TOKEN"}],
    }, source="bench")  # fmt: skip
    limits = Limits(egress=policy, egress_bytes="1G", timeout=600)
    async with open_session(SandboxSpec(backend="local", limits=limits)) as s:
        pem = upstream_ca.pem().decode()
        for name, host, port, cadata in (("tunnel     ", "tunnel.test", tp, pem), ("intercepted", "secret.test", sp, "-")):
            r = await s.exec("python3", "-c", HTTPS_CLIENT, host, str(port), *counts, cadata, shell=False)
            print(f"https {name}", r.stdout.decode().strip() or r.stderr.decode())
    tunnel.shutdown(), secret.shutdown()


asyncio.run(main())
