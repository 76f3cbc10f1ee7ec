"""The dependency cycles between a crate's top-level modules, counted from `crate::X` uses
outside comments (tests' files left out): prints the module count and each strongly connected
component of more than one module; with module names after the folder, their dependencies.

Usage: python3 scripts/module-cycles.py gateway/src [MODULE ...]
"""
import re,sys,pathlib,collections
root=pathlib.Path(sys.argv[1])
mods={}
for p in root.iterdir():
    if p.name in("lib.rs","main.rs"): continue
    if p.suffix==".rs": mods.setdefault(p.stem,[]).append(p)
    elif p.is_dir(): mods.setdefault(p.name,[]).extend(p.rglob("*.rs"))
for m in list(mods):
    if (root/f"{m}.rs").exists() and (root/m).is_dir(): mods[m]=[root/f"{m}.rs"]+list((root/m).rglob("*.rs"))
g=collections.defaultdict(set)
for m,files in mods.items():
    for f in files:
        if f.name in ("tests.rs",) or "tests" in f.stem.split("_"): continue
        t=f.read_text()
        t="\n".join(l for l in t.split("\n") if not l.strip().startswith("//"))
        t=re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*","",t,flags=re.S)
        for d in set(re.findall(r"crate::([a-z_]+)",t)):
            if d in mods and d!=m: g[m].add(d)
# tarjan
idx={};low={};st=[];on=set();res=[];c=[0]
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in g[v]:
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v:break
        res.append(comp)
sys.setrecursionlimit(10000)
for v in mods:
    if v not in idx: sc(v)
big=[sorted(x) for x in res if len(x)>1]
print(len(mods),"modules;",[(len(b),b) for b in big])
if len(sys.argv)>2:
    for m in sorted(sys.argv[2:]): print(m,"->",sorted(g[m]))
