"""broken: answers what no HTTP server may send: status 999 and a header with CR/LF in it."""


def handler(event, context):
    return {"statusCode": 999 if "status" in event["rawPath"] else 200,
            "headers": {"X-Evil": "a\r\nSet-Cookie: injected=1"},
            "body": "should never reach the client"}
