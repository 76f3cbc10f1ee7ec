// geofaas local runtime: nodejs workers for tinyFaaS-format function folders.
//
// Started as `node worker.js <function-dir>` (`node_spares = 0`): loads the folder once (the
// cold start; `package.json` "main", `index.js` or `index.mjs`; an ES module is loaded with
// import(), and ready waits for it), then serves calls one at a time over stdin/stdout with
// length-prefixed frames:
//
//   request  (host -> worker): u32be len, head JSON object; u32be len, raw body
//     head: {"method", "path" (after /fn/<name>, "/" when none), "query" (without "?"), "url",
//     "source_ip" (or null), "request_id", "headers": [[lower-case name, value], ...]}
//     (a head without a "headers" list is read as the request headers themselves: the older
//     format, where the method is POST and the path "/")
//   response (worker -> host): u8 kind, u32be len, payload
//     kind 0 = output (the whole body of a 200 with no headers; or, after kind 7, the whole
//     body of that response), 1 = the handler threw (payload: stack, worker stays usable),
//     2 = ready, 3 = loading failed (worker exits), 4 = failed and this worker retires,
//     7 = a response head, JSON {"status", "headers": [[name, value], ...]}, followed by one
//     kind 0 (the whole body) or by kind 8 frames (a body chunk each, sent as it arrives) and
//     kind 9 (empty: the end of the stream); kind 1 or 4 during a stream fails the call.
//   The worker passes status and headers through as the function gave them (as strings); the
//   host validates them.
//
// The function is the first of these the module exports (or its `default` export):
// - an object with a `fetch(request, env, ctx)` method (the fetch-handler style): called with
//   a WHATWG Request, process.env and a ctx with waitUntil/passThroughOnException; it returns
//   (or resolves to) a Response, whose body is streamed as it is read;
// - `handler(event, context[, callback])`: an AWS Lambda function-URL handler (payload format
//   2.0), called with the event and context Lambda would pass and answered the way Lambda maps
//   its result (statusCode, headers, multiValueHeaders, cookies, body, isBase64Encoded; any
//   other value is JSON);
// - a function `(req, res) => ...` (the tinyFaaS format): req has method, path (after the
//   function's name), query (parsed), url (path?query), body (text), rawBody, headers, get();
//   res has status, set/header/setHeader/append/type/cookie, send/json/end/sendStatus and
//   write/writeHead (which stream). With the status left at 200 and no header set the answer
//   is kind 0 as it always was; otherwise it is kind 7 with that status and those headers.
//
// Started as `node worker.js --generic`: a generic worker of the runtime's pool. It answers
// ready once node and this file are loaded, with no function. Its first request frame is one
// frame (u32be len, JSON `{"dir", "env"}`): it sets the environment, changes to the folder,
// loads the function and answers ready (or loading failed), and from then on is an instance
// of that function only, serving calls as above.
//
// The protocol keeps the original stdout writer; process.stdout.write (and so
// console.log) is pointed at stderr so the function's prints never corrupt the framing. On
// stderr, lines are tagged for the host's function logs (functions-adapter/src/local/logs.rs):
// "\x1e<request id>" opens a call and "\x1e" closes it (just before the call's last frame);
// each stdout line starts with "\x1f".
"use strict";

const fs = require("fs");
const path = require("path");
const { pathToFileURL } = require("url");

const protoWrite = process.stdout.write.bind(process.stdout);
const errWrite = process.stderr.write.bind(process.stderr);
let stdoutPartial = "";

// Whole lines of the function's stdout, tagged, on stderr (writes to pipes are synchronous).
process.stdout.write = (chunk, encoding, callback) => {
  const text = Buffer.isBuffer(chunk) || chunk instanceof Uint8Array
    ? Buffer.from(chunk).toString("utf8")
    : String(chunk);
  const lines = (stdoutPartial + text).split("\n");
  stdoutPartial = lines.pop();
  for (const line of lines) errWrite(`\x1f${line}\n`);
  const cb = typeof encoding === "function" ? encoding : callback;
  if (typeof cb === "function") process.nextTick(cb);
  return true;
};

