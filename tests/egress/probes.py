"""Programs a test runs inside an allowlisted sandbox (its own Python, standard library only),
each printing one line per probe: `NAME RESULT`."""

PROBES = r"""
import http.client, os, socket, ssl, sys, urllib.request
port = int(sys.argv[1])
PROXY = ("127.0.0.1", 3128)
for name in ("NO_PROXY", "no_proxy"):  # loopback literals go through the proxy too, to be refused there
    os.environ.pop(name, None)

def show(name, run):
    try:
        print(name, run(), flush=True)
    except Exception as exc:
        print(name, "ERROR", type(exc).__name__, str(exc)[:200].replace("\n", " "), flush=True)

def fetch(url):
    return urllib.request.urlopen(url, timeout=20).status

def raw(data):
    with socket.create_connection(PROXY, timeout=20) as s:
        s.sendall(data)
        return s.recv(200).split(b"\r\n")[0].decode()

def tunnel(host, sni):
    s = socket.create_connection(PROXY, timeout=20)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = s.recv(200).split(b"\r\n")[0].decode()
    if " 200 " not in head:
        return head
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        context.wrap_socket(s, server_hostname=sni).close()
        return "HANDSHAKE"
    except (OSError, ssl.SSLError) as exc:
        return f"CLOSED {type(exc).__name__}"

show("allowed", lambda: fetch(f"http://api.test:{port}/ok"))
show("other_host", lambda: fetch(f"http://other.test:{port}/"))
show("raw_ip", lambda: fetch(f"http://127.0.0.1:{port}/"))
show("ipv6_literal", lambda: fetch(f"http://[::1]:{port}/"))
show("decimal_ip", lambda: fetch(f"http://2130706433:{port}/"))
show("connect_unlisted", lambda: tunnel("other.test", "other.test"))
show("sni_differs", lambda: tunnel("api.test", "evil.test"))
show("host_differs", lambda: raw(f"GET http://api.test:{port}/ HTTP/1.1\r\nHost: other.test:{port}\r\n\r\n".encode()))
show("dns", lambda: socket.getaddrinfo("api.test", port))
show("direct_connect", lambda: socket.create_connection(("127.0.0.1", port), timeout=5) and "CONNECTED")
show("udp_dns", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("8.8.8.8", 53)))
"""
