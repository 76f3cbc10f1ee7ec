"""geofaas local runtime: python3 workers for tinyFaaS-format function folders.

Two ways to start:

`python3 worker.py <function-dir>` (`fork_server = false`): imports `fn.py` once (the cold
start), then serves calls one at a time over stdin/stdout with length-prefixed frames:

  request  (host -> worker): u32be len, head JSON object; u32be len, raw body
    head: {"method", "path" (after /fn/<name>, "/" when none), "query" (without "?"), "url",
    "source_ip" (or null), "request_id", "headers": [[lower-case name, value], ...]}
    (a head without a "headers" list is read as the request headers themselves: the older
    format, where the method is POST and the path "/")
  response (worker -> host): u8 kind, u32be len, payload
    kind 0 = output (the whole body of a 200 with no headers; or, after kind 7, the whole
    body of that response), 1 = the function raised (payload: traceback, worker stays usable),
    2 = ready (after import), 3 = import failed (worker exits),
    4 = the function failed and this worker retires (e.g. MemoryError),
    5 = a process was forked (payload: its pid, ASCII),
    6 = a forked process exited (payload: "<pid> <raw wait status>", ASCII),
    7 = a response head, JSON {"status", "headers": [[name, value], ...]}, followed by one
    kind 0 (the whole body) or by kind 8 frames (a body chunk each, sent as it is produced)
    and kind 9 (empty: the end of the stream); kind 1 or 4 during a stream fails the call.
  The worker passes the status and headers through as the function gave them (as strings);
  the host validates them.

The function is one of:
- `handler(event, context)` (may be `async def`): an AWS Lambda function-URL handler (payload
  format 2.0), called with the event and context Lambda would pass and answered the way Lambda
  maps its result (`statusCode`, `headers`, `multiValueHeaders`, `cookies`, `body`,
  `isBase64Encoded`; any other value is JSON). A `body` that is an iterator, generator or
  async generator is streamed.
- `fn(input, headers)` or `fn(input)`: the tinyFaaS format. `input` is the body as text (None
  when empty); `headers` is a case-insensitive dict of the request headers (repeated values
  joined with ", ") with `.method`, `.path`, `.query`, `.url`, `.source_ip`, `.request_id`.
  The result is the body of a 200 (bytes as they are, str as UTF-8, None empty, anything else
  as JSON); an iterator or generator is streamed, each item a chunk.
A module defining both is called as `handler`.

`python3 worker.py --zygote <unix-socket>`: the runtime's zygote. It holds this module and the
modules it imports, never a function. For every request frame (payload: JSON
`{"token", "dir", "env", "mode"}`) it forks a child and answers kind 5 with its pid; it reports
the exit of every child with kind 6. The child starts its own session (process group), connects
to the socket twice (its control connection, then its stderr; each first sends kind 2 with the
token, `<token>:stderr` for the second), sets the version's environment, changes to the
function's folder, imports `fn.py` and sends kind 2 (ready) or 3 (import failed, with the
traceback) on the control connection. Then, with mode "server", it is that function's fork
server: the zygote's loop again, over the control connection, where every request frame (the
token only) forks an instance of the already imported function; with mode "instance" it serves
calls on the control connection itself. An instance forked from a fork server connects back the
same way and sends ready at once. Neither the zygote nor a fork server ever runs a call, so
every instance starts from a freshly imported module: nothing one instance changes is seen by
another. Children inherit the resource limits.

The protocol uses private copies of fd 0/1; the function's own stdin is /dev/null and its
stdout goes to stderr, so its prints can never corrupt the framing. On stderr, lines are tagged
for the host's function logs (functions-adapter/src/local/logs.rs): `\x1e<request id>` opens a
call and `\x1e` closes it (just before the call's last frame), and each line printed to
`sys.stdout` starts with `\x1f`.
"""

import base64
import inspect
import json
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from collections.abc import Iterator
from urllib.parse import parse_qsl, unquote, urlsplit


def _read_exact(stream, n):
    buf = b""
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _read_frame(stream):
    (n,) = struct.unpack(">I", _read_exact(stream, 4))
    return _read_exact(stream, n)


def _send(out, kind, payload):
    out.write(struct.pack(">BI", kind, len(payload)))
    out.write(payload)
    out.flush()


KIND_OUTPUT = 0
KIND_RAISED = 1
KIND_RETIRE = 4
KIND_HEAD = 7
KIND_CHUNK = 8
KIND_END = 9