// Opens (or, with "", closes) a call on stderr, after what was printed so far.
function callTag(requestId) {
  if (stdoutPartial !== "") {
    errWrite(`\x1f${stdoutPartial}\n`);
    stdoutPartial = "";
  }
  errWrite(`\x1e${String(requestId).replace(/\n/g, " ")}\n`);
}

const KIND_OUTPUT = 0;
const KIND_RAISED = 1;
const KIND_HEAD = 7;
const KIND_CHUNK = 8;
const KIND_END = 9;
const EMPTY = Buffer.alloc(0);

function send(kind, payload) {
  const head = Buffer.alloc(5);
  head.writeUInt8(kind, 0);
  head.writeUInt32BE(payload.length, 1);
  protoWrite(Buffer.concat([head, payload]));
}

// The stack, then the message on the last line (where the host looks for a summary).
function describe(err) {
  const text = err && err.stack ? `${err.stack}\n${err}` : String(err);
  return Buffer.from(text, "utf8");
}

function bytesOf(value) {
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof ArrayBuffer) return Buffer.from(value);
  if (ArrayBuffer.isView(value)) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  return null;
}

function encode(value) {
  if (value === undefined || value === null) return EMPTY;
  const bytes = bytesOf(value);
  if (bytes !== null) return bytes;
  if (typeof value === "string") return Buffer.from(value, "utf8");
  if (typeof value === "object") return Buffer.from(JSON.stringify(value), "utf8");
  return Buffer.from(String(value), "utf8");
}

function typeName(value) {
  if (value === null) return "null";
  if (typeof value === "object") {
    const ctor = value.constructor && value.constructor.name;
    return ctor ? `${ctor} object` : "object";
  }
  return typeof value;
}

// A header value as the function gave it, as a string.
function scalar(value) {
  if (typeof value === "string") return value;
  const bytes = bytesOf(value);
  if (bytes !== null) return bytes.toString("utf8");
  return String(value);
}

function addHeader(pairs, name, value) {
  if (value === undefined || value === null) return;
  if (Array.isArray(value)) {
    for (const v of value) addHeader(pairs, name, v);
    return;
  }
  pairs.push([scalar(name), scalar(value)]);
}

// The status as given, as a number where it is one (the host validates it).
function statusOf(code) {
  if (typeof code === "string" && /^\s*\d+\s*$/.test(code)) return Number(code);
  return code;
}

function headFrame(status, pairs) {
  return Buffer.from(JSON.stringify({ status: statusOf(status), headers: pairs }), "utf8");
}

// ---------------------------------------------------------------------------------------------
// One call's request.

function parseHead(head) {
  if (head === null || typeof head !== "object" || Array.isArray(head)) head = {};
  const req = { started: Date.now() };
  let requestId;
  if (Array.isArray(head.headers)) {
    req.pairs = head.headers
      .filter((p) => Array.isArray(p) && p.length === 2)
      .map(([k, v]) => [String(k).toLowerCase(), String(v)]);
    req.method = String(head.method || "POST").toUpperCase();
    req.path = String(head.path || "/");
    req.query = String(head.query || "");
    req.url = String(head.url || "");
    req.sourceIp = head.source_ip === undefined || head.source_ip === null ? null : String(head.source_ip);
    requestId = head.request_id;
  } else {
    // The older head: the request headers as one object.
    req.pairs = Object.entries(head).map(([k, v]) => [String(k).toLowerCase(), String(v)]);
    req.method = "POST";
    req.path = "/";
    req.query = "";
    req.url = "";
    req.sourceIp = null;
  }
  if (requestId === undefined || requestId === null) {
    const found = req.pairs.find(([k]) => k === "x-request-id");
    requestId = found ? found[1] : "";
  }
  req.requestId = String(requestId);
  req.timeoutMs = typeof head.timeout_ms === "number" ? head.timeout_ms : 30000;
  return req;
}

