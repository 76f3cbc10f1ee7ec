// The operator's live map (gateway/src/ui.rs): the areas and nodes from GET /ui/state,
// refreshed every few seconds, and every call from GET /events?scope=fleet drawn as it
// happens. All text from the server goes in with textContent (function names come from clients).
'use strict';
(() => {
  const SVG = 'http://www.w3.org/2000/svg';
  const W = 1000, H = 640, PAD = 28, FADE_MS = 6000, MAX_ROWS = 40;
  const COLORS = ['#0a66c2', '#1a7f37', '#b35900', '#7b3fbf', '#c2185b', '#00838f', '#5d4037'];
  const $ = (id) => document.getElementById(id);
  const nodes = new Map(); // id -> {entry, color, xy, g}
  let project = null;
  let calls = 0;

  function el(tag, attrs, parent) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }
  function html(tag, text, parent, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    if (parent) parent.appendChild(e);
    return e;
  }

  // Web Mercator, fit to the edges' areas and locations (the cloud, often far away, is drawn
  // at the map's border in its direction when it falls outside).
  function merc(lon, lat) {
    const l = Math.max(-85, Math.min(85, lat)) * Math.PI / 180;
    return [lon * Math.PI / 180, Math.log(Math.tan(Math.PI / 4 + l / 2))];
  }
  function fit(list) {
    const pts = [];
    for (const n of list) {
      if (n.role === 'cloud' && list.some((m) => m.role !== 'cloud')) continue;
      pts.push(merc(n.location.lon, n.location.lat));
      for (const ring of n.area || []) for (const [lon, lat] of ring) pts.push(merc(lon, lat));
    }
    if (pts.length === 0) pts.push(merc(0, 0));
    let [x0, y0, x1, y1] = [Infinity, Infinity, -Infinity, -Infinity];
    for (const [x, y] of pts) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
    // At least about 50 km across, so a city's areas show some coast around them.
    const MIN = 0.008;
    const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2;
    const k = Math.min((W - 2 * PAD) / Math.max(x1 - x0, MIN), (H - 2 * PAD) / Math.max(y1 - y0, MIN)) * 0.85;
    return (lon, lat) => {
      const [x, y] = merc(lon, lat);
      return [W / 2 + (x - cx) * k, H / 2 - (y - cy) * k];
    };
  }
  // A point inside the map: the projected one, or the border point in its direction.
  function clamp([x, y]) {
    const inside = x >= PAD && x <= W - PAD && y >= PAD && y <= H - PAD;
    if (inside) return { xy: [x, y], off: false };
    const dx = x - W / 2, dy = y - H / 2;
    const s = Math.min((W / 2 - PAD) / Math.abs(dx || 1e-9), (H / 2 - PAD) / Math.abs(dy || 1e-9));
    return { xy: [W / 2 + dx * s, H / 2 + dy * s], off: true };
  }
  const at = (lon, lat) => clamp(project(lon, lat)).xy;
  const path = (ring) => ring.map(([lon, lat], i) => {
    const [x, y] = project(lon, lat);
    return `${i ? 'L' : 'M'}${x.toFixed(1)},${y.toFixed(1)}`;
  }).join('') + 'Z';

  function drawLand(rings) {
    const g = $('land');
    g.replaceChildren();
    for (const ring of rings) el('path', { d: path(ring) }, g);
  }

  function drawTopology(state) {
    $('self').textContent = state.self;
    $('zone').textContent = state.zone;
    project = fit(state.nodes);
    const areas = $('areas'), layer = $('nodes');
    areas.replaceChildren();
    layer.replaceChildren();
    nodes.clear();
    state.nodes.forEach((n, i) => {
      const color = COLORS[i % COLORS.length];
      for (const ring of n.area || []) {
        el('path', { d: path(ring), 'data-area': n.id, fill: color, stroke: color }, areas);
      }
      const c = clamp(project(n.location.lon, n.location.lat));
      const g = el('g', { class: 'node' + (c.off ? ' offmap' : ''), 'data-node': n.id }, layer);
      el('circle', { cx: c.xy[0], cy: c.xy[1], r: n.role === 'cloud' ? 10 : 8, fill: color }, g);
      const label = el('text', { x: c.xy[0] + 12, y: c.xy[1] + 4 }, g);
      label.textContent = n.id + (n.role === 'cloud' ? ' (cloud: the world)' : '');
      if (c.xy[0] > W - 160) { label.setAttribute('x', c.xy[0] - 12); label.setAttribute('text-anchor', 'end'); }
      nodes.set(n.id, { entry: n, color, xy: c.xy, g });
    });
  }

  function drawCards(state) {
    const box = $('cards');
    box.replaceChildren();
    for (const n of state.nodes) {
      const s = n.status || {};
      const up = !s.error && s.ready === true;
      const card = html('article', null, box, 'card');
      card.dataset.nodeCard = n.id;
      const h = html('h3', n.id, card);
      html('span', n.role, h, 'role');
      html('span', s.error ? 'unreachable' : (s.ready ? 'ready' : 'not ready'), h, 'badge ' + (up ? 'up' : 'down'));
      const info = nodes.get(n.id);
      if (info) info.g.classList.toggle('down', !up);
      const dl = html('dl', null, card);
      const row = (k, v) => { html('dt', k, dl); return html('dd', v, dl); };
      if (s.error) { row('error', s.error); continue; }
      const load = s.load || {};
      const dd = row('load', null);
      const bar = html('span', null, dd, 'bar');
      const used = Math.min(1, (load.running || 0) / Math.max(1, load.max_concurrent || 1));
      html('i', null, bar).style.width = (used * 100).toFixed(0) + '%';
      dd.appendChild(document.createTextNode(`${load.running}/${load.max_concurrent} running, ${load.queued} queued`));
      const warm = Object.entries(load.functions || {}).map(([f, w]) => `${f} ${w.idle} idle/${w.busy} busy`);
      if (warm.length) row('instances', warm.join(', '));
      const fns = (s.functions || []).map((f) => {
        const v = (s.versions || {})[f];
        return v ? `${f}@${String(v).slice(0, 12)}` : f;
      });
      row('functions', fns.length ? fns.join(', ') : 'none');
      const l = s.latency_ms;
      row('latency', l ? `p50 ${l.p50.toFixed(1)} · p90 ${l.p90.toFixed(1)} · p99 ${l.p99.toFixed(1)} ms (last ${l.count})` : 'no calls yet');
    }
  }

  async function refresh(first) {
    try {
      const r = await fetch('/ui/state', { cache: 'no-store' });
      if (!r.ok) throw new Error(`/ui/state: ${r.status}`);
      const state = await r.json();
      if (first || nodes.size !== state.nodes.length || state.nodes.some((n) => !nodes.has(n.id))) {
        drawTopology(state);
        if (first) loadLand();
      }
      drawCards(state);
    } catch (e) {
      $('stream').textContent = 'state unavailable';
      $('stream').dataset.state = 'error';
    }
  }

  async function loadLand() {
    try {
      const r = await fetch('/ui/land.json');
      if (!r.ok) return;
      const land = await r.json();
      drawLand(land.rings);
      $('land-source').textContent = ' · base map: ' + land.source;
    } catch (e) { /* the map works without it */ }
  }

  function fading(e) {
    setTimeout(() => e.remove(), FADE_MS);
    return e;
  }
  function arrow(from, to, cls) {
    const a = nodes.get(from), b = nodes.get(to);
    if (!a || !b) return;
    const [x0, y0] = a.xy, [x1, y1] = b.xy;
    const mx = (x0 + x1) / 2 - (y1 - y0) * 0.2, my = (y0 + y1) / 2 + (x1 - x0) * 0.2;
    fading(el('path', { d: `M${x0},${y0} Q${mx},${my} ${x1},${y1}`, class: 'link ' + cls, 'marker-end': `url(#head-${cls})` }, $('links')));
  }
  function hit(id) {
    const n = nodes.get(id);
    if (!n) return;
    n.g.classList.remove('hit');
    void n.g.getBBox();
    n.g.classList.add('hit');
  }

  // The node cards follow the calls: a refresh shortly after one, at most one pending.
  let soon = null;
  function refreshSoon() {
    if (soon) return;
    soon = setTimeout(() => { soon = null; refresh(false); }, 300);
  }

  function onCall(ev) {
    calls += 1;
    refreshSoon();
    $('count').textContent = calls;
    logRow(ev);
    if (!project || ev.forwarded) return; // the node that forwarded it draws the call
    const ran = ev.node;
    if (ran) hit(ran);
    if (ev.client) {
      const xy = at(ev.client.lon, ev.client.lat);
      const target = nodes.get(ran || (ev.handover && ev.at) || ev.at);
      if (target) {
        fading(el('line', { x1: xy[0], y1: xy[1], x2: target.xy[0], y2: target.xy[1], class: 'link ran' }, $('links')));
      }
      fading(el('circle', { cx: xy[0], cy: xy[1], r: 6, class: 'call' + (ev.status >= 400 ? ' failed' : ''), 'data-call': ev.id }, $('calls-layer')));
    }
    if (ev.handover) arrow(ev.at, ev.handover.to, 'handover');
    if (ev.offload) arrow(ev.at, ev.offload.to, 'offload');
  }

  function logRow(ev) {
    const list = $('calls');
    const li = document.createElement('li');
    li.dataset.requestId = ev.id;
    li.dataset.node = ev.node || '';
    html('span', new Date(ev.ts_ms).toLocaleTimeString() + ' ', li);
    html('b', ev.function, li);
    let where = ` at ${ev.at}`;
    if (ev.handover) where += ` → 307 to ${ev.handover.to}`;
    else if (ev.offload) where += ` → ran on ${ev.offload.to}`;
    else if (ev.node) where += ev.node === ev.at ? '' : ` → ${ev.node}`;
    html('span', where + ' ', li);
    html('span', ev.status, li, 'st' + (ev.status >= 400 ? ' err' : ''));
    html('span', ` ${Number(ev.latency_ms).toFixed(1)} ms`, li);
    if (ev.placement) html('span', ev.placement, li, 'tag');
    if (ev.forwarded) html('span', 'forwarded here', li, 'tag');
    if (ev.client) html('span', `client ${ev.client.lat.toFixed(4)},${ev.client.lon.toFixed(4)} (${ev.client.source})`, li, 'tag');
    list.prepend(li);
    while (list.children.length > MAX_ROWS) list.lastElementChild.remove();
  }

  function markers() {
    const defs = el('defs', {}, $('map'));
    for (const [cls, color] of [['handover', '#e07b00'], ['offload', '#7b3fbf']]) {
      const m = el('marker', { id: `head-${cls}`, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, defs);
      el('path', { d: 'M0,0L10,5L0,10z', fill: color }, m);
    }
  }

  function stream() {
    const es = new EventSource('/events?scope=fleet');
    const st = $('stream');
    es.onopen = () => { st.textContent = 'live'; st.dataset.state = 'open'; };
    es.onerror = () => { st.textContent = 'reconnecting'; st.dataset.state = 'error'; };
    es.onmessage = (m) => {
      try { onCall(JSON.parse(m.data)); } catch (e) { /* not a call event */ }
    };
    es.addEventListener('lost', (m) => {
      try { $('lost').textContent = JSON.parse(m.data).lost_total; } catch (e) { /* ignore */ }
    });
    es.addEventListener('peer', (m) => {
      let p;
      try { p = JSON.parse(m.data); } catch (e) { return; }
      const box = $('peers');
      let span = box.querySelector(`[data-peer="${CSS.escape(p.node)}"]`);
      if (!span) { span = html('span', null, box, 'peer'); span.dataset.peer = p.node; }
      span.dataset.connected = String(p.connected);
      span.textContent = `${p.node} ${p.connected ? '✓' : '✗'}`;
      span.title = p.error || 'stream connected';
    });
  }

  markers();
  refresh(true).then(stream);
  setInterval(() => refresh(false), 2000);
})();