def _encode(result):
    if result is None:
        return b""
    if isinstance(result, (bytes, bytearray, memoryview)):
        return bytes(result)
    if isinstance(result, str):
        return result.encode("utf-8", errors="surrogateescape")
    return json.dumps(result, default=str).encode("utf-8")


def _arity(func):
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return 2
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


CALL_TAG = "\x1e"
STDOUT_TAG = "\x1f"


class _TaggedStdout:
    """`sys.stdout` of a function: whole lines, tagged as stdout, on stderr."""

    def __init__(self, err):
        self._err = err
        self._partial = ""

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._err.write(STDOUT_TAG + line + "\n")
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if self._partial:
            self._err.write(STDOUT_TAG + self._partial + "\n")
            self._partial = ""
        self._err.flush()

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self._err.fileno()

    def __getattr__(self, name):
        # buffer, encoding, errors, closed, ...: stderr's (bytes written to buffer are stderr's).
        return getattr(self._err, name)


def _call_tag(request_id):
    """Opens (or, with "", closes) a call on stderr, after what was printed so far."""
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001  (a function may have replaced sys.stdout)
        pass
    sys.stderr.write(CALL_TAG + request_id.replace("\n", " ") + "\n")
    sys.stderr.flush()


def _private_stdio():
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = _TaggedStdout(sys.stderr)
    return proto_in, proto_out


# ---------------------------------------------------------------------------------------------
# One call's request.


class _Request:
    """The head of one call (either head format)."""

    def __init__(self, head):
        if not isinstance(head, dict):
            head = {}
        if isinstance(head.get("headers"), list):
            self.pairs = [
                (str(p[0]).lower(), str(p[1]))
                for p in head["headers"]
                if isinstance(p, (list, tuple)) and len(p) == 2
            ]
            self.method = str(head.get("method") or "POST").upper()
            self.path = str(head.get("path") or "/")
            self.query = str(head.get("query") or "")
            self.url = str(head.get("url") or "")
            source_ip = head.get("source_ip")
            request_id = head.get("request_id")
        else:
            # The older head: the request headers as one object.
            self.pairs = [(str(k).lower(), str(v)) for k, v in head.items()]
            self.method, self.path, self.query, self.url = "POST", "/", "", ""
            source_ip, request_id = None, None
        self.source_ip = None if source_ip is None else str(source_ip)
        if request_id is None:
            request_id = next((v for k, v in self.pairs if k == "x-request-id"), "")
        self.request_id = str(request_id)
        timeout = head.get("timeout_ms")
        self.timeout_ms = timeout if isinstance(timeout, (int, float)) else 30000
        self.started = time.time()

    def joined(self, sep, skip=()):
        """The headers as a dict, repeated names' values joined with `sep` (cookie with "; ")."""
        out = {}
        for name, value in self.pairs:
            if name in skip:
                continue
            if name in out:
                out[name] += ("; " if name == "cookie" else sep) + value
            else:
                out[name] = value
        return out


class Headers(dict):
    """The request headers of a `fn(input, headers)` call: a dict with lower-case names that
    looks names up case-insensitively, plus the request's method, path and query."""

    def __init__(self, request=None):
        super().__init__(request.joined(", ") if request is not None else {})
        self.method = request.method if request is not None else "POST"
        self.path = request.path if request is not None else "/"
        self.query = request.query if request is not None else ""
        self.url = request.url if request is not None else ""
        self.source_ip = request.source_ip if request is not None else None
        self.request_id = request.request_id if request is not None else ""

    @staticmethod
    def _key(key):
        return key.lower() if isinstance(key, str) else key

    def __getitem__(self, key):
        return super().__getitem__(self._key(key))

    def __setitem__(self, key, value):
        super().__setitem__(self._key(key), value)

    def __delitem__(self, key):
        super().__delitem__(self._key(key))

    def __contains__(self, key):
        return super().__contains__(self._key(key))

    def get(self, key, default=None):
        return super().get(self._key(key), default)

    def pop(self, key, *default):
        return super().pop(self._key(key), *default)

    def setdefault(self, key, default=None):
        return super().setdefault(self._key(key), default)

    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def copy(self):
        new = Headers()
        dict.update(new, self)
        new.__dict__.update(self.__dict__)
        return new


# ---------------------------------------------------------------------------------------------
# AWS Lambda function-URL events (payload format 2.0) and results.

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_BINARY_TYPES = (
    "application/octet-stream",
    "application/zip",
    "application/gzip",
    "application/pdf",
    "application/protobuf",
    "application/x-protobuf",
    "application/wasm",
)