// The headers as an object, repeated names' values joined with `sep` (cookie with "; ").
function joined(pairs, sep, skip) {
  const out = {};
  for (const [name, value] of pairs) {
    if (skip && skip.includes(name)) continue;
    if (Object.prototype.hasOwnProperty.call(out, name)) {
      out[name] += (name === "cookie" ? "; " : sep) + value;
    } else {
      out[name] = value;
    }
  }
  return out;
}

function absoluteUrl(req) {
  if (req.url) return req.url;
  return `http://localhost${req.path}${req.query ? `?${req.query}` : ""}`;
}

// ---------------------------------------------------------------------------------------------
// Streams: a WHATWG ReadableStream, an async iterable (Node streams too) or an iterator.

function isStream(value) {
  if (value === null || typeof value !== "object") return false;
  if (bytesOf(value) !== null || Array.isArray(value)) return false;
  if (typeof value.getReader === "function") return true;
  if (typeof value[Symbol.asyncIterator] === "function") return true;
  return typeof value[Symbol.iterator] === "function" && typeof value.next === "function";
}

// Sends every chunk of `stream` as kind 8 as it comes, then ends the call with kind 9.
async function pipeStream(call, stream) {
  const each = (chunk) => {
    const bytes = encode(chunk);
    if (bytes.length && !call.finished) call.send(KIND_CHUNK, bytes);
  };
  if (typeof stream.getReader === "function") {
    const reader = stream.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done || call.finished) break;
        each(value);
      }
    } finally {
      if (call.finished) reader.cancel().catch(() => {});
    }
  } else if (typeof stream[Symbol.asyncIterator] === "function") {
    for await (const chunk of stream) {
      if (call.finished) break;
      each(chunk);
    }
  } else {
    for (const chunk of stream) {
      if (call.finished) break;
      each(chunk);
    }
  }
  call.done(KIND_END, EMPTY);
}

// ---------------------------------------------------------------------------------------------
// The fetch-handler style.

function isResponse(value) {
  if (typeof Response === "function" && value instanceof Response) return true;
  return value !== null && typeof value === "object" && typeof value.status === "number"
    && value.headers && typeof value.headers.forEach === "function" && "body" in value;
}

function responseHeaders(headers) {
  const pairs = [];
  headers.forEach((value, name) => {
    if (String(name).toLowerCase() !== "set-cookie") pairs.push([String(name), String(value)]);
  });
  let cookies = [];
  if (typeof headers.getSetCookie === "function") {
    cookies = headers.getSetCookie();
  } else if (headers.get("set-cookie") !== null) {
    cookies = [headers.get("set-cookie")];
  }
  for (const cookie of cookies) pairs.push(["set-cookie", String(cookie)]);
  return pairs;
}

async function runFetch(call, req, body) {
  const headers = new Headers();
  for (const [name, value] of req.pairs) {
    try {
      headers.append(name, value);
    } catch (err) {
      // A header WHATWG Headers refuses is left out of the Request.
    }
  }
  const init = { method: req.method, headers };
  if (req.method !== "GET" && req.method !== "HEAD" && body.length) init.body = body;
  const request = new Request(absoluteUrl(req), init);
  const ctx = {
    waitUntil(promise) {
      if (promise && typeof promise.then === "function") {
        promise.then(undefined, (err) => console.error("waitUntil:", err));
      }
    },
    passThroughOnException() {},
  };
  const response = await entry.target.fetch(request, process.env, ctx);
  if (!isResponse(response)) {
    throw new TypeError(`fetch must return a Response, got ${typeName(response)}`);
  }
  call.send(KIND_HEAD, headFrame(response.status, responseHeaders(response.headers)));
  if (response.body === null || response.body === undefined) {
    call.done(KIND_OUTPUT, EMPTY);
    return;
  }
  await pipeStream(call, response.body);
}

