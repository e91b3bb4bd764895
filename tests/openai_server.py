"""A real HTTP server on 127.0.0.1 that speaks the OpenAI wire format, driven by a script.

Why: the model layer must be tested through the real `openai` client and the SDK's own models, so
this server answers `POST /v1/chat/completions` and `POST /v1/responses` (plain JSON and SSE
streams) with bodies built from, and validated against, the `openai` package's own types. Each
request consumes one step of the script: a reply (text and/or tool calls), an HTTP failure, or a
stall (for client timeouts). Every request is recorded so tests can check what the client sent:
the tools offered, the tool results returned, and that no secret is in any of it.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

_STREAM_EVENT = TypeAdapter(ResponseStreamEvent)
SERVER_KEY = "sk-test-server-key"


@dataclass(frozen=True)
class Call:
    """One function call the scripted model makes; `arguments` is sent as a JSON string. With
    `custom` (Responses only), a custom tool call whose raw input is `arguments` (apply_patch)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    custom: bool = False


@dataclass(frozen=True)
class Reply:
    """A successful model turn: assistant text, tool calls, or both. `cut`: stopped by the
    length limit (finish_reason "length", every allowed output token used)."""

    text: str = ""
    calls: tuple[Call, ...] = ()
    cut: bool = False


@dataclass(frozen=True)
class Fail:
    """An HTTP error in OpenAI's error shape, e.g. 429, 500, 503 or 401."""

    status: int
    message: str = "scripted failure"
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stall:
    """Hold the request for `seconds` (the client should time out first), then answer 504."""

    seconds: float


@dataclass(frozen=True)
class Trickle:
    """Answer 200 and then send a valid reply one byte every `interval` seconds; asked for a
    stream (Chat Completions), one chunk every `interval` seconds, its text a word a chunk."""

    reply: Reply
    interval: float = 1.0


@dataclass(frozen=True)
class Raw:
    """Answer with exactly this body: malformed JSON, an HTML error page, a JSON without choices."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class Stream:
    """A hostile SSE answer (Chat Completions): exactly these `data:` payloads (a dict is sent as
    JSON, bytes as they are), one every `interval` seconds, then `end`: "done" (`[DONE]` and the
    last chunk), "eof" (the body ends cleanly, no `[DONE]`) or "drop" (the connection closes in
    the middle of the chunked body). `repeat` sends the payloads that many times."""

    data: tuple[dict[str, Any] | bytes, ...]
    end: str = "done"
    interval: float = 0.0
    repeat: int = 1


def chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: dict[str, int] | None = None) -> dict[str, Any]:
    """One `chat.completion.chunk` of choice 0 (`delta` None: no choice, as a usage chunk has)."""
    data: dict[str, Any] = {
        "id": "chatcmpl-hostile", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage is not None:
        data["usage"] = usage
    return data


Step = Reply | Fail | Stall | Trickle | Raw | Stream


def say(text: str) -> Reply:
    return Reply(text=text)


def call(name: str, **arguments: Any) -> Reply:
    return Reply(calls=(Call(name, arguments),))


@dataclass
class Seen:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    step: Step | None

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools offered, in either wire format."""
        names = []
        for tool in self.body.get("tools") or []:
            names.append(tool.get("name") or (tool.get("function") or {}).get("name"))
        return names

    @property
    def tool_outputs(self) -> list[str]:
        """Tool results sent back: Chat `tool` messages or Responses `function_call_output` (and
        `custom_tool_call_output`)."""
        if self.path.endswith("/chat/completions"):
            return [
                _text(m.get("content"))
                for m in self.body.get("messages", [])
                if m.get("role") == "tool"
            ]
        items = self.body.get("input")
        if not isinstance(items, list):
            return []
        kinds = ("function_call_output", "custom_tool_call_output")
        return [_text(i.get("output")) for i in items if i.get("type") in kinds]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else json.dumps(content)