def _is_binary_type(content_type):
    base = content_type.split(";", 1)[0].strip().lower()
    return base in _BINARY_TYPES or base.startswith(("image/", "audio/", "video/", "font/"))


def _function_name(request, fn_dir):
    path = urlsplit(request.url).path if request.url else ""
    if path.startswith("/fn/"):
        name = unquote(path[4:].split("/", 1)[0])
        if name:
            return name
    return os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or os.path.basename(fn_dir.rstrip("/"))


def _lambda_event(request, body):
    url = urlsplit(request.url) if request.url else None
    netloc = (url.netloc.rsplit("@", 1)[-1] if url else "") or "localhost"
    hostname = (url.hostname if url else None) or "localhost"
    headers = request.joined(",", skip=("cookie",))
    headers.setdefault("host", netloc)
    if request.source_ip:
        headers.setdefault("x-forwarded-for", request.source_ip)
    if url and url.scheme:
        headers.setdefault("x-forwarded-proto", url.scheme)
        headers.setdefault("x-forwarded-port", str(url.port or (443 if url.scheme == "https" else 80)))
    cookies = [
        c.strip()
        for name, value in request.pairs
        if name == "cookie"
        for c in value.split(";")
        if c.strip()
    ]
    now = request.started
    t = time.gmtime(now)
    stamp = f"{t.tm_mday:02d}/{_MONTHS[t.tm_mon - 1]}/{t.tm_year}:{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"
    event = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": request.path,
        "rawQueryString": request.query,
    }
    if cookies:
        event["cookies"] = cookies
    event["headers"] = headers
    if request.query:
        params = {}
        for key, value in parse_qsl(request.query, keep_blank_values=True):
            params[key] = params[key] + "," + value if key in params else value
        event["queryStringParameters"] = params
    prefix = hostname.split(".", 1)[0]
    event["requestContext"] = {
        "accountId": "anonymous",
        "apiId": prefix,
        "domainName": netloc,
        "domainPrefix": prefix,
        "http": {
            "method": request.method,
            "path": request.path,
            "protocol": "HTTP/1.1",
            "sourceIp": request.source_ip or "",
            "userAgent": headers.get("user-agent", ""),
        },
        "requestId": request.request_id,
        "routeKey": "$default",
        "stage": "$default",
        "time": stamp,
        "timeEpoch": int(now * 1000),
    }
    if body:
        text = None
        if not _is_binary_type(headers.get("content-type", "")):
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        if text is None:
            event["body"] = base64.b64encode(body).decode("ascii")
            event["isBase64Encoded"] = True
        else:
            event["body"] = text
            event["isBase64Encoded"] = False
    else:
        event["isBase64Encoded"] = False
    return event


_LOG_STREAM = {}


class LambdaContext:
    """The `context` of a Lambda-style `handler(event, context)`."""

    def __init__(self, request, fn_dir):
        name = _function_name(request, fn_dir)
        self.aws_request_id = request.request_id
        self.function_name = name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE") or str(_memory_mb())
        region = os.environ.get("AWS_REGION") or "local"
        self.invoked_function_arn = f"arn:aws:lambda:{region}:000000000000:function:{name}"
        self.log_group_name = f"/aws/lambda/{name}"
        pid = os.getpid()
        if pid not in _LOG_STREAM:
            _LOG_STREAM[pid] = time.strftime("%Y/%m/%d", time.gmtime()) + "/[$LATEST]" + os.urandom(16).hex()
        self.log_stream_name = _LOG_STREAM[pid]
        self.identity = None
        self.client_context = None
        self._deadline = request.started * 1000 + request.timeout_ms

    def get_remaining_time_in_millis(self):
        return max(0, int(self._deadline - time.time() * 1000))


def _memory_mb():
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY and soft > 0:
            return soft // (1024 * 1024)
    except Exception:  # noqa: BLE001
        pass
    return 128


def _scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _add_header(pairs, name, value):
    if value is None:
        return
    if isinstance(value, (list, tuple)):
        for v in value:
            _add_header(pairs, name, v)
        return
    pairs.append((_scalar(name), _scalar(value)))


def _status(code):
    """The status as given, as a number where it is one (the host validates it)."""
    if isinstance(code, bool):
        return code
    if isinstance(code, float) and code.is_integer():
        return int(code)
    if isinstance(code, str) and code.strip().isdigit():
        return int(code.strip())
    return code