// ---------------------------------------------------------------------------------------------
// The AWS Lambda function-URL style (payload format 2.0).

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const BINARY_TYPES = [
  "application/octet-stream",
  "application/zip",
  "application/gzip",
  "application/pdf",
  "application/protobuf",
  "application/x-protobuf",
  "application/wasm",
];

function isBinaryType(contentType) {
  const base = String(contentType || "").split(";")[0].trim().toLowerCase();
  return BINARY_TYPES.includes(base) || /^(image|audio|video|font)\//.test(base);
}

function functionName(req) {
  try {
    const p = new URL(absoluteUrl(req)).pathname;
    if (p.startsWith("/fn/")) {
      const name = decodeURIComponent(p.slice(4).split("/")[0]);
      if (name) return name;
    }
  } catch (err) {
    // fall through
  }
  return process.env.AWS_LAMBDA_FUNCTION_NAME || path.basename(process.cwd());
}

function lambdaEvent(req, body) {
  let url = null;
  try {
    url = new URL(absoluteUrl(req));
  } catch (err) {
    url = null;
  }
  const netloc = (url && url.host) || "localhost";
  const hostname = (url && url.hostname) || "localhost";
  const headers = joined(req.pairs, ",", ["cookie"]);
  const setDefault = (name, value) => {
    if (!Object.prototype.hasOwnProperty.call(headers, name)) headers[name] = value;
  };
  setDefault("host", netloc);
  if (req.sourceIp) setDefault("x-forwarded-for", req.sourceIp);
  if (url) {
    const scheme = url.protocol.replace(/:$/, "");
    setDefault("x-forwarded-proto", scheme);
    setDefault("x-forwarded-port", url.port || (scheme === "https" ? "443" : "80"));
  }
  const cookies = [];
  for (const [name, value] of req.pairs) {
    if (name !== "cookie") continue;
    for (const c of value.split(";")) if (c.trim()) cookies.push(c.trim());
  }
  const t = new Date(req.started);
  const two = (n) => String(n).padStart(2, "0");
  const stamp = `${two(t.getUTCDate())}/${MONTHS[t.getUTCMonth()]}/${t.getUTCFullYear()}:`
    + `${two(t.getUTCHours())}:${two(t.getUTCMinutes())}:${two(t.getUTCSeconds())} +0000`;
  const event = {
    version: "2.0",
    routeKey: "$default",
    rawPath: req.path,
    rawQueryString: req.query,
  };
  if (cookies.length) event.cookies = cookies;
  event.headers = headers;
  if (req.query) {
    const params = {};
    for (const [key, value] of new URLSearchParams(req.query)) {
      params[key] = Object.prototype.hasOwnProperty.call(params, key) ? `${params[key]},${value}` : value;
    }
    event.queryStringParameters = params;
  }
  const prefix = hostname.split(".")[0];
  event.requestContext = {
    accountId: "anonymous",
    apiId: prefix,
    domainName: netloc,
    domainPrefix: prefix,
    http: {
      method: req.method,
      path: req.path,
      protocol: "HTTP/1.1",
      sourceIp: req.sourceIp || "",
      userAgent: headers["user-agent"] || "",
    },
    requestId: req.requestId,
    routeKey: "$default",
    stage: "$default",
    time: stamp,
    timeEpoch: req.started,
  };
  if (body.length) {
    let text = null;
    if (!isBinaryType(headers["content-type"])) {
      try {
        text = new TextDecoder("utf-8", { fatal: true }).decode(body);
      } catch (err) {
        text = null;
      }
    }
    if (text === null) {
      event.body = body.toString("base64");
      event.isBase64Encoded = true;
    } else {
      event.body = text;
      event.isBase64Encoded = false;
    }
  } else {
    event.isBase64Encoded = false;
  }
  return event;
}

let memoryMb = null;
let logStream = null;

