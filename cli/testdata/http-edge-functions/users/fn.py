"""users: a REST resource written for an AWS Lambda function URL (payload format 2.0), nothing
geofaas-specific: PUT /users/{id} creates (201, JSON, two cookies), GET reads (404 when absent),
DELETE answers 204. Each answer echoes what the handler saw."""
import json

USERS = {}


def handler(event, context):
    method = event["requestContext"]["http"]["method"]
    path = event["rawPath"]
    parts = [p for p in path.split("/") if p]
    saw = {
        "method": method,
        "rawPath": path,
        "query": event.get("queryStringParameters") or {},
        "rawQueryString": event.get("rawQueryString", ""),
        "body": event.get("body"),
        "node": event["headers"].get("x-geo-node"),
        "cookies": event.get("cookies") or [],
        "requestId": context.aws_request_id,
    }
    if len(parts) != 2 or parts[0] != "users":
        return {"statusCode": 404, "headers": {"Content-Type": "application/json"},
                "body": json.dumps({"error": "no such resource", "saw": saw})}
    uid = parts[1]
    if method == "PUT":
        USERS[uid] = event.get("body")
        return {
            "statusCode": 201,
            "headers": {"Content-Type": "application/json", "Location": path,
                        "Cache-Control": "no-store", "X-Handler": "users"},
            "cookies": ["session=abc; Path=/; HttpOnly", "theme=dark; Path=/"],
            "body": json.dumps({"created": uid, "saw": saw}),
        }
    if method == "DELETE":
        USERS.pop(uid, None)
        return {"statusCode": 204}
    if uid not in USERS:
        return {"statusCode": 404, "headers": {"Content-Type": "application/json"},
                "body": json.dumps({"error": f"user {uid} not found", "saw": saw})}
    return {"statusCode": 200, "headers": {"Content-Type": "application/json"},
            "body": json.dumps({"user": uid, "data": USERS[uid], "saw": saw})}