def _is_stream(value):
    if isinstance(value, (str, bytes, bytearray, memoryview, dict, list, tuple)):
        return False
    return isinstance(value, Iterator) or hasattr(value, "__aiter__")


def _lambda_result(result):
    """(status, header pairs, body bytes or a stream) of a Lambda handler's result."""
    if isinstance(result, dict) and "statusCode" in result:
        status = _status(result.get("statusCode"))
        pairs = []
        headers = result.get("headers") or {}
        if isinstance(headers, dict):
            for name, value in headers.items():
                _add_header(pairs, name, value)
        multi = result.get("multiValueHeaders") or {}
        if isinstance(multi, dict):
            for name, value in multi.items():
                _add_header(pairs, name, value)
        cookies = result.get("cookies") or []
        if isinstance(cookies, (str, bytes)):
            cookies = [cookies]
        for cookie in cookies:
            _add_header(pairs, "set-cookie", cookie)
        body = result.get("body")
        if body is None:
            data = b""
        elif _is_stream(body):
            return status, pairs, body
        elif isinstance(body, (str, bytes, bytearray, memoryview)):
            if result.get("isBase64Encoded"):
                data = base64.b64decode(body)
            else:
                data = _encode(body)
        else:
            data = json.dumps(body, default=str).encode("utf-8")
        if data and not any(name.lower() == "content-type" for name, _ in pairs):
            pairs.append(("content-type", "application/json"))
        return status, pairs, data
    if isinstance(result, (bytes, bytearray, memoryview)):
        return 200, [("content-type", "application/octet-stream")], bytes(result)
    # Any other JSON value (a str included) is the JSON body, as Lambda's function URLs do.
    return 200, [("content-type", "application/json")], json.dumps(result, default=str).encode("utf-8")


def _head(status, pairs):
    return json.dumps({"status": status, "headers": [[n, v] for n, v in pairs]}).encode("utf-8")


# ---------------------------------------------------------------------------------------------
# The imported function.


async def _await(value):
    return await value


_END = object()


async def _anext(iterator):
    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return _END


class _Function:
    """The function of `fn.py`: a Lambda `handler(event, context)` or a tinyFaaS `fn`."""

    def __init__(self, module, fn_dir):
        self.dir = fn_dir
        self._loop = None
        handler = getattr(module, "handler", None)
        if callable(handler):
            self.lambda_style = True
            self.func = handler
            return
        func = getattr(module, "fn", None)
        if not callable(func):
            raise AttributeError(
                f"{os.path.join(fn_dir, 'fn.py')} defines neither handler(event, context) "
                "nor fn(input, headers)"
            )
        self.lambda_style = False
        self.func = func
        self.takes_headers = _arity(func) >= 2

    def _event_loop(self):
        if self._loop is None:
            import asyncio

            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
        return self._loop

    def _resolve(self, value):
        if inspect.isawaitable(value):
            return self._event_loop().run_until_complete(_await(value))
        return value

    def _items(self, stream):
        if hasattr(stream, "__aiter__"):
            iterator = stream.__aiter__()
            loop = self._event_loop()
            while True:
                item = loop.run_until_complete(_anext(iterator))
                if item is _END:
                    return
                yield item
        else:
            yield from stream

    def _stream(self, out, status, pairs, stream):
        """Sends the head and every item of `stream` as it comes; the last frame is the
        caller's."""
        _send(out, KIND_HEAD, _head(status, pairs))
        for item in self._items(stream):
            data = _encode(item)
            if data:
                _send(out, KIND_CHUNK, data)
        return KIND_END, b""

    def call(self, head, body, out):
        """Runs one call; sends its leading frames (a response head, chunks) and returns the
        last frame (kind, payload)."""
        request = _Request(head)
        _call_tag(request.request_id)
        if self.lambda_style:
            event = _lambda_event(request, body)
            result = self._resolve(self.func(event, LambdaContext(request, self.dir)))
            if result is None:
                return KIND_OUTPUT, b""
            if _is_stream(result):
                return self._stream(out, 200, [], result)
            status, pairs, data = _lambda_result(result)
            if _is_stream(data):
                return self._stream(out, status, pairs, data)
            _send(out, KIND_HEAD, _head(status, pairs))
            return KIND_OUTPUT, data
        data = body.decode("utf-8", errors="surrogateescape") or None
        if self.takes_headers:
            result = self.func(data, Headers(request))
        else:
            result = self.func(data)
        result = self._resolve(result)
        if _is_stream(result):
            return self._stream(out, 200, [], result)
        return KIND_OUTPUT, _encode(result)


