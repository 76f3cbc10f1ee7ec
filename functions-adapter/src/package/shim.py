"""geofaas: runs the tinyFaaS-format function in fn.py on a remote platform.

Written beside fn.py by `geofaas deploy` as `__main__.py` (an Apache OpenWhisk action, entry
`main`) or `geofaas_handler.py` (an AWS Lambda function, handler `geofaas_handler.handler`).
It maps what geofaas's adapters send onto `fn(input, headers)` the way the embedded runtime
calls it, and returns the output as `{"geofaas_body": text}` (or `{"geofaas_body_base64": b64}`
for bytes), which the adapters unwrap back into the raw output. A raised exception is the
platform's function error. The adapters pass no request headers: `headers` is `{}`.

A fn.py written for the platform itself, a Lambda `handler(event, context)` or an OpenWhisk
`main(params)`, is called as the platform would call it and its answer passed on unchanged
(with `event = "http"` the adapters map a function-URL or web-action answer back).
"""

import base64
import inspect
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
os.chdir(_HERE)

import fn as _fn  # noqa: E402  (the function module, imported once per instance)


def _arity(func):
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return 2
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


_FN = getattr(_fn, "fn", None)
_OWN_HANDLER = getattr(_fn, "handler", None)
# `main` only where nothing else is: a raw fn.py may well have a `main()` of its own.
_OWN_MAIN = None if callable(_FN) or callable(_OWN_HANDLER) else getattr(_fn, "main", None)
if not any(callable(f) for f in (_FN, _OWN_HANDLER, _OWN_MAIN)):
    raise ImportError("fn.py defines neither fn(input, headers) nor handler(event, context)")
_TAKES_HEADERS = callable(_FN) and _arity(_FN) >= 2


def _run(data):
    if not callable(_FN):
        raise RuntimeError("fn.py has no fn(input, headers) for this platform's raw calls")
    result = _FN(data or None, {}) if _TAKES_HEADERS else _FN(data or None)
    if result is None:
        return {"geofaas_body": ""}
    if isinstance(result, (bytes, bytearray)):
        return {"geofaas_body_base64": base64.b64encode(bytes(result)).decode("ascii")}
    if isinstance(result, str):
        return {"geofaas_body": result}
    return {"geofaas_body": json.dumps(result, default=str)}


def _compact(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def main(args):
    """OpenWhisk: a JSON-object body arrives as the parameters, any other as {"__ow_body": text}."""
    if callable(_OWN_MAIN):
        return _OWN_MAIN(args)
    if set(args) == {"__ow_body"} and isinstance(args["__ow_body"], str):
        return _run(args["__ow_body"])
    return _run(_compact(args))


def handler(event, context):
    """Lambda: a JSON body arrives parsed, an empty one as {}, any other as a JSON string."""
    if callable(_OWN_HANDLER):
        return _OWN_HANDLER(event, context)
    if isinstance(event, str):
        return _run(event)
    if event == {}:
        return _run(None)
    return _run(_compact(event))
