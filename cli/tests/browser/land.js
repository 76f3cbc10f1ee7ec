// Writes gateway/src/ui/land.json, the base map /ui draws: Natural Earth's 1:110m land
// (public domain, from the npm package world-atlas) as plain rings of [lon, lat] rounded to
// 0.1 degree (about the data's own precision at that scale). Run: `npm run land`.
'use strict';
const fs = require('fs');
const path = require('path');
const { feature } = require('topojson-client');
const topo = require('world-atlas/land-110m.json');

const land = feature(topo, topo.objects.land);
const rings = [];
for (const f of land.features) {
  const polys = f.geometry.type === 'Polygon' ? [f.geometry.coordinates] : f.geometry.coordinates;
  for (const poly of polys) {
    // The outer ring only: lakes are not drawn at this scale.
    const ring = [];
    for (const [lon, lat] of poly[0]) {
      const p = [Math.round(lon * 10) / 10, Math.round(lat * 10) / 10];
      const last = ring[ring.length - 1];
      if (!last || last[0] !== p[0] || last[1] !== p[1]) ring.push(p);
    }
    if (ring.length >= 4) rings.push(ring);
  }
}
const out = path.join(__dirname, '..', '..', '..', 'gateway', 'src', 'ui', 'land.json');
fs.writeFileSync(out, JSON.stringify({
  source: 'Natural Earth 1:110m land (public domain), via world-atlas 2.0.2',
  rings,
}) + '\n');
console.log(`${out}: ${rings.length} rings`);
