"""Egress by allowlist: a sandbox reaches only the hosts its job names, through a proxy on the host.

* `rules`: the allowlist as data (`Policy`: rules, the user's `resolve` map, secrets);
* `policy`: its parsing, once, with clear errors; how a hostile host name or address is
  classified;
* `tls`: the server name of a TLS ClientHello, read with bounds;
* `proxy`: the asyncio proxy on a Unix socket that enforces the policy and reports every attempt;
* `interception`: the per-session CA (NameConstraints: the secrets' hosts only) with which the
  proxy terminates HTTPS to a host with a secret; `tlsstream`: that TLS over the sandbox's stream;
* `inside/forwarder`: runs INSIDE the sandbox (standard library only): 127.0.0.1:PORT to the
  proxy's socket.
"""
