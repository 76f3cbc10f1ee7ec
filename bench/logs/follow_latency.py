"""How soon `geofaas logs --follow` shows a line a function printed (docs/operations.md).

Run from the folder of a `geofaas up` (the Berlin demo) after `geofaas deploy ./talk`, where
talk/fn.py prints its input:  python3 bench/logs/follow_latency.py [path/to/geofaas]
"""
import subprocess, sys, threading, time, statistics, queue
BIN = sys.argv[1] if len(sys.argv) > 1 else "geofaas"
f = subprocess.Popen([BIN, "logs", "talk", "--follow"], stdout=subprocess.PIPE, text=True, bufsize=1)
q = queue.Queue()
def rd():
    for line in f.stdout:
        q.put((time.monotonic(), line))
threading.Thread(target=rd, daemon=True).start()
time.sleep(1.0)
while not q.empty(): q.get()
sent, ans = [], []
for i in range(30):
    rid = f"lat-{i}"
    node = ["127.0.0.11", "127.0.0.12"][i % 2]
    loc = ["52.5101,13.3250", "52.3542,13.0559"][i % 2]
    t0 = time.monotonic()
    subprocess.run(["curl", "-sS", "-o", "/dev/null", "--cacert", ".geofaas/ca.pem", "-H", f"X-Client-Location: {loc}", "-H", f"X-Request-Id: {rid}", "-d", "hi", f"https://{node}:8443/fn/talk"], check=True)
    t1 = time.monotonic()
    while True:
        t, line = q.get(timeout=10)
        if rid + " stdout" in line:
            break
    sent.append((t - t0) * 1000); ans.append((t - t1) * 1000)
    time.sleep(0.2)
f.kill()
for name, xs in [("from sending the call", sent), ("from curl returning", ans)]:
    xs = sorted(xs)
    print(f"{name}: n={len(xs)} median {statistics.median(xs):.1f} ms, p90 {xs[int(0.9*len(xs))-1]:.1f} ms, max {xs[-1]:.1f} ms")
