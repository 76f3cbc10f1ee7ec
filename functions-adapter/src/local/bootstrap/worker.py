"""geofaas local runtime: python3 workers for tinyFaaS-format function folders.

Two ways to start:

`python3 worker.py <function-dir>` (`fork_server = false`): imports `fn.py` once (the cold
start), then serves calls one at a time over stdin/stdout with length-prefixed frames:

  request  (host -> worker): u32be len, headers JSON object; u32be len, raw body
  response (worker -> host): u8 kind, u32be len, payload
    kind 0 = output, 1 = the function raised (payload: traceback, worker stays usable),
    2 = ready (after import), 3 = import failed (worker exits),
    4 = the function failed and this worker retires (e.g. MemoryError),
    5 = a process was forked (payload: its pid, ASCII),
    6 = a forked process exited (payload: "<pid> <raw wait status>", ASCII).

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
call and `\x1e` closes it, and each line printed to `sys.stdout` starts with `\x1f`.
"""

import inspect
import json
import os
import select
import signal
import socket
import struct
import sys
import traceback


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


def _encode(result):
    if result is None:
        return b""
    if isinstance(result, (bytes, bytearray)):
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


def _import_function(fn_dir, out):
    """Imports `fn.py` from `fn_dir`; (func, takes_headers), or reports kind 3 and exits."""
    os.chdir(fn_dir)
    sys.path.insert(0, fn_dir)
    sys.argv = [sys.argv[0], fn_dir]
    try:
        import fn  # noqa: E402  (the function module, imported once)

        func = fn.fn
        return func, _arity(func) >= 2
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
    func, takes_headers = _import_function(os.path.abspath(sys.argv[1]), proto_out)
    _send(proto_out, 2, b"")
    _serve(func, takes_headers, proto_in, proto_out)


def _serve(func, takes_headers, proto_in, proto_out):
    while True:
        try:
            headers = json.loads(_read_frame(proto_in) or b"{}")
            body = _read_frame(proto_in)
        except EOFError:
            return
        data = body.decode("utf-8", errors="surrogateescape") or None
        _call_tag(str(headers.get("x-request-id", "")))
        try:
            result = func(data, headers) if takes_headers else func(data)
            reply = (0, _encode(result))
        except MemoryError:
            _call_tag("")
            _send(proto_out, 4, b"MemoryError: the function ran out of memory")
            os._exit(1)
        except Exception:  # noqa: BLE001  (a raising function is reported, the worker stays)
            reply = (1, traceback.format_exc().encode("utf-8", errors="replace"))
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
    func, takes_headers = _import_function(os.path.abspath(req["dir"]), conn_out)
    if req.get("mode") == "instance":
        _send(conn_out, 2, b"")
        _run_instance(func, takes_headers, conn_in, conn_out)
        return

    def instance(token):
        conn.close()
        i_in, i_out, _ = _connect_back(sock_path, token)
        _send(i_out, 2, b"")
        _run_instance(func, takes_headers, i_in, i_out)

    _forker(conn_in, conn_out, instance)


def _run_instance(func, takes_headers, proto_in, proto_out):
    try:
        _serve(func, takes_headers, proto_in, proto_out)
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
