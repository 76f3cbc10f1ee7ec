"""geofaas local runtime: warm python3 worker for one tinyFaaS-format function folder.

Started as `python3 worker.py <function-dir>`. Imports `fn.py` once (the cold start),
then serves calls one at a time over stdin/stdout with length-prefixed frames:

  request  (host -> worker): u32be len, headers JSON object; u32be len, raw body
  response (worker -> host): u8 kind, u32be len, payload
    kind 0 = output, 1 = the function raised (payload: traceback, worker stays usable),
    2 = ready (after import), 3 = import failed (worker exits),
    4 = the function failed and this worker retires (e.g. MemoryError),
    5 = (fork server) a new instance was forked (payload: its pid, ASCII).

As a fork server, `python3 worker.py <function-dir> --fork-server <unix-socket>`: imports `fn.py`
once, answers ready, then for every request frame (payload: a token) forks a new instance and
answers kind 5 with its pid. The instance starts its own session (process group), connects to
the socket, sends ready with the token and serves calls over the socket exactly as above. The
fork server itself never runs a call, so every instance starts from the freshly imported module:
nothing one instance changes is seen by an instance forked after it. Instances inherit the
server's resource limits.

The protocol uses private copies of fd 0/1; the function's own stdin is /dev/null and its
stdout goes to stderr, so its prints can never corrupt the framing.
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


def main():
    fn_dir = os.path.abspath(sys.argv[1])
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    os.chdir(fn_dir)
    sys.path.insert(0, fn_dir)
    try:
        import fn  # noqa: E402  (the function module, imported once)

        func = fn.fn
        takes_headers = _arity(func) >= 2
    except BaseException:  # noqa: BLE001  (any import failure is reported, then we exit)
        _send(proto_out, 3, traceback.format_exc().encode("utf-8", errors="replace"))
        sys.exit(1)
    if len(sys.argv) > 3 and sys.argv[2] == "--fork-server":
        _fork_server(func, takes_headers, proto_in, proto_out, sys.argv[3])
        return
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
        try:
            result = func(data, headers) if takes_headers else func(data)
            _send(proto_out, 0, _encode(result))
        except MemoryError:
            _send(proto_out, 4, b"MemoryError: the function ran out of memory")
            os._exit(1)
        except Exception:  # noqa: BLE001  (a raising function is reported, the worker stays)
            _send(proto_out, 1, traceback.format_exc().encode("utf-8", errors="replace"))


def _fork_server(func, takes_headers, proto_in, proto_out, sock_path):
    # SIGCHLD wakes the loop through a pipe; every exit is reported (kind 6, "<pid> <wait
    # status>") so the host can say how an instance ended.
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
            token = _read_frame(proto_in)
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
                _instance(func, takes_headers, sock_path, token)
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


def _instance(func, takes_headers, sock_path, token):
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(sock_path)
    err = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    err.connect(sock_path)
    err.sendall(struct.pack(">BI", 2, len(token) + 7) + token + b":stderr")
    # This instance's own stderr (and stdout, as in a piped worker) is the second connection.
    os.dup2(err.fileno(), 2)
    os.dup2(err.fileno(), 1)
    sock_in = conn.makefile("rb", buffering=0)
    sock_out = conn.makefile("wb")
    _send(sock_out, 2, token)
    try:
        _serve(func, takes_headers, sock_in, sock_out)
    except SystemExit as e:
        sys.stderr.flush()
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        os._exit(code)
    except BaseException:  # noqa: BLE001  (what a piped worker would print before dying)
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


if __name__ == "__main__":
    main()
