"""rest-py: a JSON REST resource in AWS Lambda function-URL style (runs on Lambda unchanged).

    GET    /users        -> 200, the users
    GET    /users/{id}   -> 200 the user, or 404
    PUT    /users/{id}   -> 201 with Location and two cookies (body: a JSON object)
    DELETE /users/{id}   -> 204

Every JSON answer also tells what the function saw (method, rawPath, query parameters and the
x-geo-node header). The users live in memory: each instance of the function has its own.
"""

import json
from urllib.parse import quote

USERS = {"1": {"id": "1", "name": "Ada"}}


def _json(status, value, event, headers=None, cookies=None):
    headers = {"Content-Type": "application/json", **(headers or {})}
    answer = {
        "statusCode": status,
        "headers": headers,
        "body": json.dumps({**value, "seen": _seen(event)}),
    }
    if cookies:
        answer["cookies"] = cookies
    return answer


def _seen(event):
    return {
        "method": event["requestContext"]["http"]["method"],
        "rawPath": event.get("rawPath", "/"),
        "query": event.get("queryStringParameters") or {},
        "geoNode": event.get("headers", {}).get("x-geo-node"),
    }


def handler(event, context):
    method = event["requestContext"]["http"]["method"]
    parts = [p for p in event.get("rawPath", "/").split("/") if p]
    if parts[:1] != ["users"] or len(parts) > 2:
        return _json(404, {"error": "no such resource", "try": "/users/{id}"}, event)
    if len(parts) == 1:
        if method != "GET":
            return _json(405, {"error": f"{method} not allowed"}, event, {"Allow": "GET"})
        return _json(200, {"users": list(USERS.values())}, event)

    user_id = parts[1]
    if method == "GET":
        user = USERS.get(user_id)
        if user is None:
            return _json(404, {"error": f"no user {user_id}"}, event)
        return _json(200, {"user": user}, event)
    if method == "PUT":
        try:
            body = event.get("body") or "{}"
            if event.get("isBase64Encoded"):
                import base64

                body = base64.b64decode(body).decode("utf-8")
            fields = json.loads(body)
            if not isinstance(fields, dict):
                raise ValueError("not an object")
        except ValueError as err:
            return _json(400, {"error": f"the body must be a JSON object ({err})"}, event)
        user = {**fields, "id": user_id}
        USERS[user_id] = user
        # Relative to this request's URL (…/users/{id}), so it is right behind any prefix.
        location = quote(user_id, safe="")
        cookies = [f"last_user={location}; Path=/; HttpOnly", "visited=1; Max-Age=3600"]
        return _json(201, {"user": user}, event, {"Location": location}, cookies)
    if method == "DELETE":
        USERS.pop(user_id, None)
        return {"statusCode": 204}
    return _json(405, {"error": f"{method} not allowed"}, event, {"Allow": "GET, PUT, DELETE"})