def _tokens(value: Any) -> int:
    """A stable stand-in for token counts: roughly four characters per token."""
    return max(1, len(json.dumps(value)) // 4)


class OpenAIServer:
    """Start with `with OpenAIServer([...]) as server:`; point clients at `server.url`."""

    def __init__(
        self,
        script: Iterable[Step] = (),
        *,
        api_key: str | None = None,
        n_ctx: int | None = None,
        models: Iterable[str] | None = None,
        streams: bool = True,
        refuses_stream: int | None = None,
        hold: float = 0.0,
    ) -> None:
        """`n_ctx`: behave like llama.cpp with that context: `GET /props` says it, and a Chat
        Completions request whose body (at ~4 bytes a token) plus max_tokens exceeds it is refused
        with llama.cpp's 400. `models`: the ids `GET /v1/models` lists (None: no such endpoint).
        `streams=False`: a server that does not stream, answering a `stream: true` request with
        its plain JSON answer. `refuses_stream`: a server that answers a `stream: true` request
        with this HTTP status ("stream is not supported"), using no step of the script.
        `hold`: seconds each model request is held before its answer (so that concurrent ones
        overlap); `peak` is the most model requests that were in flight at once."""
        self.streams = streams
        self.refuses_stream = refuses_stream
        self.api_key = api_key
        self.n_ctx = n_ctx
        self.models = None if models is None else list(models)
        self.refused: list[int] = []  # the token counts of requests refused for their size
        self.probes: list[str] = []  # GETs and llama.cpp/Ollama POSTs: asked about, not model calls
        self.requests: list[Seen] = []
        self.errors: list[str] = []
        self._steps: list[Step] = list(script)
        self.hold = hold
        self.in_flight = 0
        self.peak = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, steps: Iterable[Step]) -> None:
        """Replace the remaining script."""
        with self._lock:
            self._steps = list(steps)

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def paths(self) -> list[str]:
        return [seen.path for seen in self.requests]

    def _next_step(self) -> Step | None:
        with self._lock:
            return self._steps.pop(0) if self._steps else None

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):04d}"

    # ---- Chat Completions ------------------------------------------------------------------

    def chat_completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        tool_calls = [
            {
                "id": self._new_id("call"),
                "type": "function",
                "function": {"name": c.name, "arguments": _args(c)},
            }
            for c in reply.calls
        ]
        message = {
            "role": "assistant",
            "content": reply.text or None,
            "refusal": None,
            "annotations": [],
            "tool_calls": tool_calls or None,
        }
        prompt, completion = _tokens(body.get("messages")), _tokens(message)
        completion = _within(completion, body.get("max_completion_tokens") or body.get("max_tokens"), reply.cut)
        data = {
            "id": self._new_id("chatcmpl"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "length" if reply.cut else "tool_calls" if tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {
                    "cached_tokens": 0,
                    "cache_write_tokens": 0,
                    "audio_tokens": 0,
                },
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
            },
            "service_tier": "default",
            "system_fingerprint": None,
        }
        ChatCompletion.model_validate(data)
        return data

    def chat_chunks(self, body: dict[str, Any], reply: Reply, *, by_word: bool = False) -> Iterator[dict[str, Any]]:
        """The same turn as `chat.completion.chunk` deltas, the way the API streams it (its text in
        two deltas, or `by_word` one delta a word)."""
        whole = self.chat_completion(body, reply)
        head = {k: whole[k] for k in ("id", "created", "model", "system_fingerprint")}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            data = {
                **head,
                "object": "chat.completion.chunk",
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            ChatCompletionChunk.model_validate(data)
            return data

        yield chunk({"role": "assistant", "content": "", "refusal": None})
        for piece in _words(reply.text) if by_word else _halves(reply.text):
            yield chunk({"content": piece})
        message = whole["choices"][0]["message"]
        for index, tc in enumerate(message["tool_calls"] or []):
            first = {
                "index": index,
                "id": tc["id"],
                "type": "function",
                "function": {"name": tc["function"]["name"], "arguments": ""},
            }
            yield chunk({"tool_calls": [first]})
            for piece in _halves(tc["function"]["arguments"]):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, whole["choices"][0]["finish_reason"])
        if (body.get("stream_options") or {}).get("include_usage"):
            data = {
                **head,
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": whole["usage"],
            }
            ChatCompletionChunk.model_validate(data)
            yield data

    # ---- Responses -------------------------------------------------------------------------

    def response(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        if reply.text:
            output.append(
                {
                    "id": self._new_id("msg"),
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {
                            "type": "output_text",
                            "text": reply.text,
                            "annotations": [],
                            "logprobs": [],
                        }
                    ],
                }
            )
        for c in reply.calls:
            if c.custom:
                output.append(
                    {
                        "id": self._new_id("ctc"),
                        "type": "custom_tool_call",
                        "call_id": self._new_id("call"),
                        "name": c.name,
                        "input": str(c.arguments),
                    }
                )
                continue
            output.append(
                {
                    "id": self._new_id("fc"),
                    "type": "function_call",
                    "call_id": self._new_id("call"),
                    "name": c.name,
                    "arguments": _args(c),
                    "status": "completed",
                }
            )
        prompt, completion = _tokens(body.get("input")), _tokens(output)
        completion = _within(completion, body.get("max_output_tokens"), reply.cut)
        data = {
            "id": self._new_id("resp"),
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": body.get("model", ""),
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + completion,
            },
            "user": None,
            "metadata": {},
        }
        Response.model_validate(data)
        return data

    def response_events(self, body: dict[str, Any], reply: Reply) -> Iterator[dict[str, Any]]:
        """The same turn as the Responses API's typed SSE events, ending in `response.completed`."""
        final = self.response(body, reply)
        sequence = itertools.count()

        def event(kind: str, **fields: Any) -> dict[str, Any]:
            data = {"type": kind, "sequence_number": next(sequence), **fields}
            _STREAM_EVENT.validate_python(data)
            return data

        pending = {**final, "status": "in_progress", "output": [], "usage": None}
        yield event("response.created", response=pending)
        yield event("response.in_progress", response=pending)
        for index, item in enumerate(final["output"]):
            where = {"item_id": item["id"], "output_index": index}
            if item["type"] == "message":
                text = item["content"][0]["text"]
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "content": []},
                )
                empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                yield event("response.content_part.added", content_index=0, part=empty, **where)
                for piece in _halves(text):
                    yield event(
                        "response.output_text.delta",
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                        **where,
                    )
                yield event(
                    "response.output_text.done", content_index=0, text=text, logprobs=[], **where
                )
                yield event(
                    "response.content_part.done", content_index=0, part=item["content"][0], **where
                )
            elif item["type"] == "custom_tool_call":
                yield event("response.output_item.added", output_index=index, item={**item, "input": ""})
                for piece in _halves(item["input"]):
                    yield event("response.custom_tool_call_input.delta", delta=piece, **where)
                yield event("response.custom_tool_call_input.done", input=item["input"], **where)
            else:
                yield event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                for piece in _halves(item["arguments"]):
                    yield event("response.function_call_arguments.delta", delta=piece, **where)
                yield event(
                    "response.function_call_arguments.done",
                    arguments=item["arguments"],
                    name=item["name"],
                    **where,
                )
            yield event("response.output_item.done", output_index=index, item=item)
        yield event("response.completed", response=final)


