// geofaas: runs the tinyFaaS-format Node.js function in ./function (a module exporting
// (req, res) => res.send(str)) on a remote platform: `main` is an Apache OpenWhisk action's
// entry, `handler` an AWS Lambda handler (`geofaas_handler.handler`). Written by
// `geofaas deploy`; it calls the function the way the embedded runtime does and returns the
// output as {"geofaas_body": text} (or {"geofaas_body_base64": b64} for a Buffer), which the
// adapters unwrap back into the raw output. A thrown error, a rejected promise or a status of
// 400 or more is the platform's function error. The adapters pass no request headers.
"use strict";

const path = require("path");

const fnDir = path.join(__dirname, "function");
process.chdir(fnDir);
const mod = require(fnDir);
// A module written for the platform itself (`exports.handler = async (event, context)` for
// Lambda, `exports.main = (params)` for OpenWhisk) is called as the platform would call it, its
// answer passed on unchanged (`event = "http"` maps a function-URL or web-action answer back).
const own = mod && typeof mod === "object" ? mod : {};
let fn = mod;
if (typeof fn !== "function" && fn && typeof fn.default === "function") {
  fn = fn.default;
}
if (typeof fn !== "function" && typeof own.handler !== "function" && typeof own.main !== "function") {
  throw new Error(`${fnDir} exports neither a function (req, res) => ... nor a handler`);
}

function encode(value) {
  if (value === undefined || value === null) return Buffer.alloc(0);
  if (Buffer.isBuffer(value)) return value;
  if (typeof value === "string") return Buffer.from(value, "utf8");
  if (typeof value === "object") return Buffer.from(JSON.stringify(value), "utf8");
  return Buffer.from(String(value), "utf8");
}

function output(value) {
  if (Buffer.isBuffer(value)) return { geofaas_body_base64: value.toString("base64") };
  return { geofaas_body: encode(value).toString("utf8") };
}

function run(body) {
  if (typeof fn !== "function") {
    return Promise.reject(new Error(`${fnDir} has no (req, res) function for this platform's raw calls`));
  }
  return new Promise((resolve, reject) => {
    const raw = Buffer.from(body || "", "utf8");
    const headers = {};
    let finished = false;
    const done = (status, value) => {
      if (finished) return;
      finished = true;
      if (status >= 400) reject(new Error(encode(value).toString("utf8") || `status ${status}`));
      else resolve(output(value));
    };
    const req = {
      method: "POST",
      path: "/fn",
      url: "/fn",
      body: raw.toString("utf8"),
      rawBody: raw,
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
      send(value) { done(this.statusCode, value); return this; },
      json(value) { done(this.statusCode, JSON.stringify(value)); return this; },
      end(value) { return this.send(value); },
      sendStatus(code) { this.statusCode = code; return this.send(String(code)); },
    };
    try {
      const ret = fn(req, res);
      if (ret && typeof ret.then === "function") ret.then(undefined, reject);
    } catch (err) {
      reject(err);
    }
  });
}

const compact = (value) => JSON.stringify(value);

// OpenWhisk: a JSON-object body arrives as the parameters, any other as {"__ow_body": text}.
exports.main = (args) => {
  if (typeof fn !== "function" && typeof own.handler !== "function" && typeof own.main === "function") {
    return own.main(args);
  }
  const keys = Object.keys(args || {});
  if (keys.length === 1 && keys[0] === "__ow_body" && typeof args.__ow_body === "string") {
    return run(args.__ow_body);
  }
  return run(compact(args));
};

// Lambda: a JSON body arrives parsed, an empty one as {}, any other as a JSON string.
exports.handler = async (event, context) => {
  if (typeof own.handler === "function") return own.handler(event, context);
  if (typeof event === "string") return run(event);
  if (event && typeof event === "object" && !Array.isArray(event) && Object.keys(event).length === 0) {
    return run("");
  }
  return run(compact(event));
};
