"""geofaas local runtime: warm python3 worker for one tinyFaaS-format function folder.

Started as `python3 worker.py <function-dir>`. Imports `fn.py` once (the cold start),
then serves calls one at a time over stdin/stdout with length-prefixed frames:

  request  (host -> worker): u32be len, headers JSON object; u32be len, raw body
  response (worker -> host): u8 kind, u32be len, payload
    kind 0 = output, 1 = the function raised (payload: traceback, worker stays usable),
    2 = ready (after import), 3 = import failed (worker exits),
    4 = the function failed and this worker retires (e.g. MemoryError).

The protocol uses private copies of fd 0/1; the function's own stdin is /dev/null and its
stdout goes to stderr, so its prints can never corrupt the framing.
"""

import inspect
import json
import os
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
    _send(proto_out, 2, b"")

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


if __name__ == "__main__":
    main()
