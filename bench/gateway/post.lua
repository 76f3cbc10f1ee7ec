-- wrk: every request is a tinyFaaS-style call, POST with a small fixed body.
wrk.method = "POST"
wrk.body = "hello world"
wrk.headers["Content-Type"] = "text/plain"
