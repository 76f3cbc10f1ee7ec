// ticker: a fetch-style function (as on Workers, Deno and Bun). GET streams five server-sent
// events 300 ms apart; PATCH answers 201 with the JSON it was sent and what it saw.
module.exports = {
  async fetch(request) {
    const url = new URL(request.url);
    if (request.method === "PATCH") {
      const sent = await request.json();
      return new Response(JSON.stringify({ patched: sent, path: url.pathname, node: request.headers.get("X-Geo-Node") }), {
        status: 201,
        headers: { "content-type": "application/json" },
      });
    }
    const encoder = new TextEncoder();
    let n = 0;
    const stream = new ReadableStream({
      async pull(controller) {
        if (n > 0) await new Promise((r) => setTimeout(r, 300));
        controller.enqueue(encoder.encode(`data: {"n":${n}}\n\n`));
        n += 1;
        if (n === 5) controller.close();
      },
    });
    return new Response(stream, { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } });
  },
};
