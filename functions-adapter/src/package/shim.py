"""geofaas: runs the tinyFaaS-format function in fn.py on a remote platform.

Written beside fn.py by `geofaas deploy` as `__main__.py` (an Apache OpenWhisk action, entry
`main`) or `geofaas_handler.py` (an AWS Lambda function, handler `geofaas_handler.handler`).
It maps what geofaas's adapters send onto `fn(input, headers)` the way the embedded runtime
calls it, and returns the output as `{"geofaas_body": text}` (or `{"geofaas_body_base64": b64}`
for bytes), which the adapters unwrap back into the raw output. A raised exception is the
platform's function error. The adapters pass no request headers: `headers` is `{}`.
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


_TAKES_HEADERS = _arity(_fn.fn) >= 2


def _run(data):
    result = _fn.fn(data or None, {}) if _TAKES_HEADERS else _fn.fn(data or None)
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
    if set(args) == {"__ow_body"} and isinstance(args["__ow_body"], str):
        return _run(args["__ow_body"])
    return _run(_compact(args))


def handler(event, context):
    """Lambda: a JSON body arrives parsed, an empty one as {}, any other as a JSON string."""
    if isinstance(event, str):
        return _run(event)
    if event == {}:
        return _run(None)
    return _run(_compact(event))
