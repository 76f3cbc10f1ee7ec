// sse-node: a fetch-style function (`fetch(request, env, ctx)` returning a Response).
//
//   GET   -> text/event-stream: 5 events, 300 ms apart, each `data: {"n":i,...}`
//   PATCH -> 201, JSON echo of the body
"use strict";

const EVENTS = 5;
const GAP_MS = 300;

module.exports = {
  async fetch(request, env, ctx) {
    const node = request.headers.get("x-geo-node");
    if (request.method === "PATCH") {
      const text = await request.text();
      let body;
      try {
        body = JSON.parse(text);
      } catch (err) {
        body = text;
      }
      return Response.json({ received: body, node }, { status: 201 });
    }
    if (request.method !== "GET") {
      return new Response(`${request.method} not allowed\n`, { status: 405, headers: { allow: "GET, PATCH" } });
    }
    const encoder = new TextEncoder();
    let timer = null;
    const stream = new ReadableStream({
      start(controller) {
        let n = 0;
        const tick = () => {
          n += 1;
          const event = { n, of: EVENTS, at: new Date().toISOString(), node };
          controller.enqueue(encoder.encode(`data: ${JSON.stringify(event)}\n\n`));
          if (n === EVENTS) controller.close();
          else timer = setTimeout(tick, GAP_MS);
        };
        tick();
      },
      cancel() {
        clearTimeout(timer);
      },
    });
    return new Response(stream, {
      headers: { "content-type": "text/event-stream", "cache-control": "no-cache" },
    });
  },
};
