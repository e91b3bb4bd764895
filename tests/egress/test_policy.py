"""The allowlist's parsing and the classification of hostile names and addresses (egress.policy)."""

from __future__ import annotations

import ipaddress

import pytest

from coderoom.egress import tls
from coderoom.egress.policy import Rule, host_of, literal_ip, parse_policy, parse_rule, policy_from_flags, refused_address
from coderoom.errors import UsageError

from .upstreams import client_hello

SOURCE = "coderoom.toml [sandbox.network]"


@pytest.mark.parametrize(
    "spelling", ["127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.0.0.1", "017700000001"]
)
def test_every_spelling_of_an_ipv4_literal_is_an_address_never_a_name(spelling: str) -> None:
    assert literal_ip(spelling) == ipaddress.ip_address("127.0.0.1")
    assert host_of(spelling) == "127.0.0.1"


@pytest.mark.parametrize("spelling", ["::1", "[::1]", "[::ffff:127.0.0.1]", "[0:0:0:0:0:0:0:1]"])
def test_ipv6_literals_are_addresses_in_their_canonical_bracketed_form(spelling: str) -> None:
    assert host_of(spelling).startswith("[")
    assert literal_ip(host_of(spelling)) is not None


@pytest.mark.parametrize("name", ["API.Test.", "api.test"])
def test_names_are_lowercased_without_the_trailing_dot(name: str) -> None:
    assert host_of(name) == "api.test"


@pytest.mark.parametrize("bad", ["", "a b", "api.test/x", "ex@mple.org", "-x.org", "bücher.de", "a" * 300, "x..y", "1.2.3.4.5"])
def test_anything_but_a_plain_name_or_literal_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        host_of(bad)


@pytest.mark.parametrize(
    "address, kind",
    [
        ("127.0.0.1", "loopback"), ("::1", "loopback"), ("10.1.2.3", "private"), ("192.168.0.1", "private"),
        ("172.16.0.1", "private"), ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"), ("::", "unspecified"), ("224.0.0.1", "multicast"), ("fd00::1", "private"),
        ("::ffff:169.254.169.254", "link-local"), ("100.64.0.1", "global"),
    ],
)  # fmt: skip
def test_non_public_addresses_are_refused_with_their_kind(address: str, kind: str) -> None:
    reason = refused_address(ipaddress.ip_address(address))
    assert reason is not None and kind in reason


def test_a_public_address_is_not_refused() -> None:
    assert refused_address(ipaddress.ip_address("8.8.8.8")) is None  # classified only, never contacted


def test_a_rule_without_a_port_allows_https_and_plain_http_only() -> None:
    rule = parse_rule("pypi.test")
    assert rule.matches("pypi.test", 443) and rule.matches("pypi.test", 80)
    assert not rule.matches("pypi.test", 8080) and not rule.matches("evil.pypi.test", 443)


def test_a_wildcard_matches_subdomains_not_the_domain_itself_nor_lookalikes() -> None:
    rule = parse_rule("*.example.org:8443")
    assert rule == Rule("example.org", 8443, wildcard=True)
    assert rule.matches("a.b.example.org", 8443)
    assert not rule.matches("example.org", 8443) and not rule.matches("badexample.org", 8443)
    assert not rule.matches("a.example.org", 443)


@pytest.mark.parametrize("bad", ["api.test:0", "api.test:99999", "api.test:http", "a*.test", "*.org", "*.1.2.3", "[::1]x"])
def test_bad_rules_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_rule(bad)


def test_a_job_table_parses_into_rules_resolves_and_secrets() -> None:
    policy = parse_policy(
        {
            "allow": ["api.test:8080", "pypi.test", "[::1]:9000"],
            "resolve": {"API.test": "127.0.0.1"},
            "secrets": [{"host": "api.test", "header": "Authorization", "env": "TOKEN", "format": "Bearer {}"}],
        },
        source=SOURCE,
    )
    assert policy.rule_for("api.test", 8080) and policy.rule_for("[::1]", 9000)
    assert policy.address_for("api.test") == "127.0.0.1"
    secret = policy.secret_for("api.test")
    assert secret is not None and secret.value({"TOKEN": "t0k"}) == "Bearer t0k"
    assert not secret.plain_http  # only inside HTTPS unless the secret says plain_http = true
    assert parse_policy(policy.table(), source=SOURCE) == policy


