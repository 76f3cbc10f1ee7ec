-- wrk: every request is an asynchronous call (answered 202 once accepted).
wrk.method = "POST"
wrk.body = "hello world"
wrk.headers["Content-Type"] = "text/plain"
wrk.headers["Prefer"] = "respond-async"