function memoryLimitMb() {
  if (memoryMb === null) {
    memoryMb = 128;
    try {
      const line = fs.readFileSync("/proc/self/limits", "utf8").split("\n")
        .find((l) => l.startsWith("Max address space"));
      const soft = line && line.slice("Max address space".length).trim().split(/\s+/)[0];
      if (soft && /^\d+$/.test(soft)) memoryMb = Math.floor(Number(soft) / (1024 * 1024));
    } catch (err) {
      // keep the default
    }
  }
  return memoryMb;
}

function lambdaContext(req, callback) {
  const name = functionName(req);
  const region = process.env.AWS_REGION || "local";
  if (logStream === null) {
    const d = new Date();
    const day = `${d.getUTCFullYear()}/${String(d.getUTCMonth() + 1).padStart(2, "0")}/${String(d.getUTCDate()).padStart(2, "0")}`;
    logStream = `${day}/[$LATEST]${require("crypto").randomBytes(16).toString("hex")}`;
  }
  const deadline = req.started + req.timeoutMs;
  return {
    callbackWaitsForEmptyEventLoop: true,
    awsRequestId: req.requestId,
    functionName: name,
    functionVersion: "$LATEST",
    invokedFunctionArn: `arn:aws:lambda:${region}:000000000000:function:${name}`,
    memoryLimitInMB: process.env.AWS_LAMBDA_FUNCTION_MEMORY_SIZE || String(memoryLimitMb()),
    logGroupName: `/aws/lambda/${name}`,
    logStreamName: logStream,
    identity: undefined,
    clientContext: undefined,
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: (err, result) => callback(err, result),
    succeed: (result) => callback(null, result),
    fail: (err) => callback(err || new Error("context.fail")),
  };
}

// [status, header pairs, body bytes or a stream] of a Lambda handler's result.
function lambdaResult(result) {
  if (result !== null && typeof result === "object" && !Array.isArray(result)
      && bytesOf(result) === null && Object.prototype.hasOwnProperty.call(result, "statusCode")) {
    const pairs = [];
    const headers = result.headers;
    if (headers && typeof headers === "object") {
      for (const [name, value] of Object.entries(headers)) addHeader(pairs, name, value);
    }
    const multi = result.multiValueHeaders;
    if (multi && typeof multi === "object") {
      for (const [name, value] of Object.entries(multi)) addHeader(pairs, name, value);
    }
    let cookies = result.cookies || [];
    if (!Array.isArray(cookies)) cookies = [cookies];
    for (const cookie of cookies) addHeader(pairs, "set-cookie", cookie);
    const body = result.body;
    let data;
    if (body === undefined || body === null) {
      data = EMPTY;
    } else if (isStream(body)) {
      return [result.statusCode, pairs, body];
    } else if (typeof body === "string" || bytesOf(body) !== null) {
      data = result.isBase64Encoded ? Buffer.from(scalar(body), "base64") : encode(body);
    } else {
      data = encode(JSON.stringify(body));
    }
    if (data.length && !pairs.some(([name]) => name.toLowerCase() === "content-type")) {
      pairs.push(["content-type", "application/json"]);
    }
    return [result.statusCode, pairs, data];
  }
  const bytes = bytesOf(result);
  if (bytes !== null) return [200, [["content-type", "application/octet-stream"]], bytes];
  // Any other JSON value (a string included) is the JSON body, as Lambda's function URLs do.
  return [200, [["content-type", "application/json"]], encode(JSON.stringify(result))];
}

