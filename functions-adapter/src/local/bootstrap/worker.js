// geofaas local runtime: nodejs workers for tinyFaaS-format function folders.
//
// Started as `node worker.js <function-dir>` (`node_spares = 0`): requires the folder once
// (the cold start; `package.json` "main" or `index.js`, which must export `(req, res) => ...`),
// then serves calls one at a time over stdin/stdout with length-prefixed frames:
//
//   request  (host -> worker): u32be len, headers JSON object; u32be len, raw body
//   response (worker -> host): u8 kind, u32be len, payload
//     kind 0 = output, 1 = the handler threw (payload: stack, worker stays usable),
//     2 = ready, 3 = require failed (worker exits), 4 = failed and this worker retires.
//
// Started as `node worker.js --generic`: a generic worker of the runtime's pool. It answers
// ready once node and this file are loaded, with no function. Its first request frame is one
// frame (u32be len, JSON `{"dir", "env"}`): it sets the environment, changes to the folder,
// requires the function and answers ready (or require failed), and from then on is an instance
// of that function only, serving calls as above.
//
// The protocol keeps the original stdout writer; process.stdout.write (and so
// console.log) is pointed at stderr so the function's prints never corrupt the framing. On
// stderr, lines are tagged for the host's function logs (functions-adapter/src/local/logs.rs):
// "\x1e<request id>" opens a call and "\x1e" closes it; each stdout line starts with "\x1f".
"use strict";

const path = require("path");

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

function encode(value) {
  if (value === undefined || value === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(value)) return value;
  if (typeof value === "string") return Buffer.from(value, "utf8");
  if (typeof value === "object") return Buffer.from(JSON.stringify(value), "utf8");
  return Buffer.from(String(value), "utf8");
}

let handler = null;

// Requires the function in `dir`; reports kind 3 and exits if it cannot be loaded.
function load(dir) {
  const fnDir = path.resolve(dir);
  try {
    process.chdir(fnDir);
    process.argv[2] = fnDir;
    let loaded = require(fnDir);
    if (typeof loaded !== "function" && loaded && typeof loaded.default === "function") {
      loaded = loaded.default;
    }
    if (typeof loaded !== "function") {
      throw new Error(`${fnDir} does not export a function (req, res) => ...`);
    }
    handler = loaded;
  } catch (err) {
    send(3, describe(err));
    process.exit(1);
  }
}

const generic = process.argv[2] === "--generic";
if (!generic) {
  load(process.argv[2]);
}

let current = null; // the call in flight: { done(kind, payload) }

process.on("uncaughtException", (err) => {
  callTag("");
  send(4, describe(err));
  process.exit(1);
});
process.on("unhandledRejection", (err) => {
  send(4, describe(err));
  process.exit(1);
});

function run(headers, body) {
  let finished = false;
  const done = (kind, payload) => {
    if (finished) return;
    finished = true;
    current = null;
    callTag("");
    send(kind, payload);
    pump();
  };
  current = { done };
  callTag(headers["x-request-id"] || "");
  const req = {
    method: "POST",
    path: "/fn",
    url: "/fn",
    body: body.toString("utf8"),
    rawBody: body,
    headers,
    get: (name) => headers[String(name).toLowerCase()],
    header: (name) => headers[String(name).toLowerCase()],
  };
  const res = {
    statusCode: 200,
    status(code) { this.statusCode = code; return this; },
    set() { return this; },
    header() { return this; },
    type() { return this; },
    send(value) { done(this.statusCode >= 400 ? 1 : 0, encode(value)); return this; },
    json(value) { done(this.statusCode >= 400 ? 1 : 0, Buffer.from(JSON.stringify(value), "utf8")); return this; },
    end(value) { return this.send(value); },
    sendStatus(code) { this.statusCode = code; return this.send(String(code)); },
  };
  try {
    const ret = handler(req, res);
    if (ret && typeof ret.then === "function") {
      ret.then(undefined, (err) => done(1, describe(err)));
    }
  } catch (err) {
    done(1, describe(err));
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
  if (current !== null) return;
  const head = takeFrame(0);
  if (head === null) return;
  if (handler === null) {
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
    load(request.dir);
    send(2, Buffer.alloc(0));
    pump();
    return;
  }
  const body = takeFrame(head.end);
  if (body === null) return;
  pending = pending.subarray(body.end);
  let headers = {};
  try {
    headers = head.data.length ? JSON.parse(head.data.toString("utf8")) : {};
  } catch (err) {
    headers = {};
  }
  run(headers, Buffer.from(body.data));
}

process.stdin.on("data", (chunk) => {
  pending = Buffer.concat([pending, chunk]);
  pump();
});
process.stdin.on("end", () => process.exit(0));

send(2, Buffer.alloc(0));