def _import_function(fn_dir, out):
    """Imports `fn.py` from `fn_dir`; its `_Function`, or reports kind 3 and exits."""
    os.chdir(fn_dir)
    sys.path.insert(0, fn_dir)
    sys.argv = [sys.argv[0], fn_dir]
    try:
        import fn  # noqa: E402  (the function module, imported once)

        return _Function(fn, fn_dir)
    except BaseException:  # noqa: BLE001  (any import failure is reported, then we exit)
        _send(out, 3, traceback.format_exc().encode("utf-8", errors="replace"))
        out.flush()
        os._exit(1)


def main():
    proto_in, proto_out = _private_stdio()
    if len(sys.argv) > 2 and sys.argv[1] == "--zygote":
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _forker(proto_in, proto_out, lambda request: _zygote_child(request, sys.argv[2]))
        return
    function = _import_function(os.path.abspath(sys.argv[1]), proto_out)
    _send(proto_out, 2, b"")
    _serve(function, proto_in, proto_out)


def _serve(function, proto_in, proto_out):
    while True:
        try:
            head_frame = _read_frame(proto_in)
            body = _read_frame(proto_in)
        except EOFError:
            return
        try:
            head = json.loads(head_frame or b"{}")
        except ValueError:
            head = {}
        try:
            reply = function.call(head, body, proto_out)
        except MemoryError:
            _call_tag("")
            _send(proto_out, KIND_RETIRE, b"MemoryError: the function ran out of memory")
            os._exit(1)
        except Exception:  # noqa: BLE001  (a raising function is reported, the worker stays)
            reply = (KIND_RAISED, traceback.format_exc().encode("utf-8", errors="replace"))
        _call_tag("")
        _send(proto_out, *reply)


def _forker(proto_in, proto_out, child):
    """Forks `child(request)` for every request frame, answering kind 5 with the child's pid and
    reporting every exit with kind 6, until the input ends."""
    # SIGCHLD wakes the loop through a pipe, so exits are reported while no request comes.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _send(proto_out, 2, b"")
    in_fd = proto_in.fileno()
    while True:
        readable, _, _ = select.select([in_fd, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            _report_exits(proto_out)
        if in_fd not in readable:
            continue
        try:
            request = _read_frame(proto_in)
        except EOFError:
            return
        pid = os.fork()
        if pid == 0:
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_r)
                os.close(wake_w)
                os.setsid()
                proto_in.close()
                proto_out.close()
                child(request)
            except BaseException:  # noqa: BLE001  (reported on the child's stderr)
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)
            finally:
                os._exit(0)
        _send(proto_out, 5, str(pid).encode("ascii"))


def _report_exits(out):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(out, 6, f"{pid} {status}".encode("ascii"))


def _connect_back(sock_path, token):
    """The control connection to the host; this process's stderr (and stdout) become a second."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(sock_path)
    conn.sendall(struct.pack(">BI", 2, len(token)) + token)
    err = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    err.connect(sock_path)
    err.sendall(struct.pack(">BI", 2, len(token) + 7) + token + b":stderr")
    os.dup2(err.fileno(), 2)
    os.dup2(err.fileno(), 1)
    err.close()
    return conn.makefile("rb", buffering=0), conn.makefile("wb"), conn


def _zygote_child(request, sock_path):
    """A child of the zygote: becomes one function's fork server, or one instance of it."""
    req = json.loads(request)
    token = req["token"].encode("ascii")
    conn_in, conn_out, conn = _connect_back(sock_path, token)
    os.environ.update(req.get("env") or {})
    function = _import_function(os.path.abspath(req["dir"]), conn_out)
    if req.get("mode") == "instance":
        _send(conn_out, 2, b"")
        _run_instance(function, conn_in, conn_out)
        return

    def instance(token):
        conn.close()
        i_in, i_out, _ = _connect_back(sock_path, token)
        _send(i_out, 2, b"")
        _run_instance(function, i_in, i_out)

    _forker(conn_in, conn_out, instance)


def _run_instance(function, proto_in, proto_out):
    try:
        _serve(function, proto_in, proto_out)
    except SystemExit as e:
        sys.stderr.flush()
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        os._exit(code)
    except BaseException:  # noqa: BLE001  (what a piped worker would print before dying)
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