async function runLambda(call, req, body) {
  const event = lambdaEvent(req, body);
  const target = entry.target;
  const result = await new Promise((resolve, reject) => {
    let settled = false;
    const callback = (err, value) => {
      if (settled) return;
      settled = true;
      if (err !== undefined && err !== null) reject(err);
      else resolve(value);
    };
    const ret = target.handler(event, lambdaContext(req, callback), callback);
    if (ret && typeof ret.then === "function") {
      ret.then((value) => callback(null, value), (err) => callback(err || new Error("the handler rejected")));
    } else if (target.handler.length < 3) {
      callback(null, ret);
    }
  });
  if (result === undefined || result === null) {
    call.done(KIND_OUTPUT, EMPTY);
    return;
  }
  if (isStream(result)) {
    call.send(KIND_HEAD, headFrame(200, []));
    await pipeStream(call, result);
    return;
  }
  const [status, pairs, data] = lambdaResult(result);
  call.send(KIND_HEAD, headFrame(status, pairs));
  if (isStream(data)) {
    await pipeStream(call, data);
    return;
  }
  call.done(KIND_OUTPUT, data);
}

// ---------------------------------------------------------------------------------------------
// The tinyFaaS style: (req, res) => ...

const TYPES = {
  json: "application/json",
  html: "text/html; charset=utf-8",
  htm: "text/html; charset=utf-8",
  text: "text/plain; charset=utf-8",
  txt: "text/plain; charset=utf-8",
  js: "application/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
  xml: "application/xml",
  csv: "text/csv; charset=utf-8",
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  svg: "image/svg+xml",
  bin: "application/octet-stream",
  "event-stream": "text/event-stream",
};

function mimeOf(type) {
  const t = String(type);
  if (t.includes("/")) return t;
  return TYPES[t.replace(/^\./, "").toLowerCase()] || "application/octet-stream";
}

function parseQuery(query) {
  const out = {};
  for (const [key, value] of new URLSearchParams(query)) {
    if (!Object.prototype.hasOwnProperty.call(out, key)) out[key] = value;
    else if (Array.isArray(out[key])) out[key].push(value);
    else out[key] = [out[key], value];
  }
  return out;
}

function cookieText(name, value, options) {
  const o = options || {};
  const text = typeof value === "object" ? `j:${JSON.stringify(value)}` : String(value);
  let cookie = `${name}=${encodeURIComponent(text)}`;
  if (o.maxAge !== undefined) {
    cookie += `; Max-Age=${Math.floor(o.maxAge / 1000)}`;
    if (!o.expires) cookie += `; Expires=${new Date(Date.now() + o.maxAge).toUTCString()}`;
  }
  if (o.domain) cookie += `; Domain=${o.domain}`;
  cookie += `; Path=${o.path || "/"}`;
  if (o.expires) cookie += `; Expires=${new Date(o.expires).toUTCString()}`;
  if (o.httpOnly) cookie += "; HttpOnly";
  if (o.secure) cookie += "; Secure";
  if (o.sameSite) cookie += `; SameSite=${o.sameSite === true ? "Strict" : o.sameSite}`;
  return cookie;
}