def test_every_problem_is_one_line_naming_the_source() -> None:
    with pytest.raises(UsageError) as caught:
        parse_policy({"allow": ["ok.test", "bad host"], "resolve": {"x.test": "localhost"}, "dns": 1}, source=SOURCE)
    lines = caught.value.message.splitlines()
    assert len(lines) == 3 and all(line.startswith(SOURCE) for line in lines)
    assert any("dns" in line for line in lines) and any("localhost" in line for line in lines)


def test_a_secret_for_a_host_allowed_on_https_only_is_accepted_and_one_for_an_unlisted_port_is_not() -> None:
    secret = {"host": "api.example.com", "header": "X-Key", "env": "K"}
    policy = parse_policy({"allow": ["api.example.com:443"], "secrets": [secret]}, source=SOURCE)
    assert policy.secret_for("api.example.com") is not None  # added inside HTTPS (egress.interception)
    with pytest.raises(UsageError, match="must be in allow"):
        parse_policy({"allow": ["other.example.com:443"], "secrets": [secret]}, source=SOURCE)


@pytest.mark.parametrize(
    "secret",
    [
        {"host": "other.test", "header": "X-Key", "env": "K"},  # not allowed
        {"host": "api.test", "header": "Host", "env": "K"},  # framing header
        {"host": "api.test", "header": "X-Key", "env": "K=1"},
        {"host": "api.test", "header": "X-Key", "env": "K", "format": "no placeholder"},
        {"host": "api.test", "header": "X-Key", "env": "K", "format": "a{}\r\nX: {}"},
        {"host": "api.test", "header": "X-Key", "env": "K", "plain_http": "yes"},
    ],
)
def test_bad_secrets_are_refused(secret: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        parse_policy({"allow": ["api.test"], "secrets": [secret]}, source=SOURCE)


def test_flags_add_to_the_job_policy() -> None:
    base = parse_policy({"allow": ["a.test"]}, source=SOURCE)
    policy = policy_from_flags(["b.test:8080"], ["b.test=127.0.0.1"], base=base)
    assert policy is not None and policy.rule_for("a.test", 443) and policy.rule_for("b.test", 8080)
    assert policy.address_for("b.test") == "127.0.0.1"
    assert policy_from_flags([], [], base=None) is None
    with pytest.raises(UsageError, match="HOST=ADDRESS"):
        policy_from_flags(["b.test"], ["b.test"], base=None)


@pytest.mark.parametrize("name", ["api.test", None])
def test_the_server_name_of_a_real_client_hello_is_read(name: str | None) -> None:
    assert tls.server_name(client_hello(name)) == name


@pytest.mark.parametrize("data", [b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x40\x00" + b"\x01" * 10, b"CONNECT x:443 HTTP/1.1\r\n"])
def test_what_is_not_a_whole_client_hello_has_no_server_name(data: bytes) -> None:
    with pytest.raises(tls.NotClientHello):
        tls.server_name(data)


def test_a_client_hello_cut_short_anywhere_is_refused_not_misread() -> None:
    hello = client_hello("api.test")
    for end in range(0, len(hello), 7):
        with pytest.raises(tls.NotClientHello):
            tls.server_name(hello[:end])


def test_the_kernel_keeps_every_variable_of_the_way_out() -> None:
    """The Python kernel scrubs its environment to a list of its own (it runs inside the sandbox
    and imports nothing of coderoom): every variable an allowlisted sandbox is given must be on it,
    or `run_python` has no proxy and no trust roots while commands do."""
    from coderoom.egress.session import sandbox_env
    from coderoom.tools.inside.kernel_server import ENV_ALLOWED

    assert set(sandbox_env(bundle="/egress/ca-bundle.pem")) <= ENV_ALLOWED