def _within(tokens: int, limit: int | None, cut: bool) -> int:
    """Output tokens as a real server counts them: all of `limit` when cut, else fewer."""
    if limit is None:
        return tokens
    return limit if cut else min(tokens, limit - 1)


def _args(c: Call) -> str:
    return c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments)


def _halves(text: str) -> list[str]:
    """Split into two deltas so clients must really accumulate the stream."""
    middle = len(text) // 2
    return [piece for piece in (text[:middle], text[middle:]) if piece]


def _words(text: str) -> list[str]:
    """One delta a word (with the space before it), as a token-by-token server streams."""
    return re.findall(r"\s*\S+", text) or ([text] if text else [])


def _handler_for(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (quiet tests)
            return None

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            server.probes.append(path)
            if path == "/props" and server.n_ctx is not None:
                props = {"default_generation_settings": {"n_ctx": server.n_ctx}, "modalities": {"vision": False}}
                self._json(200, props)
            elif path == "/v1/models" and server.models is not None:
                data = [{"id": name, "object": "model", "created": 0, "owned_by": "test"} for name in server.models]
                self._json(200, {"object": "list", "data": data})
            else:
                self._error(404, f"Invalid URL (GET {self.path})", "invalid_request_error", None)

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._error(
                    400,
                    "We could not parse the JSON body of your request.",
                    "invalid_request_error",
                    None,
                )
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            path = self.path.split("?")[0]
            if path in ("/api/show", "/tokenize"):
                server.probes.append(path)
                self._error(404, f"Invalid URL (POST {path})", "invalid_request_error", None)
                return
            if path not in ("/v1/chat/completions", "/v1/responses"):
                server.requests.append(Seen(path, headers, body, None))
                self._error(404, f"Invalid URL (POST {path})", "invalid_request_error", None)
                return
            if (
                server.api_key is not None
                and headers.get("authorization") != f"Bearer {server.api_key}"
            ):
                server.requests.append(Seen(path, headers, body, None))
                self._error(
                    401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
                )
                return
            if server.n_ctx is not None and path == "/v1/chat/completions":
                tokens = len(raw) // 4 + (body.get("max_completion_tokens") or body.get("max_tokens") or 0)
                if tokens > server.n_ctx:
                    server.requests.append(Seen(path, headers, body, None))
                    server.refused.append(tokens)
                    self._error(
                        400,
                        f"request ({tokens} tokens) exceeds the available context size "
                        f"({server.n_ctx} tokens), try increasing it",
                        "exceed_context_size_error",
                        None,
                    )
                    return
            if server.refuses_stream is not None and body.get("stream"):
                server.requests.append(Seen(path, headers, body, None))
                self._error(server.refuses_stream, "stream is not supported", "invalid_request_error", None)
                return
            step = server._next_step()
            server.requests.append(Seen(path, headers, body, step))
            with server._lock:
                server.in_flight += 1
                server.peak = max(server.peak, server.in_flight)
            try:
                time.sleep(server.hold)
                self._answer(path, body, step)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout); nothing to answer
            except Exception as exc:  # a bug in the script or in this server: make the test fail
                server.errors.append(f"{type(exc).__name__}: {exc}")
                self._error(500, f"openai_server bug: {exc}", "server_error", None, retry=False)
            finally:
                with server._lock:
                    server.in_flight -= 1

        def _answer(self, path: str, body: dict[str, Any], step: Step | None) -> None:
            if step is None:
                server.errors.append(f"script exhausted at request {len(server.requests)}")
                self._error(500, "script exhausted", "server_error", None, retry=False)
            elif isinstance(step, Fail):
                kind = "invalid_request_error" if step.status < 500 else "server_error"
                if step.status == 429:
                    kind = "requests"
                self._error(step.status, step.message, kind, step.code, extra=step.headers)
            elif isinstance(step, Stall):
                server._stopping.wait(step.seconds)
                self._error(504, "stalled", "server_error", None)
            elif isinstance(step, Raw):
                self._bytes(step.status, step.body, step.content_type)
            elif isinstance(step, Stream):
                self._hostile_sse(step)
            elif isinstance(step, Trickle) and body.get("stream") and server.streams and path == "/v1/chat/completions":
                chunks = server.chat_chunks(body, step.reply, by_word=True)
                self._sse([(None, chunk) for chunk in chunks], interval=step.interval)
            elif isinstance(step, Trickle):
                make = server.chat_completion if path == "/v1/chat/completions" else server.response
                payload = json.dumps(make(body, step.reply)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                for index in range(len(payload)):
                    if server._stopping.wait(step.interval):
                        return
                    self.wfile.write(payload[index : index + 1])
                    self.wfile.flush()
            elif path == "/v1/chat/completions":
                if body.get("stream") and server.streams:
                    self._sse([(None, chunk) for chunk in server.chat_chunks(body, step)])
                    return
                self._json(200, server.chat_completion(body, step))
            elif body.get("stream") and server.streams:
                self._sse([(e["type"], e) for e in server.response_events(body, step)])
            else:
                self._json(200, server.response(body, step))

        def _json(
            self, status: int, data: dict[str, Any], extra: dict[str, str] | None = None
        ) -> None:
            self._bytes(status, json.dumps(data).encode(), "application/json", extra)

        def _bytes(
            self, status: int, payload: bytes, content_type: str, extra: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("x-request-id", f"req_{len(server.requests):04d}")
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def _error(
            self,
            status: int,
            message: str,
            kind: str,
            code: str | None,
            *,
            retry: bool | None = None,
            extra: dict[str, str] | None = None,
        ) -> None:
            headers = dict(extra or {})
            if retry is not None:
                headers["x-should-retry"] = "true" if retry else "false"
            error = {"error": {"message": message, "type": kind, "param": None, "code": code}}
            self._json(status, error, headers)

        def _sse(self, events: Iterable[tuple[str | None, dict[str, Any]]], interval: float = 0.0) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("x-request-id", f"req_{len(server.requests):04d}")
            self.end_headers()
            for name, data in events:
                if interval and server._stopping.wait(interval):
                    return
                head = f"event: {name}\n" if name else ""
                self._chunk(f"{head}data: {json.dumps(data)}\n\n".encode())
            if self.path.startswith("/v1/chat/completions"):
                self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")

        def _hostile_sse(self, step: Stream) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(step.repeat):
                for data in step.data:
                    if step.interval and server._stopping.wait(step.interval):
                        return
                    payload = data if isinstance(data, bytes) else json.dumps(data).encode()
                    self._chunk(b"data: " + payload + b"\n\n")
            if step.end == "drop":
                self.wfile.flush()
                self.close_connection = True
                return
            if step.end == "done":
                self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    return Handler


def server_environ(server: OpenAIServer, **extra: str) -> dict[str, str]:
    """Environment for `resolve_model`: both providers aimed at `server`, short timeout."""
    return {
        "OPENAI_API_KEY": SERVER_KEY,
        "OPENAI_COMPATIBLE_API_KEY": SERVER_KEY,
        "OPENAI_BASE_URL": server.url,
        "CODEROOM_MODEL_MAX_RETRIES": "3",
        "CODEROOM_MODEL_TIMEOUT": "10",
        **extra,
    }


def spec_for(api: str, server: OpenAIServer) -> str:
    """The --model spec that reaches `server` in the given wire format."""
    return f"openai-compatible:scripted@{server.url}" if api == "chat_completions" else "gpt-5.4"