function runPlain(call, req, body) {
  const headers = joined(req.pairs, ", ");
  const url = `${req.path}${req.query ? `?${req.query}` : ""}`;
  const lookup = (name) => headers[String(name).toLowerCase()];
  const request = {
    method: req.method,
    path: req.path,
    url,
    originalUrl: url,
    query: parseQuery(req.query),
    body: body.toString("utf8"),
    rawBody: body,
    headers,
    ip: req.sourceIp,
    requestId: req.requestId,
    get: lookup,
    header: lookup,
  };
  const pairs = [];
  let streaming = false;
  const remove = (name) => {
    const lower = String(name).toLowerCase();
    for (let i = pairs.length - 1; i >= 0; i -= 1) {
      if (pairs[i][0].toLowerCase() === lower) pairs.splice(i, 1);
    }
  };
  const res = {
    statusCode: 200,
    locals: {},
    get headersSent() { return streaming || call.finished; },
    status(code) { this.statusCode = code; return this; },
    set(name, value) {
      if (name !== null && typeof name === "object") {
        for (const [k, v] of Object.entries(name)) this.set(k, v);
        return this;
      }
      remove(name);
      addHeader(pairs, name, value);
      return this;
    },
    header(name, value) { return this.set(name, value); },
    setHeader(name, value) { return this.set(name, value); },
    append(name, value) { addHeader(pairs, name, value); return this; },
    get(name) { return this.getHeader(name); },
    getHeader(name) {
      const lower = String(name).toLowerCase();
      const found = pairs.filter(([n]) => n.toLowerCase() === lower).map(([, v]) => v);
      if (found.length === 0) return undefined;
      return found.length === 1 ? found[0] : found;
    },
    removeHeader(name) { remove(name); return this; },
    type(type) { return this.set("content-type", mimeOf(type)); },
    contentType(type) { return this.type(type); },
    cookie(name, value, options) { return this.append("set-cookie", cookieText(name, value, options)); },
    clearCookie(name, options) {
      return this.append("set-cookie", cookieText(name, "", { ...options, expires: new Date(1), maxAge: undefined }));
    },
    send(value) {
      if (streaming) return this.end(value);
      const bytes = encode(value);
      if (this.statusCode !== 200 || pairs.length) {
        if (!call.finished) call.send(KIND_HEAD, headFrame(this.statusCode, pairs));
      }
      call.done(KIND_OUTPUT, bytes);
      return this;
    },
    json(value) {
      if (this.getHeader("content-type") === undefined) this.set("content-type", "application/json");
      const text = JSON.stringify(value);
      return this.send(text === undefined ? "" : text);
    },
    end(value) {
      const last = typeof value === "function" ? undefined : value;
      if (!streaming) return this.send(last);
      if (last !== undefined && last !== null) this.write(last);
      call.done(KIND_END, EMPTY);
      return this;
    },
    sendStatus(code) { this.statusCode = code; return this.send(String(code)); },
    writeHead(code, message, headers) {
      this.statusCode = code;
      const h = typeof message === "string" ? headers : message;
      if (h && typeof h === "object") this.set(h);
      return this;
    },
    flushHeaders() {
      if (!streaming && !call.finished) {
        streaming = true;
        call.send(KIND_HEAD, headFrame(this.statusCode, pairs));
      }
    },
    write(chunk) {
      if (call.finished) return false;
      this.flushHeaders();
      const bytes = encode(typeof chunk === "function" ? null : chunk);
      if (bytes.length) call.send(KIND_CHUNK, bytes);
      return true;
    },
  };
  const ret = entry.func(request, res);
  if (ret && typeof ret.then === "function") {
    ret.then(undefined, (err) => call.done(KIND_RAISED, describe(err)));
  }
}

// ---------------------------------------------------------------------------------------------
// Loading the function.

let entry = null; // { style: "fetch" | "lambda" | "plain", target, func }

function isEsm(file) {
  if (file.endsWith(".mjs")) return true;
  if (file.endsWith(".cjs")) return false;
  if (!file.endsWith(".js")) return false;
  for (let dir = path.dirname(file); ; dir = path.dirname(dir)) {
    const manifest = path.join(dir, "package.json");
    if (fs.existsSync(manifest)) {
      try {
        return JSON.parse(fs.readFileSync(manifest, "utf8")).type === "module";
      } catch (err) {
        return false;
      }
    }
    if (path.dirname(dir) === dir) return false;
  }
}

async function loadModule(fnDir) {
  let file;
  try {
    file = require.resolve(fnDir);
  } catch (err) {
    const mjs = path.join(fnDir, "index.mjs");
    if (!fs.existsSync(mjs)) throw err;
    file = mjs;
  }
  if (isEsm(file)) return import(pathToFileURL(file).href);
  try {
    return require(file);
  } catch (err) {
    if (err && (err.code === "ERR_REQUIRE_ESM" || err.code === "ERR_REQUIRE_ASYNC_MODULE")) {
      return import(pathToFileURL(file).href);
    }
    throw err;
  }
}

// fetch object > handler > plain function, on the module and then its default export.
function pick(mod, fnDir) {
  const candidates = [mod];
  if (mod !== null && mod !== undefined && (typeof mod === "object" || typeof mod === "function")
      && mod.default !== undefined && mod.default !== mod) {
    candidates.push(mod.default);
  }
  const present = (c) => c !== null && c !== undefined && (typeof c === "object" || typeof c === "function");
  for (const c of candidates) if (present(c) && typeof c.fetch === "function") return { style: "fetch", target: c };
  for (const c of candidates) if (present(c) && typeof c.handler === "function") return { style: "lambda", target: c };
  for (const c of candidates) if (typeof c === "function") return { style: "plain", func: c };
  throw new Error(
    `${fnDir} exports neither { fetch(request) }, nor handler(event, context), nor a function (req, res) => ...`,
  );
}

// Loads the function in `dir`; reports kind 3 and exits if it cannot be loaded.
async function load(dir) {
  const fnDir = path.resolve(dir);
  try {
    process.chdir(fnDir);
    process.argv[2] = fnDir;
    entry = pick(await loadModule(fnDir), fnDir);
  } catch (err) {
    send(3, describe(err));
    process.exit(1);
  }
}

const generic = process.argv[2] === "--generic";
// "generic": waiting for the function to become; "loading"; "ready": serving calls.
let state = generic ? "generic" : "loading";

function ready() {
  state = "ready";
  send(2, EMPTY);
  pump();
}

if (!generic) {
  load(process.argv[2]).then(ready);
}

let current = null; // the call in flight: { send, done, finished }

process.on("uncaughtException", (err) => {
  callTag("");
  send(4, describe(err));
  process.exit(1);
});
process.on("unhandledRejection", (err) => {
  if (current !== null) callTag("");
  send(4, describe(err));
  process.exit(1);
});

function run(rawHead, body) {
  let head = {};
  try {
    head = rawHead.length ? JSON.parse(rawHead.toString("utf8")) : {};
  } catch (err) {
    head = {};
  }
  const req = parseHead(head);
  const call = {
    finished: false,
    // A leading frame of the call (a response head, a chunk).
    send(kind, payload) {
      if (!this.finished) send(kind, payload);
    },
    // The call's last frame.
    done(kind, payload) {
      if (this.finished) return;
      this.finished = true;
      current = null;
      callTag("");
      send(kind, payload);
      pump();
    },
  };
  current = call;
  callTag(req.requestId);
  const failed = (err) => call.done(KIND_RAISED, describe(err));
  try {
    if (entry.style === "fetch") runFetch(call, req, body).then(undefined, failed);
    else if (entry.style === "lambda") runLambda(call, req, body).then(undefined, failed);
    else runPlain(call, req, body);
  } catch (err) {
    failed(err);
  }
}

let pending = Buffer.alloc(0);

function takeFrame(offset) {
  if (pending.length < offset + 4) return null;
  const len = pending.readUInt32BE(offset);
  if (pending.length < offset + 4 + len) return null;
  return { data: pending.subarray(offset + 4, offset + 4 + len), end: offset + 4 + len };
}

function pump() {
  if (current !== null || state === "loading") return;
  const head = takeFrame(0);
  if (head === null) return;
  if (state === "generic") {
    // A generic worker's first frame: the function it becomes.
    pending = pending.subarray(head.end);
    let request;
    try {
      request = JSON.parse(head.data.toString("utf8"));
    } catch (err) {
      send(3, describe(err));
      process.exit(1);
    }
    Object.assign(process.env, request.env || {});
    state = "loading";
    load(request.dir).then(ready);
    return;
  }
  const body = takeFrame(head.end);
  if (body === null) return;
  pending = pending.subarray(body.end);
  run(Buffer.from(head.data), Buffer.from(body.data));
}

process.stdin.on("data", (chunk) => {
  pending = Buffer.concat([pending, chunk]);
  pump();
});
process.stdin.on("end", () => process.exit(0));

if (generic) send(2, EMPTY);
